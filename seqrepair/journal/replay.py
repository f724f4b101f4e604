"""The replay of a source gap request: :class:`Replay` reads the journal page by page and
yields what the subscriber is entitled to (see :mod:`seqrepair.journal.gapfill`, which accepts
the request and builds it, for the rules it follows).

Also here: what the gap-fill service keeps per subscriber link (:class:`SubscriberLink`), the
frames a replay yields (:data:`ReplayFrame`), a transport's fast path (:data:`RowEncoder`) and
the check that a journaled publication can be sent at all (:func:`undeliverable`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, cast

import attrs

from seqrepair.core.budget import ResendBudget
from seqrepair.core.context import LinkContext
from seqrepair.core.errors import UndeliverableError
from seqrepair.core.limits import MAX_TOPIC_BYTES, check_deliverable
from seqrepair.core.messages import (
    GapError,
    Publication,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.journal.errors import TrimmedRangeError
from seqrepair.journal.format import JournalRow
from seqrepair.journal.lacking import Fetcher, UpstreamAnswer, lacking_answer
from seqrepair.journal.recent import RecentEntries, replay_recent
from seqrepair.journal.remembered import remembered, remembered_rows
from seqrepair.journal.segments import Segment, capped
from seqrepair.journal.selection import NotSelected
from seqrepair.journal.trimsummary import entitled_items, passed_on
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal


# the gap-fill service's logger, as before the replay moved here: its events keep their name
log = get_logger("seqrepair.journal.gapfill")

ReplayFrame = Publication | bytes | ReplayComplete | GapError
"""What a replay yields: publications (as retransmissions), the ``bytes`` of its ``encoder``
for the entries it encoded, and the closing frame."""

RowEncoder = Callable[[str, JournalRow], bytes | None]
"""A transport's fast path for a source replay: ``encoder(source, row)`` is the journal entry
``row`` of ``source`` as the transport sends it (a retransmission, no link number), or None
when it cannot vouch for the entry. It returns bytes only for an entry that decodes, validates
and can be delivered exactly as :meth:`JournalRow.publication` and :func:`undeliverable` would
find; None sends the entry down the full path (a corrupt entry raises JournalCorruptError
there, an undeliverable one ends the replay with ``GapError("trimmed")``)."""


@attrs.define
class SubscriberLink:
    """What the service keeps for one subscriber link."""

    link_id: str
    entitlement: Entitlement
    context: LinkContext
    budget: ResendBudget
    start_after: dict[str, int]


NotAsked = tuple[int, str, tuple[str, ...] | None]
"""Lacking numbers through the first the upstream was not asked for again, why (it lacks
them too, or could not be asked), and the items it named for them (None: unknown)."""


class Replay:
    """The answer to an accepted :class:`SourceGapRequest`: iterate it to get the frames.

    Reads the journal lazily, ``page_size`` entries per round trip. Ends with
    ``ReplayComplete``, or with ``GapError("trimmed")`` if retention trims a range while it is
    being replayed (naming the link's items there where the trimmed-items summary knows
    them). Journal errors (Redis down) propagate from the iteration.
    """

    def __init__(
        self,
        journal: Journal,
        link: SubscriberLink,
        request: SourceGapRequest,
        segments: list[Segment],
        through: Mapping[str, int],
        page_size: int,
        *,
        max_range: int | None = None,
        carried_after: Mapping[str, int] | None = None,
        carry_through: Mapping[str, int] | None = None,
        fetcher: Fetcher | None = None,
        encoder: RowEncoder | None = None,
        recent: RecentEntries | None = None,
    ) -> None:
        self.journal = journal
        self.recent = recent
        self.fetcher = fetcher
        self.encoder = encoder
        self.waiting: UpstreamAnswer | None = None
        """The upstream answer the replay waits for (it yields ``None`` meanwhile: see
        :attr:`parked`)."""
        self.fetched = 0  # publications sent that came from upstream
        # what the last fetch said it lacks: through, why, the items the upstream named
        self._not_asked: NotAsked | None = None
        self.link = link
        self.request = request
        self.through = dict(through)
        self.page_size = page_size
        self.sent = 0
        self.filtered = 0
        self.scanned = 0  # journal entries read, sent or not
        self.left_to_link = 0  # numbers not read because the link itself carries them
        self.cover = (
            None if request.link_through is None else link.context.cover(request.link_through)
        )
        self._limits: dict[str, tuple[int, int | None]] = {}  # per source: (numbered, limit)
        # what the transport had carried when asked, of the sources asked (0: nothing)
        self.carried_after = None if self.cover is None or carried_after is None else {
            seg.source: carried_after.get(seg.source, 0) for seg in segments
        }
        # per source, a number the replay carries through whatever the link carries past the
        # cover point: the link passed over publications up to it (answer_source_gap)
        self.carry_through = dict(carry_through or {})
        self.owed_to_link = sorted(
            seg.source for seg in segments
            if self.carried_after is not None and seg.last > self.carried_after[seg.source]
        )
        """Sources the journal holds past what the transport had carried when asked: the
        replay leaves those numbers to the link, so the transport must send them on it."""
        # What the link already carries is cut before the per-request limit is applied: the
        # limit spent on numbers the link brings would leave an answer that says ``more``
        # without reaching anything (the subscriber then gives up for lack of progress).
        carried = [seg for seg in segments if self.cut(seg, seg.first)]
        segments = [seg for seg in segments if seg.first <= seg.last]
        wanted = {seg.source: (seg.first, seg.last) for seg in segments}
        self.more = False
        if max_range is not None:
            segments, self.through, self.more = capped(segments, self.through, max_range)
        segments += carried  # nothing to read: their ``through`` says where the link took over
        kept = {seg.source: seg.last for seg in segments}
        # per source, the first number the per-request limit left out (why ``more``)
        self.capped_from = {
            source: kept.get(source, first - 1) + 1
            for source, (first, last) in wanted.items()
            if kept.get(source, first - 1) < last
        }
        self.segments = segments

    @property
    def parked(self) -> bool:
        """Whether the replay waits for its upstream (reading it on would only yield
        ``None``: the transport leaves it alone until it is done)."""
        return self.waiting is not None and not self.waiting.ready

    @property
    def span(self) -> int:
        """How many source numbers the replay reads."""
        return sum(seg.last - seg.first + 1 for seg in self.segments)

    def cut(self, seg: Segment, seq: int) -> bool:
        """Does the link itself carry ``seg.source`` from ``seq`` on? Then the segment ends
        before it, and so does what the replay answers for the source."""
        if self.cover is None:
            return False
        limit = self.link_limit(seg.source)
        if limit is None or seq <= limit:
            return False
        last = max(limit, seg.first - 1)
        self.left_to_link += seg.last - last
        seg.last = last
        self.through[seg.source] = min(self.through[seg.source], last)
        return True

    def __iter__(self) -> Iterator[ReplayFrame]:
        return (frame for frame in self.steps() if frame is not None)

    def steps(self, scan_slice: int | None = None) -> Iterator[ReplayFrame | None]:
        """The frames of the replay, and a ``None`` after every ``scan_slice`` journal entries
        read, sent or skipped (None: no pauses), and while it waits for its upstream
        (:attr:`parked`).

        A ``None`` says "a slice read": the caller may serve others before reading on. A replay
        whose entries the link is not entitled to reads and skips them; without these pauses
        one step of it could scan the whole range (thousands of entries, many journal pages).
        """
        for index, seg in enumerate(self.segments):
            if self.cut(seg, seg.first):
                continue
            start = seg.first
            while start <= min(seg.upstream_through, seg.last):  # below the trim: upstream
                go_on = yield from self._upstream(index, start, seg.upstream_through)
                if go_on is None:
                    return
                start = go_on
            not_asked: NotAsked = (0, "", None)  # lacking numbers through here: not asked
            while start <= seg.last:
                fetch = yield from self._journal(seg, start, scan_slice, not_asked)
                if fetch is None:
                    break  # the segment is done
                if fetch < 0:
                    return  # a closing frame was sent
                go_on = yield from self._upstream(index, fetch, seg.last)
                if go_on is None:
                    return
                if go_on <= seg.last and self._not_asked is not None:
                    not_asked = self._not_asked  # the upstream lacks these: said, not asked
                start = go_on
        more = self._more()
        log.info(
            "gapfill.replayed",
            link=self.link.link_id,
            ranges={seg.source: (seg.first, seg.last) for seg in self.segments},
            sent=self.sent,
            fetched=self.fetched,
            filtered=self.filtered,
            left_to_link=self.left_to_link,
            more=more,
        )
        yield ReplayComplete(through=self.through, request=self.request, more=more)

    def _journal(self, seg: Segment, start: int, scan_slice: int | None,
                 not_asked: NotAsked) -> Generator[ReplayFrame | None, None, int | None]:
        """Read ``seg`` from ``start``: yield what the link may see; returns None at its end,
        -1 once a closing frame was yielded, or the number from which the upstream is to be
        asked (the first the journal lacks for this link, with a fetcher). ``not_asked``:
        lacking numbers through its first are answered ``trimmed`` at once (the upstream said
        it lacks them too, or could not be asked: its second says which)."""
        end = seg.last
        if self.recent is not None:  # what the transport fanned out lately: no page to read
            resumed = yield from replay_recent(self, seg, start, scan_slice)
            if resumed is None or resumed < 0 or resumed > seg.last:
                return None if resumed is None or resumed > seg.last else -1
            start = resumed
            held = self.recent.oldest(seg.source)  # the journal only up to what it holds
            if held is not None and start < held <= end:
                end = held - 1
        allows = remembered(self.link.entitlement)
        row_allows = remembered_rows(self.link.entitlement)
        encoder = self.encoder
        source = seg.source
        lacking: list[NotSelected] = []  # not selected for this link, not yet said
        entries: Iterator[Publication | JournalRow | NotSelected] = (
            self.journal.iter_entries(source, start, end, page_size=self.page_size)
            if encoder is None else
            self.journal.iter_rows(source, start, end, page_size=self.page_size)
        )
        try:
            for item in entries:
                pub: Publication | None
                if type(item) is JournalRow:  # the fast path: decoded only if it must be
                    seq, pub = item.seq, None
                    allowed = row_allows(source, item)
                elif isinstance(item, NotSelected):  # a relay's journal: numbers not selected
                    if item.before:  # owed only to a link that asks for them by number
                        if self._named(source):
                            lacking.append(item)
                    elif not item.covers(self.link.entitlement.topics,
                                         self.link.entitlement.grant):
                        lacking.append(item)
                    continue
                else:
                    pub = cast(Publication, item)
                    seq = pub.source_seq
                    allowed = allows(pub)
                cut = self.cover is not None and self.cut(seg, seq)
                if lacking and (cut or allowed):  # the run before this one
                    return (yield from self._said_or_asked(seg, start, lacking, not_asked))
                if cut:
                    break
                self.scanned += 1
                if allowed:
                    if pub is None:
                        encoded = encoder(source, item)  # type: ignore[misc, arg-type]
                        if encoded is not None:
                            self.sent += 1
                            yield encoded
                            if scan_slice is not None and self.scanned % scan_slice == 0:
                                yield None
                            continue
                        pub = cast(JournalRow, item).publication(source)  # raises if corrupt
                    poison = undeliverable(pub)
                    if poison is not None:
                        log.error("gapfill.undeliverable_entry", link=self.link.link_id,
                                  source=source, seq=pub.source_seq,
                                  error=poison.message)
                        yield GapError(
                            "trimmed", self.request,
                            f"{source} {pub.source_seq}: the journal entry cannot be "
                            f"delivered: {poison.message}",
                            {source: pub.source_seq},
                            # its item, unless its topic is what cannot be sent
                            items=({source: (pub.topic,)} if len(pub.topic.encode())
                                   <= MAX_TOPIC_BYTES else None),
                        )
                        return -1
                    self.sent += 1
                    yield pub.with_link(None, retransmit=True)
                else:
                    self.filtered += 1
                if scan_slice is not None and self.scanned % scan_slice == 0:
                    yield None
        except TrimmedRangeError as exc:
            if self.fetcher is not None:
                # a relay's retention trimmed on while the replay read (its journal grows as
                # publications come): what it took is asked upstream, as what lay below the
                # trim when the replay began was
                seg.upstream_through = max(seg.upstream_through, exc.trimmed_through)
                resume = max(start, lacking[0].first if lacking else exc.requested)
                log.info("gapfill.trimmed_during_replay", link=self.link.link_id,
                         source=seg.source, trimmed_through=exc.trimmed_through,
                         asked_upstream_from=resume)
                return resume
            # everything before the number the journal was asked for went out, but numbers
            # not selected for the link and not said yet (a relay's; their items unknown)
            yield self.trimmed_meanwhile(source, exc, named=not lacking)
            return -1
        if lacking:
            return (yield from self._said_or_asked(seg, start, lacking, not_asked))
        if end < seg.last:  # read up to what the transport holds: on from there
            return (yield from self._journal(seg, end + 1, scan_slice, not_asked))
        return None

    def trimmed_meanwhile(self, source: str, exc: TrimmedRangeError, *,
                          named: bool = True) -> GapError:
        """The answer when retention trimmed ``exc.requested`` of ``source`` while the replay
        ran: what it removed through ``exc.trimmed_through``, with the link's items there when
        ``named``."""
        log.warning("gapfill.trimmed_during_replay", link=self.link.link_id, source=source)
        items = entitled_items(self.journal, self.link.entitlement, source, exc.requested,
                               exc.trimmed_through) if named else None
        return GapError("trimmed", self.request, exc.message, {source: exc.trimmed_through},
                        items=None if items is None else {source: items})

    def _named(self, source: str) -> bool:
        """Whether the request or the link's start names ``source``: a number the link is
        owed from, not a start of 0 for a source unknown when it attached."""
        return source in self.request.after or source in self.link.start_after

    def _said_or_asked(self, seg: Segment, start: int, lacking: list[NotSelected],
                       not_asked: NotAsked
                       ) -> Generator[ReplayFrame | None, None, int | None]:
        """A run of numbers the journal lacks for the link: the number to ask the upstream
        from, or (no fetcher, lost upstream, or within ``not_asked``) ``trimmed`` said (-1)."""
        if self.fetcher is None or any(m.lost for m in lacking):
            yield self._lacking(seg.source, lacking)
            return -1
        if lacking[0].first <= not_asked[0]:  # the upstream lacks (some of) these too
            yield self._lacking(seg.source, lacking, not_asked[1],
                                min(lacking[-1].last, not_asked[0]), not_asked[2])
            return -1
        return max(lacking[0].first, start)

    def _upstream(self, index: int, first: int, last: int
                  ) -> Generator[ReplayFrame | None, None, int | None]:
        """Ask the upstream for ``first``..``last`` of segment ``index`` (clipped to it), wait
        (``None`` while :attr:`parked`), then yield what came that the link may see. Returns
        the number to read the journal on from, or None once a closing frame was yielded.

        What the upstream answers, it answers whole (what the journal also holds included: one
        upstream link for the rest of the segment, not one per lacking run). Cut short (its
        bound), the journal is read on after what came. Where the upstream lacks numbers too,
        or could not be asked, the journal is read on from there, and a lacking run among
        those numbers is then answered ``trimmed`` (:attr:`_not_asked`), so what the journal
        holds is never passed over for what the upstream lacks."""
        assert self.fetcher is not None
        self._not_asked = None
        seg = self.segments[index]
        if self.cover is not None:
            self.cut(seg, last)  # what the link itself carries is not asked for
        first, last = max(first, seg.first), min(last, seg.last)
        if first > last:
            return last + 1
        answer = self.fetcher(self.link.entitlement, seg.source, first, last)
        allows = remembered(self.link.entitlement)
        through = first - 1
        self.waiting = answer
        cut = False
        try:  # what came is sent as it comes; parked while nothing has
            while not cut:
                finished = answer.done  # read first: what arrived before it is taken below
                batch = answer.arrived()
                if not batch:
                    if finished:
                        break
                    yield None
                    continue
                for pub in batch:
                    # what the answer holds is checked again: the link's entitlement decides
                    if pub.source != seg.source or not through < pub.source_seq <= last:
                        continue
                    # the link may have begun carrying the source while the fetch waited (a
                    # relay's upstream catching up fans out what it fetches too): the replay
                    # stops where the link starts, as it does reading the journal. Past it, a
                    # stub reads the link's frames as stale (at or below the replay's
                    # through) and takes no slot for them: a windowed link never moves again
                    if self.cover is not None and self.cut(seg, pub.source_seq):
                        cut = True
                        break
                    through = pub.source_seq
                    self.scanned += 1
                    if allows(pub):  # it came as a message: it can go as one
                        self.sent += 1
                        self.fetched += 1
                        yield pub.with_link(None, retransmit=True)
                    else:
                        self.filtered += 1
        finally:  # closed while it waited (its link went away): the fetch is not wanted
            if not answer.done:
                answer.cancel()
        self.waiting = None
        log.info("gapfill.fetched_upstream", link=self.link.link_id, source=seg.source,
                 first=first, last=last, through=answer.through, lost=answer.lost,
                 error=answer.error, cut=cut)
        if cut:  # the link carries the rest of the segment
            return seg.last + 1
        if answer.lost is not None:
            low, high = answer.lost
            log.warning("gapfill.trimmed_upstream_too", link=self.link.link_id,
                        source=seg.source, numbers=f"{low}..{high}")
            # the items the upstream named, passed on as the link may see them
            named = passed_on(getattr(answer, "lost_items", None), self.link.entitlement)
            if seg.upstream_through >= low:  # below the journal's trim: nothing holds them
                yield GapError("trimmed", self.request,
                               f"{seg.source} {low}..{high}: not in this relay's journal, "
                               "and trimmed upstream too", {seg.source: high},
                               items=None if named is None else {seg.source: named})
                return None
            self._not_asked = (high, "trimmed upstream too", named)
            return low
        if answer.error is not None:
            done = max(through, answer.through)
            log.warning("gapfill.upstream_not_asked", link=self.link.link_id,
                        source=seg.source, numbers=f"{done + 1}..{last}", error=answer.error)
            if seg.upstream_through > done:
                yield GapError("trimmed", self.request,
                               f"{seg.source} {done + 1}..{seg.upstream_through}: not in "
                               f"this relay's journal, and its upstream could not be asked "
                               f"({answer.error})", {seg.source: seg.upstream_through})
                return None
            self._not_asked = (last, f"its upstream could not be asked ({answer.error})", None)
            return done + 1
        return max(through, answer.through) + 1

    def _lacking(self, source: str, markers: list[NotSelected], why: str = "",
                 through: int | None = None, items: tuple[str, ...] | None = None
                 ) -> GapError:
        """The answer for a run of numbers the relay lacks for this link
        (:func:`~seqrepair.journal.lacking.lacking_answer`)."""
        return lacking_answer(self.request, self.link.entitlement, self.link.link_id, source,
                              markers, why, through, items)

    def _more(self) -> bool:
        """Whether the subscriber must ask again: only if the link does not itself carry what
        the per-request limit left out. A ``more`` whose ``through`` the link cut back to the
        numbers asked after would tell the subscriber nothing new (it gives up: no progress)."""
        if not self.more or self.cover is None:
            return self.more
        for source, seq in self.capped_from.items():
            limit = self.link_limit(source)
            if limit is None or seq <= limit:
                return True
        return False

    def link_limit(self, source: str) -> int | None:
        """The last number of ``source`` the replay must carry (the link brings the rest), or
        None: all the journal holds."""
        assert self.cover is not None
        numbered = self.cover.context.recorded
        known = self._limits.get(source)
        if known is not None and known[0] == numbered:  # nothing numbered since: the same
            return known[1]
        limit = self.cover.limit(source)
        if self.carried_after is not None:
            carried = self.carried_after[source]
            if limit is None or carried < limit:
                limit = carried
        floor = self.carry_through.get(source)
        if limit is not None and floor is not None and floor > limit:
            limit = floor
        self._limits[source] = (numbered, limit)
        return limit


def undeliverable(pub: Publication) -> UndeliverableError | None:
    """Why a journaled ``pub`` cannot be sent as a message (None: it can). Publishers refuse
    such publications before journaling them (:mod:`seqrepair.core.limits`); a journal written
    before they did may still hold some."""
    try:
        check_deliverable(pub.topic, pub.fields, pub.permtoken)
    except UndeliverableError as exc:
        return exc
    return None
