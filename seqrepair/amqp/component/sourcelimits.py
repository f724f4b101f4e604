"""How many sources the component keeps, and how many classes of their topics, and which
publication it refuses to keep them bounded (WIRE.md "Resource model").

Every source costs the component memory for as long as it runs (what went out of it, its
numbering, who may learn of it: :mod:`.sourceviews`), and a publisher names its sources: one
that invents a new name per publication would grow that without bound. So a publication of a
source the component does not keep yet is refused
(:class:`~seqrepair.amqp.wire.admission.LimitExceededError`,
``amqp:resource-limit-exceeded``; nothing of its message is numbered or journaled) when its
principal already brought ``--max-sources-per-principal`` new sources (across restarts,
below), or when the component keeps ``--max-sources`` sources in all (those the journal held
at its start included). A source the component keeps is never refused, however many there are;
nor is one the journal holds (asked only when a limit would refuse it): an honest publisher's
sources go on whatever another publisher does, and a new one is refused only to a principal
over its own limit, or when the component is full.

A principal's new sources are counted across restarts: the first journaling of a source
taken from a publishing link records its principal in the source's journal meta hash
(``brought_by``, in the same atomic append script: a crash cannot journal the source without
it), and a starting component counts them (:meth:`.RedisJournalPort.brought_by`). Else one
principal brought ``--max-sources-per-principal`` more on every run, and after a few restarts
the journal's sources filled ``--max-sources`` and no principal could bring one. A source
journaled otherwise (a publisher's own journal, a relay, a journal written before this) is
nobody's. The journal never forgets a source (retention trims its publications, not the
source): a source once brought stays counted, as it stays among the ``--max-sources``.

Who may learn of a source is decided on one topic per class of the access policy
(:mod:`.sourceviews`). A class is never dropped (that hid a source from a principal entitled
only to topics of classes past the cap), so the classes are bounded here, before a
publication is journaled: one whose topic would make a source's
:data:`~.sourceviews.MAX_CLASSES_PER_SOURCE` + 1-th class, or a class past
:data:`~.sourceviews.MAX_CLASSES` of every source together, is refused the same way. So is
one whose principal already brought :data:`MAX_CLASSES_PER_PRINCIPAL` classes nobody had
published: else one principal publishing topics of ever new classes (a policy whose patterns
decide on several words apart makes 2 ** patterns of them) used up the component's classes,
and every other principal's next topic of a new class was refused.

Only publishing links are checked: a relay's feed (its upstream checked it) and a publisher's
own journal appends fanned out from the journal (it writes to Redis: trusted) are kept as they
come.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence

from seqrepair.amqp.component.sourceviews import (
    MAX_CLASSES,
    MAX_CLASSES_PER_SOURCE,
    Class,
    SourceViews,
)
from seqrepair.amqp.wire.admission import LimitExceededError
from seqrepair.core.messages import Publication
from seqrepair.core.policy import Policy

MAX_SOURCES = 100_000
"""Default ``--max-sources``: sources the component keeps, all principals together."""
MAX_SOURCES_PER_PRINCIPAL = 10_000
"""Default ``--max-sources-per-principal``: new sources one principal may bring."""

MAX_CLASSES_PER_PRINCIPAL = MAX_CLASSES // 16
"""Classes no source had published that one principal's publications may bring (while the
component runs): a sixteenth of :data:`~.sourceviews.MAX_CLASSES`."""

SOURCE_STATS = ("sources_refused", "classes_refused")
"""The component's counters this module keeps (its stop counters)."""


