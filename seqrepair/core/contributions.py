"""Contributions (XEP-0040 §5.2): a subscriber's publication for another's source.

A contributor sends a publication to a source it does not own; the source's *owner* (the
publisher of that source) takes it into its own stream, numbered as its own publications and
marked with the contributor's identity, or refuses it. The contributor learns which: the
number its contribution got, or the owner's reason.

The identity travels as a reserved field of the publication, :data:`CONTRIBUTOR_FIELD`
(``$contributor``), beside :data:`CONTRIBUTION_FIELD` (``$contribution``, the id the component
gave the contribution), so it is journaled, replayed and archived with the publication and no
format changes. Only the component writes them: it sets ``$contributor`` from the
contributor's authenticated principal, and a publication carrying either field must match a
contribution the component handed its owner (:meth:`Desk.check_claim`), so nobody can claim to
be, or to have been given something by, another contributor.

:class:`Desk` is the component's book of contributions handed to owners and not yet answered:
pure state, no I/O, no clock (``now`` comes in). Each is :class:`Pending` until its owner
publishes it (:meth:`Desk.published`), refuses it (:meth:`Desk.refuse`), lets
``timeout`` pass without an answer (:meth:`Desk.expire`), or goes away
(:meth:`Desk.owner_gone`). Memory is bounded: at most ``max_pending`` per source, and the
ids of the last ``recent`` closed contributions are kept to recognise a late publication.
"""

from __future__ import annotations

import enum
import itertools
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import attrs

from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Publication

CONTRIBUTOR_FIELD = "$contributor"
"""The reserved field naming the principal that contributed a publication."""
CONTRIBUTION_FIELD = "$contribution"
"""The reserved field holding the id the component gave the contribution."""
RESERVED_FIELDS = (CONTRIBUTOR_FIELD, CONTRIBUTION_FIELD)


def contributor_of(pub: Publication) -> str | None:
    """The principal that contributed ``pub`` (None: its source's owner published it)."""
    value = pub.fields.get(CONTRIBUTOR_FIELD)
    return value if isinstance(value, str) else None


def contribution_of(pub: Publication) -> str | None:
    """The id of the contribution ``pub`` took in (None: not a contribution)."""
    value = pub.fields.get(CONTRIBUTION_FIELD)
    return value if isinstance(value, str) else None


def claims(fields: Mapping[str, Any]) -> bool:
    """Whether ``fields`` hold a reserved contribution field."""
    return CONTRIBUTOR_FIELD in fields or CONTRIBUTION_FIELD in fields


class Outcome(enum.Enum):
    """How a contribution ended."""

    PUBLISHED = "published"
    REFUSED = "refused"
    """The owner said no (its reason goes to the contributor)."""
    TIMED_OUT = "timed-out"
    """The owner did not answer within the desk's timeout."""
    OWNER_GONE = "owner-gone"
    """The owner's link ended before it answered."""


class ContributionError(SeqRepairError):
    """A contribution that cannot be taken as sent (the adapter names the AMQP condition)."""


class ForgedContributionError(ContributionError):
    """A publication claims a contribution the component did not hand its publisher
    (``$contributor``/``$contribution`` written by someone else)."""


class TooManyPendingError(ContributionError):
    """The owner has ``max_pending`` contributions it has not answered yet."""


@attrs.define
class Pending:
    """One contribution handed to its owner. ``handle`` is the adapter's (the contributor's
    delivery, where to answer); ``taken``: the owner accepted it and will publish it (its
    deadline starts again then: a publication the component refused would otherwise leave it
    waiting until the owner goes)."""

    id: str
    source: str
    contributor: str
    topic: str
    deadline: float
    handle: Any = None
    taken: bool = False


@attrs.define
class Closed:
    """A contribution that ended: how, and (published) the number its publication got."""

    pending: Pending
    outcome: Outcome
    source_seq: int | None = None
    reason: str = ""


