"""Journaling "before fan-out" on top of the Redis journal of :mod:`seqrepair.journal`.

The journal accepts only contiguous continuations of a source; publications reach the component
after their publisher may already have journaled them (and again after a reconnect).
:class:`RedisJournalPort` appends what the journal does not hold yet and skips the rest, so
journaling twice never duplicates and never fails. Source-level repair reads go through the
journal's own gap-fill service.

When an append fails the port remembers what it still knows: a source whose append the journal
answered (a gap, a bad publication) keeps its high-water; one whose outcome is unknown (Redis
down, a timeout, an error reply) is forgotten until :meth:`RedisJournalPort.high_water` reads it
again. :meth:`RedisJournalPort.held` answers without a round trip, so the component can tell
which publications of a failed message the journal took, and where numbering continues; and
:attr:`NotJournaledError.untouched` says whether the failed call wrote nothing for sure (it
failed on a read, before any append reached the journal), :attr:`NotJournaledError.source`
which source it failed on.

A source whose publications the component numbers (a plain publisher's) is appended to by the
component alone: a publication of it the journal already holds under the same number is a
different one (an earlier append whose answer was lost landed after the numbering read the
high-water), never the same one again. Its append then raises :class:`StaleNumberingError`:
nothing of it is journaled, the message is to be numbered again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import attrs

from seqrepair.amqp.component.journalfeed import JournaledFeed
from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication
from seqrepair.journal.selection import BEFORE_SUBSCRIPTION, lost_selection


class JournalPort(Protocol):
    """The journal as the component sees it. Absolute source numbers throughout."""

    def append(
        self, publications: Sequence[Publication], numbered: Collection[str] = (),
        brought_by: Mapping[str, str] | None = None,
    ) -> None:
        """Store ``publications`` durably; ones already held (same source and number) are
        skipped, so a publisher that journaled first and the component never duplicate,
        except for the sources the component ``numbered``: one of those the journal holds
        raises :class:`StaleNumberingError`. Sources go one by one: after a failure,
        :meth:`journaled` tells what was taken. ``brought_by``: per new source, the principal
        its first journaling records (:meth:`brought_by`)."""

    def brought_by(self) -> dict[str, str]:
        """Per journaled source, the principal its first journaling recorded (none for one
        journaled otherwise)."""

    def high_waters(self) -> dict[str, int]:
        """The last number held per source."""

    def held(self, source: str) -> int | None:
        """The last number of ``source`` the port knows the journal holds, without asking the
        journal; None when it does not know (never asked, or an append with an unknown
        outcome since)."""

    def journaled(self, publications: Sequence[Publication]) -> list[int]:
        """The indexes of ``publications`` the port knows the journal holds."""

    def high_water(self, source: str) -> int:
        """The last number of ``source`` the journal holds: :meth:`held`, else read."""

    def forget(self, source: str) -> None:
        """Forget what the port knows of ``source``: another writer (its publisher) appended
        past it, so the next :meth:`high_water` reads the journal."""

    def unsent(self, source: str, after: int) -> Unsent:
        """What the journal holds of ``source`` past ``after`` up to :meth:`held`, and which
        of those numbers retention trimmed before they could be read."""

    def read(self, source: str, first: int, last: int) -> list[Publication]:
        """What the journal still holds of ``source`` from ``first`` through ``last``."""

    def listen(self) -> None:
        """Take what the journal announced meanwhile (nothing to do without announcements)."""


@attrs.frozen
class Unsent:
    """What the journal holds of a source past what went out (:meth:`JournalPort.unsent`).

    ``publications`` in order; before them, the numbers ``trimmed`` (an empty range when none):
    journaled, but removed by retention before they could be read back, so they can never go
    out (a request for them is answered ``GapError("trimmed")``).
    """

    publications: list[Publication]
    trimmed: range


def _bare(pub: Publication) -> Publication:
    """A publication as journaled: no link number, not a retransmission."""
    if pub.link_seq is None and not pub.retransmit:
        return pub
    return pub.with_link(None, retransmit=False)


class JournalGapError(AmqpAdapterError):
    """A publisher skipped numbers: the journal only takes contiguous continuations."""

    condition = "amqp:precondition-failed"


class ReusedNumberError(AmqpAdapterError):
    """A publisher sent numbers the journal already holds for other publications (it started
    again from 1, or from an old high-water, without a journal of its own): taken as
    duplicates they would be lost, so the message is rejected. ``expected`` is the next number
    the source may use (the journal's high-water plus one), ``got`` the first reused one."""

    condition = "amqp:precondition-failed"

    def __init__(self, message: str, *, source: str, expected: int, got: int) -> None:
        super().__init__(message, expected=expected, got=got)
        self.source = source


class NotJournaledError(AmqpAdapterError):
    """The journal could not be written or read (Redis down, a timeout, an error reply): the
    publications of the source named are not (known to be) journaled, so not published."""

    condition = "amqp:internal-error"

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        untouched: bool = False,
        expected: Any = None,
        got: Any = None,
    ) -> None:
        super().__init__(message, expected=expected, got=got)
        self.source = source
        """The source the journal failed on."""
        self.untouched = untouched
        """True when the failing call surely wrote nothing (it failed on a read, before any
        append reached the journal, or its one append was refused as not continuing the
        journal); False when the journal may hold part of what it was given."""


