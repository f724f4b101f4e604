"""What a relay's journal lacks, asked of its upstream (XEP-0040 §1: a relay serves gap fill
and source replay "from its own journal, going upstream only for what it lacks").

A relay's journal lacks numbers a subscriber is owed in two ways: a run of *not selected*
markers whose selection does not cover the subscriber (the relay did not carry its topics then:
:mod:`seqrepair.journal.selection`), and numbers below what the relay's retention has trimmed.
A :class:`~seqrepair.journal.gapfill.Replay` given a :data:`Fetcher` asks it for such a range
instead of answering ``trimmed`` at once, waits (paused, without holding the event loop) while
nothing has come, sends what came as it comes, in order, until the :class:`UpstreamAnswer` is
:attr:`~UpstreamAnswer.done`, filtered by the link's entitlement; only what the upstream could
not deliver either (or could not be asked for) is answered ``trimmed``, a lacking run at a
time, naming its numbers (an ``Unrecoverable``); what the journal holds among them is still
sent.

The transport side (:mod:`seqrepair.amqp.relay.fetch`) makes the answers; this module only
says what one is.
"""

from __future__ import annotations

from typing import Protocol

from seqrepair.core.messages import GapError, Publication, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.journal.selection import NotSelected
from seqrepair.journal.trimsummary import passed_on
from seqrepair.logs import get_logger

log = get_logger("seqrepair.journal.gapfill")


class UpstreamAnswer(Protocol):
    """The upstream's answer for numbers ``first``..``last`` of ``source``, as one link (its
    entitlement) may see them."""

    source: str
    first: int
    last: int

    @property
    def done(self) -> bool:
        """Whether the answer is complete (the fields below are final)."""

    @property
    def ready(self) -> bool:
        """Whether :meth:`arrived` has something, or the answer is :attr:`done`."""

    def arrived(self) -> list[Publication]:
        """What came since the last call (taken: held no longer), in source order, each number
        once, all within ``first``..``last``; after :attr:`done`, the rest."""

    @property
    def through(self) -> int:
        """The last number answered (``first - 1``..``last``): below ``last`` when the answer
        was cut short (a bound on what the relay holds at once): the replay reads on from
        there (and asks again where its journal lacks)."""

    @property
    def lost(self) -> tuple[int, int] | None:
        """The first range the upstream could not deliver either (trimmed there), if any:
        the answer ends before it."""

    @property
    def lost_items(self) -> tuple[str, ...] | None:
        """The topics the upstream named as held by :attr:`lost` (its ``GAP-ERROR``'s
        ``items``, for the asking link's entitlement), None when it did not name them."""

    @property
    def error(self) -> str | None:
        """Why the upstream could not be asked (unreachable, refused, too slow), if so."""

    def cancel(self) -> None:
        """Nothing more is wanted (the replay that asked went away)."""


class Fetcher(Protocol):
    """Asks the upstream for ``source``'s numbers ``first``..``last`` for a link with the
    given entitlement (never wider: the upstream filters by it too), returning at once;
    ``principal``: who the link acts for (a relay shares its fetch links fairly by it)."""

    def __call__(self, entitlement: Entitlement, source: str, first: int, last: int, *,
                 principal: str = "") -> UpstreamAnswer: ...


def lacking_answer(request: SourceGapRequest, entitlement: Entitlement, link_id: str,
                   source: str, markers: list[NotSelected], why: str = "",
                   through: int | None = None, items: tuple[str, ...] | None = None
                   ) -> GapError:
    """The answer for numbers a relay's upstream selection did not select and whose
    selection does not cover the link with ``entitlement`` (``markers``, one run of them with
    nothing the link is entitled to between): the relay lacks what the link may be owed there,
    ``trimmed`` through the last one (an ``Unrecoverable``; the subscriber asks again after
    it). Where the selection covers the link, its numbers are filtered out, as they would
    have been live, and nothing is said. ``why``: why the upstream was not asked (a relay's,
    with a fetcher), ``through``: where what it lacks too ends, and ``items``: the topics the
    upstream named there (passed on); for numbers lost upstream, the items their markers
    name for the link (:meth:`~seqrepair.journal.selection.NotSelected.lost_items`)."""
    first, last = markers[0], markers[-1]
    end = last.last if through is None else through
    if items is None and all(m.lost for m in markers):  # the items its upstream named
        named = [m.lost_items(entitlement.topics, entitlement.grant, entitlement.deny)
                 for m in markers]
        if all(n is not None for n in named):
            items = passed_on({t for n in named for t in n or ()}, entitlement)
    log.warning("gapfill.not_selected", link=link_id, source=source,
                first=first.first, last=last.last, selection=last.selection, why=why)
    why = ("lost upstream (the relay's upstream could not deliver them)"
           if any(m.lost for m in markers) else
           "published before this relay subscribed upstream"
           + (f", and {why}" if why else "")
           if all(m.before for m in markers) else
           f"not selected by this relay's upstream subscription ({last.selection}), "
           f"which does not cover this link" + (f", and {why}" if why else ""))
    return GapError("trimmed", request, f"{source} {first.first}..{end}: {why}",
                    {source: end}, items=None if items is None else {source: items})