class Desk:
    """The contributions handed to owners and not answered yet (see the module docstring)."""

    def __init__(self, *, timeout: float = 10.0, max_pending: int = 256,
                 recent: int = 4096, prefix: str = "c") -> None:
        self.timeout = timeout
        self.max_pending = max_pending
        self.pending: dict[str, Pending] = {}
        self._per_source: dict[str, int] = {}
        self._recent: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> source, who
        self._recent_max = recent
        self._ids = (f"{prefix}{n}" for n in itertools.count(1))
        self.counts = {outcome.value: 0 for outcome in Outcome}

    def open(self, source: str, contributor: str, topic: str, now: float,
             handle: Any = None) -> Pending:
        """Hand a contribution to ``source``'s owner: its new :class:`Pending` (its ``id``
        goes to the owner). :class:`TooManyPendingError` when the owner has
        ``max_pending`` unanswered already."""
        held = self._per_source.get(source, 0)
        if held >= self.max_pending:
            raise TooManyPendingError(
                f"the owner of {source!r} has {held} contributions it has not answered",
                expected=self.max_pending, got=held + 1)
        pending = Pending(next(self._ids), source, contributor, topic, now + self.timeout,
                          handle)
        self.pending[pending.id] = pending
        self._per_source[source] = held + 1
        return pending

    def take(self, cid: str, now: float) -> Pending | None:
        """The owner accepted contribution ``cid`` at ``now``: it waits for the publication,
        ``timeout`` more seconds at most."""
        pending = self.pending.get(cid)
        if pending is not None:
            pending.taken = True
            pending.deadline = now + self.timeout
        return pending

    def refuse(self, cid: str, reason: str,
               outcome: Outcome = Outcome.REFUSED) -> Closed | None:
        """The owner refused ``cid`` (None: not pending any more)."""
        pending = self.pending.get(cid)
        if pending is None:
            return None
        return self._close(pending, outcome, reason=reason)

    def check_claim(self, pub: Publication) -> None:
        """Raise :class:`ForgedContributionError` unless ``pub``'s reserved fields name a
        contribution this desk handed out for ``pub.source`` (pending, or closed lately) to
        the contributor they name. A publication without them passes."""
        fields = pub.fields
        if not claims(fields):
            return
        cid, who = fields.get(CONTRIBUTION_FIELD), fields.get(CONTRIBUTOR_FIELD)
        pending = self.pending.get(cid) if isinstance(cid, str) else None
        known = ((pending.source, pending.contributor) if pending is not None
                 else self._recent.get(cid) if isinstance(cid, str) else None)
        if known is None or known != (pub.source, who):
            raise ForgedContributionError(
                f"{CONTRIBUTOR_FIELD} and {CONTRIBUTION_FIELD} are set by the component: "
                f"this publication claims a contribution of {who!r} to {pub.source!r} "
                f"({cid!r}) it was not given",
                expected="a contribution handed to this source's owner",
                got={"contribution": cid, "contributor": who})

    def published(self, pub: Publication) -> Closed | None:
        """``pub`` is journaled: the contribution it took in, closed (None: it took in
        none still pending)."""
        cid = contribution_of(pub)
        pending = self.pending.get(cid) if cid is not None else None
        if pending is None or pending.source != pub.source:
            return None
        return self._close(pending, Outcome.PUBLISHED, source_seq=pub.source_seq)

    def expire(self, now: float) -> list[Closed]:
        """The contributions whose owner has not answered by ``now``."""
        late = [p for p in self.pending.values() if p.deadline <= now]
        return [self._close(p, Outcome.TIMED_OUT,
                            reason=f"the owner of {p.source!r} did not "
                                   f"{'publish it' if p.taken else 'answer'} within "
                                   f"{self.timeout:g} s") for p in late]

    def owner_gone(self, source: str) -> list[Closed]:
        """``source``'s owner went away: its unanswered contributions end."""
        gone = [p for p in self.pending.values() if p.source == source]
        return [self._close(p, Outcome.OWNER_GONE,
                            reason=f"the owner of {source!r} went away before it answered")
                for p in gone]

    @property
    def next_deadline(self) -> float | None:
        """When :meth:`expire` next has something to end (None: nothing waits for one)."""
        return min((p.deadline for p in self.pending.values()), default=None)

    def _close(self, pending: Pending, outcome: Outcome, *, source_seq: int | None = None,
               reason: str = "") -> Closed:
        del self.pending[pending.id]
        left = self._per_source[pending.source] - 1
        if left:
            self._per_source[pending.source] = left
        else:
            del self._per_source[pending.source]
        self._recent[pending.id] = (pending.source, pending.contributor)
        while len(self._recent) > self._recent_max:
            self._recent.popitem(last=False)
        self.counts[outcome.value] += 1
        return Closed(pending, outcome, source_seq, reason)