class StaleNumberingError(NotJournaledError):
    """The journal already holds numbers the component gave a source's publications (an
    earlier append whose answer was lost landed after the numbering read the high-water):
    nothing of that source is journaled by this call, its high-water is forgotten (read it
    again: the journal holds publications that did not go out), and the publications are to
    be numbered again after it. ``untouched`` is False only when an earlier source of the
    same call was written."""


@attrs.define
class RedisJournalPort:
    """:class:`JournalPort` over the Redis :class:`seqrepair.journal.journal.Journal`.

    The journal accepts only contiguous continuations; this adapter skips what it already
    holds (a publisher that journaled first) and appends the rest per source, so a component
    journaling "before fan-out" never duplicates and never fails on a publisher's own append.
    """

    journal: object
    bits_of: dict[str, int] = attrs.field(factory=dict)
    default_bits: int = 32
    _hw: dict[str, int] = attrs.field(factory=dict)
    _writes: int = 0
    """How many appends reached the journal (whatever their outcome)."""
    not_selected: str | None = None
    """A relay's journal (:mod:`seqrepair.journal.selection`): its upstream selection; the
    numbers a source's publications skip are journaled as not selected under it."""
    _lost: dict[str, int] = attrs.field(factory=dict)
    """A relay's journal: per source, the number after which its upstream reported a loss
    (:meth:`note_lost`): the next skip past it is journaled as lost, not as not selected."""
    subscribed_after: Mapping[str, int] = attrs.field(factory=dict)
    """A relay's journal: per source, the number after which its upstream subscription
    started (the upstream's ``seqrepair-start-after``): a source's first numbers up to the
    first it journals are marked as before its subscription
    (:data:`~seqrepair.journal.selection.BEFORE_SUBSCRIPTION`) when that names the source."""
    _lost_items: dict[str, frozenset[str] | None] = attrs.field(factory=dict)
    """Per source of :attr:`_lost`, the topics the loss held as its upstream named them (None:
    unknown), journaled with its marker."""
    _lost_any: bool = False
    """A loss upstream named no source: every source's next skip is journaled as lost."""
    _lost_done: set[str] = attrs.field(factory=set)
    lost_journaled: set[str] = attrs.field(factory=set)
    """A relay's journal: the sources a lost-upstream marker was journaled for since the
    component last took them (their live links must learn of it before what follows)."""
    _ahead: set[str] = attrs.field(factory=set)
    """Sources whose publisher journals first (our last append found it already held): for
    those the high-water is read before appending, not learnt from a refused append, which
    would cost the encoding of the whole batch and a script run in Redis for nothing."""
    _brought_at_start: dict[str, str] | None = None
    """:meth:`brought_by` as :meth:`high_waters` read it along (taken by the first call)."""
    feed: JournaledFeed | None = None
    """The journal's append announcements (:class:`.journalfeed.JournaledFeed`), or None: for
    a source in ``_ahead`` an announcement that covers a whole run stands for reading the
    high-water (no round trip)."""

    @classmethod
    def from_url(cls, url: str) -> RedisJournalPort:
        """Connect to the Redis journal at ``url``."""
        from seqrepair.journal.journal import Journal

        return cls(Journal.from_url(url))

    def append(
        self, publications: Sequence[Publication], numbered: Collection[str] = (),
        brought_by: Mapping[str, str] | None = None,
    ) -> None:
        """Append, per source, the part of ``publications`` the journal does not hold yet.

        Sources are appended one after another: when one fails, those before it are held
        (:meth:`held` says so) and those after it were not tried. A failure whose outcome is
        unknown raises :class:`NotJournaledError` and forgets the source's high-water. For a
        source the component ``numbered``, a number the journal already holds is not skipped:
        :class:`StaleNumberingError`, and the source's high-water is forgotten.
        """
        from seqrepair.journal.errors import BitsMismatchError, SequenceConflictError

        runs: dict[str, list[Publication]] = {}
        first = publications[0].source if publications else ""
        # one source's, bare (a relay's usual batch): no _bare call per publication
        if publications and all(p.source == first and p.link_seq is None and not p.retransmit
                                for p in publications):
            runs[first] = list(publications)
        else:
            for pub in publications:
                runs.setdefault(pub.source, []).append(_bare(pub))
        writes = self._writes
        for source, pubs in runs.items():
            before = self._writes
            try:
                self._append_run(source, pubs, stale_if_held=source in numbered,
                                 brought_by=(brought_by or {}).get(source))
            except SequenceConflictError as exc:  # numbered here: what the journal holds differs
                self._hw.pop(source, None)  # past what went out: read again, then fan out
                raise StaleNumberingError(
                    f"{source!r}: numbered from {pubs[0].source_seq}, but the journal expects "
                    f"{exc.expected} (a late write?); not journaled, publish again",
                    source=source, untouched=before == writes, expected=exc.expected,
                    got=pubs[0].source_seq,
                ) from exc
            except (AmqpAdapterError, InvalidMessageError, BitsMismatchError):
                raise  # the journal answered (or was never asked): nothing written, hw known
            except Exception as exc:
                self._hw.pop(source, None)  # written or not: unknown until read again
                raise NotJournaledError(
                    f"{source!r}: not journaled ({type(exc).__name__}: {exc}); publish again",
                    source=source, untouched=self._writes == writes, got=pubs[0].source_seq,
                ) from exc

    def _append_run(self, source: str, pubs: list[Publication], *, stale_if_held: bool,
                    brought_by: str | None = None) -> None:
        """Append the part of one source's ``pubs`` the journal does not hold yet; with
        ``stale_if_held`` (the component numbered them), a number it holds raises
        :class:`~seqrepair.journal.errors.SequenceConflictError` and nothing is written."""
        from seqrepair.journal.errors import SequenceConflictError

        if source not in self._hw:
            self._hw[source] = self.journal.high_water(source)  # type: ignore[attr-defined]
        bits = self.bits_of.get(source, self.default_bits)
        held = self._hw[source]
        if stale_if_held:
            if pubs[0].source_seq <= held:
                raise SequenceConflictError(
                    f"{source!r}: numbered from {pubs[0].source_seq}, the journal holds {held}",
                    source=source, operation="append", expected=held + 1,
                    got=pubs[0].source_seq,
                )
            self._writes += 1
            self._hw[source] = self.journal.append(  # type: ignore[attr-defined]
                pubs, bits, **({"brought_by": brought_by} if brought_by else {}))
            return  # a conflict: the journal wrote nothing of it (append raises)
        fresh = [p for p in pubs if p.source_seq > held]
        if fresh and source in self._ahead:
            held = self._hw[source] = self._ahead_high_water(source, pubs[-1].source_seq)
            fresh = [p for p in pubs if p.source_seq > held]
        for _attempt in range(3):
            if not fresh:
                break
            try:
                self._writes += 1
                started = self.subscribed_after.get(source, 0)
                if self.not_selected and held == 0 and fresh[0].source_seq > 1 and (
                        started > 0 and source not in self._lost and not self._lost_any):
                    # its numbers through where the subscription started were published
                    # before the relay subscribed; those after, up to the first it journals,
                    # were not selected by it (filtered out, as any later skip)
                    self._hw[source] = self.journal.append(  # type: ignore[attr-defined]
                        fresh, bits, not_selected=self.not_selected,
                        before=(started, BEFORE_SUBSCRIPTION))
                elif self.not_selected:
                    marker, lost = self._marker_for(source, held, fresh)
                    self._hw[source] = self.journal.append(  # type: ignore[attr-defined]
                        fresh, bits, not_selected=marker)
                    if lost:
                        self.lost_journaled.add(source)
                        self._lost.pop(source, None)
                        self._lost_items.pop(source, None)
                        if self._lost_any:
                            self._lost_done.add(source)
                else:
                    self._hw[source] = self.journal.append(  # type: ignore[attr-defined]
                        fresh, bits, **({"brought_by": brought_by} if brought_by else {}))
                self._ahead.discard(source)
                break
            except SequenceConflictError:
                held = self._hw[source] = self.journal.high_water(source)  # type: ignore[attr-defined]
                if fresh[0].source_seq > held + 1:
                    raise JournalGapError(
                        f"{source!r}: the journal holds through {held}, "
                        f"this starts at {fresh[0].source_seq}",
                        expected=held + 1, got=fresh[0].source_seq,
                    ) from None
                self._ahead.add(source)
                fresh = [p for p in pubs if p.source_seq > held]
        else:
            if fresh:  # never fan out what the journal may not hold
                raise JournalGapError(
                    f"{source!r}: the journal moved under three appends; not journaled",
                    expected=held + 1, got=fresh[0].source_seq,
                )

    def _ahead_high_water(self, source: str, last: int) -> int:
        """The journal's high-water of ``source`` (whose publisher journals first), as far as
        a run through ``last`` needs it: what the journal announced when that covers ``last``,
        else read."""
        if self.feed is not None:
            announced = self.feed.through(source, self._ahead)
            if announced is not None and announced >= last:
                return max(announced, self._hw.get(source, 0))
        return int(self.journal.high_water(source))  # type: ignore[attr-defined]

    def listen(self) -> None:
        """Take the journal's announcements waiting (on the component's timer)."""
        if self.feed is not None:
            self.feed.take(self._ahead)

    def note_lost(self, source: str | None, after: int | None,
                  items: Collection[str] | None = None) -> None:
        """A relay's upstream reported ``source``'s numbers after ``after`` lost (None: some
        source's, unnamed), holding the topics ``items`` (None: unknown): the numbers its
        next publication skips are journaled as lost upstream
        (:data:`~seqrepair.journal.selection.LOST_UPSTREAM`, with the items under the
        relay's selection: :func:`~seqrepair.journal.selection.lost_selection`), so a replay
        tells a subscriber it lacks them, and which items, instead of passing over them as
        not selected."""
        if source is None:
            self._lost_any, self._lost_done = True, set()
            return
        before = self._lost_items.get(source) if source in self._lost else frozenset()
        self._lost[source] = min(after or 0, self._lost.get(source, after or 0))
        self._lost_items[source] = (
            None if before is None or items is None else before | frozenset(items))

    def _marker_for(self, source: str, held: int, fresh: Sequence[Publication]
                    ) -> tuple[str | None, bool]:
        """The selection the numbers ``fresh`` skips are journaled under, and whether that is
        a loss upstream (one skip past the loss's ``after``; at worst a not-selected skip in
        the same append is reported with it: said lost, never lost silently)."""
        after = self._lost.get(source)
        if after is None and self._lost_any and source not in self._lost_done:
            after = 0
        if after is not None:
            last = held
            for pub in fresh:
                if pub.source_seq > last + 1 and last >= after:
                    unnamed = self._lost_any and source not in self._lost_done
                    items = None if unnamed else self._lost_items.get(source)
                    return lost_selection(items, self.not_selected), True
                last = pub.source_seq
        return self.not_selected, False

    def held(self, source: str) -> int | None:
        """The last number of ``source`` this port knows the journal holds, without a round
        trip (Redis may be down); None when it does not know."""
        return self._hw.get(source)

    def journaled(self, publications: Sequence[Publication]) -> list[int]:
        """The indexes of ``publications`` this port knows the journal holds (after a failed
        :meth:`append`: the part it took), without a round trip."""
        hw = self._hw
        return [i for i, p in enumerate(publications) if p.source_seq <= hw.get(p.source, 0)]

    def forget(self, source: str) -> None:
        """Forget the high-water this port knows of ``source``: the next :meth:`high_water`
        reads it from the journal (its publisher appended past it)."""
        self._hw.pop(source, None)

    def high_water(self, source: str) -> int:
        """The last number of ``source`` the journal holds: as this port knows it, else read
        from the journal and remembered."""
        if source in self._hw:
            return self._hw[source]
        try:
            hw: int = self.journal.high_water(source)  # type: ignore[attr-defined]
        except Exception as exc:
            raise NotJournaledError(
                f"{source!r}: the journal's high-water cannot be read ({type(exc).__name__}: "
                f"{exc}); publish again", source=source, untouched=True,
            ) from exc
        self._hw[source] = hw
        return hw

    def unsent(self, source: str, after: int) -> Unsent:
        """What the journal holds of ``source`` past ``after`` through :meth:`held` (nothing
        when that is unknown): publications an append journaled although its answer was lost,
        once :meth:`high_water` has read the high-water again.

        Retention may have trimmed some or all of them meanwhile (Redis was away, or the
        answer came late): those are passed over and named (:attr:`Unsent.trimmed`), the rest
        is read, again past a trim that races the read. Raises :class:`NotJournaledError`,
        ``untouched``, when the journal cannot be read.
        """
        held = self._hw.get(source)
        first = after + 1
        if held is None or held < first:
            return Unsent([], range(first, first))
        pubs, start = self._read_past_trim(source, first, held)
        return Unsent(pubs, range(first, start))

    def read(self, source: str, first: int, last: int) -> list[Publication]:
        """What the journal still holds of ``source`` from ``first`` through ``last``, in
        order (what retention trimmed is left out). Raises :class:`NotJournaledError`,
        ``untouched``, when the journal cannot be read."""
        return self._read_past_trim(source, first, last)[0]

    def _read_past_trim(self, source: str, first: int, last: int) -> tuple[list[Publication], int]:
        """What the journal holds of ``source`` in ``first..last`` past what retention trimmed,
        and the number it starts at (``last + 1`` when all of it was trimmed)."""
        from seqrepair.journal.errors import TrimmedRangeError

        start = first
        while start <= last:  # each trim moves the start past it: this ends
            try:
                pubs: list[Publication] = self.journal.read_range(  # type: ignore[attr-defined]
                    source, start, last
                )
            except TrimmedRangeError as exc:
                if exc.trimmed_through >= start:
                    start = min(exc.trimmed_through, last) + 1
                    continue
                raise NotJournaledError(  # a trim below what was asked: not a reason to skip
                    f"{source!r}: {start}..{last} cannot be read back ({exc})",
                    source=source, untouched=True,
                ) from exc
            except Exception as exc:
                raise NotJournaledError(
                    f"{source!r}: {start}..{last} cannot be read back ({type(exc).__name__}: "
                    f"{exc}); publish again", source=source, untouched=True,
                ) from exc
            return pubs, start
        return [], last + 1

    def brought_by(self) -> dict[str, str]:
        """Per journaled source, the principal its first journaling recorded (read at start:
        the new sources each principal brought, across restarts)."""
        if self._brought_at_start is not None:  # read with high_waters (the component's start)
            brought, self._brought_at_start = self._brought_at_start, None
            return brought
        read = getattr(self.journal, "brought_by", None)
        if read is None:
            return {}
        return dict(read(self.journal.sources()))  # type: ignore[attr-defined]

    def high_waters(self) -> dict[str, int]:
        """The last number held per journaled source. Learns their bit widths too (into
        ``bits_of``), so a restarted component knows them before their publishers speak."""
        journal: Any = self.journal
        sources = journal.sources()
        waters = journal.high_waters(sources)
        both = getattr(journal, "bits_and_brought_by", None)
        if both is not None:  # brought_by in the same read: one pass at start, not two
            widths, self._brought_at_start = both(sources)
        else:
            widths = journal.bit_widths(sources)
        for source, bits in widths.items():
            self.bits_of.setdefault(source, bits)
        return {source: hw for source, (hw, _trimmed) in waters.items()}