class SourceLimits:
    """The count of sources and of classes, checked before a message is journaled."""

    def __init__(self, *, views: SourceViews, policy: Callable[[], Policy],
                 journaled: Callable[[str], bool], stats: dict[str, int],
                 max_sources: int = MAX_SOURCES,
                 max_sources_per_principal: int = MAX_SOURCES_PER_PRINCIPAL,
                 brought_by: Mapping[str, str] | None = None) -> None:
        self.views = views
        self.policy = policy
        self.journaled = journaled
        """Whether the journal holds anything of a source (False when it cannot say)."""
        self.stats = stats
        self.max_sources = max_sources
        self.max_sources_per_principal = max_sources_per_principal
        # new sources per principal: those the journal recorded it brought (across restarts),
        # and those it brought since, counted when kept
        self._brought: Counter[str] = Counter((brought_by or {}).values())
        # the principal that brought each source (bounded by the sources kept): the kept
        # topics of its sources are charged to it (SourceViews.owner)
        self._owners: dict[str, str] = dict(brought_by or {})
        self._pending: tuple[str, Collection[str]] = ("", ())  # the message being taken's
        views.owner = self.owner_of
        self._classes_brought: Counter[str] = Counter()  # new classes per principal
        self._unknown: tuple[str, set[Class]] | None = None  # those of the message checked
        for key in SOURCE_STATS:
            stats.setdefault(key, 0)

    def brought(self, principal: str) -> int:
        """New sources ``principal`` brought: those the journal recorded as its (its
        sources' first journalings, of earlier runs) and those it brought since the start."""
        return self._brought[principal]

    def owner_of(self, source: str) -> str:
        """The principal that brought ``source`` ("" for nobody: journaled otherwise), the
        message being taken's new sources included."""
        owner = self._owners.get(source)
        if owner is not None:
            return owner
        principal, fresh = self._pending
        return principal if source in fresh else ""

    def check(self, principal: str, pubs: Sequence[Publication], new: Collection[str],
              kept: int) -> set[str]:
        """The publications of one message of ``principal``, of which the sources ``new``
        are not among the ``kept`` the component keeps: raise :class:`LimitExceededError`
        when keeping them would pass a limit; else the sources to count as ``principal``'s
        (:meth:`took`) once kept."""
        self._unknown = None
        self._pending = ("", ())
        fresh = self._check_sources(principal, set(new), kept) if new else set()
        policy = self.policy()
        if not policy.permissive:
            unknown = self._check_classes(principal, policy, pubs)
            if unknown:
                self._unknown = (principal, unknown)
        self._pending = (principal, fresh)
        return fresh

    def took(self, principal: str, sources: Collection[str]) -> None:
        """``sources``, new, are now kept: counted as ``principal``'s; so are the classes no
        source had published that the message last checked brought (those now learnt)."""
        self._pending = ("", ())
        if sources:
            self._brought[principal] += len(sources)
            if principal:
                self._owners.update(dict.fromkeys(sources, principal))
        unknown, self._unknown = self._unknown, None
        if unknown is not None and unknown[0] == principal:
            learnt = sum(1 for cls in unknown[1] if not self.views.is_new(cls))
            if learnt:
                self._classes_brought[principal] += learnt

    def _check_sources(self, principal: str, new: set[str], kept: int) -> set[str]:
        per = self.max_sources_per_principal
        if kept + len(new) <= self.max_sources and self._brought[principal] + len(new) <= per:
            return new
        # the journal is asked (a round trip on the event loop) only until enough of them
        # it does not hold are found to refuse: one, for a principal already at its limit
        room = min(self.max_sources - kept, per - self._brought[principal])
        unheld: set[str] = set()
        for source in sorted(new):
            if not self.journaled(source):  # else theirs already
                unheld.add(source)
                if len(unheld) > room:
                    break
        new = unheld
        first = min(new) if new else ""
        if kept + len(new) > self.max_sources:
            self.stats["sources_refused"] += 1
            raise LimitExceededError(
                f"the component keeps {self.max_sources} sources (--max-sources): new source "
                f"{first[:100]!r} refused", expected=self.max_sources, got=kept + len(new))
        if self._brought[principal] + len(new) > per:
            self.stats["sources_refused"] += 1
            raise LimitExceededError(
                f"principal {principal[:100]!r} brought {per} new sources "
                f"(--max-sources-per-principal): new source {first[:100]!r} refused",
                expected=per, got=self._brought[principal] + len(new))
        return new

    def _check_classes(self, principal: str, policy: Policy, pubs: Sequence[Publication]
                       ) -> set[Class]:
        views = self.views
        by_source: dict[str, dict[str, None]] = {}
        for pub in pubs:
            by_source.setdefault(pub.source, {})[pub.topic] = None
        unknown: set[Class] = set()
        for source, topics in by_source.items():
            fresh = views.new_classes(policy, source, topics)
            if not fresh:
                continue
            count = views.classes_of(source) + len(fresh)
            if count > MAX_CLASSES_PER_SOURCE:
                self.stats["classes_refused"] += 1
                raise LimitExceededError(
                    f"source {source[:100]!r} publishes topics of {MAX_CLASSES_PER_SOURCE} "
                    "classes of the access policy (topics the same patterns of its subscribe "
                    "rules cover): a topic of another is refused", expected=MAX_CLASSES_PER_SOURCE,
                    got=count)
            unknown.update(cls for cls in fresh if views.is_new(cls))
        if not unknown:
            return unknown
        brought = self._classes_brought[principal] + len(unknown)
        if brought > MAX_CLASSES_PER_PRINCIPAL:  # before the component's: its own share first
            self.stats["classes_refused"] += 1
            raise LimitExceededError(
                f"principal {principal[:100]!r} brought {MAX_CLASSES_PER_PRINCIPAL} classes of "
                "the access policy no source had published: a topic of another is refused",
                expected=MAX_CLASSES_PER_PRINCIPAL, got=brought)
        if views.class_count + len(unknown) > MAX_CLASSES:
            self.stats["classes_refused"] += 1
            raise LimitExceededError(
                f"the sources publish topics of {MAX_CLASSES} classes of the access policy: a "
                "topic of another is refused", expected=MAX_CLASSES,
                got=views.class_count + len(unknown))
        return unknown


__all__ = ["MAX_CLASSES_PER_PRINCIPAL", "MAX_SOURCES", "MAX_SOURCES_PER_PRINCIPAL",
           "SOURCE_STATS", "SourceLimits"]
