"""The subscriber stub's reset and source-level repair, a part of :class:`SubscriberStub`.

:class:`~seqrepair.core.stub.SubscriberStub` reads link frames (``stub.py``, ``stublink.py``);
this mixin holds what it does when the link view breaks: a reset (frame 0 or ``link_reset``), a
lost link context (``GapError("context-lost")``), a frame the link numbering calls old that its
source number proves new (the link view is lost: see :meth:`SourceRepairing._link_view_lost`),
and the source-level request that repairs them (XEP-0040 §2.4), its retries, replays, trims and
give-up. The frames held and found stale meanwhile are :mod:`seqrepair.core.stubstale`'s. See
the theory of operation in :mod:`seqrepair.core.stub`.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from seqrepair.core.asked import AskedRequests
from seqrepair.core.config import check_now
from seqrepair.core.events import (
    DeliveredRun,
    Event,
    LinkReset,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.gaps import GapState, GapTracker
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
    same_attempt,
)
from seqrepair.core.sequence import RESET, SequenceSpace
from seqrepair.core.sourcerepair import SourceRepair, answers_request, resume_after
from seqrepair.core.stubstale import LinkFrame, StaleFrames
from seqrepair.core.stubstats import StubStats

TEMPORARY_REJECTIONS: frozenset[str] = frozenset(
    {"amqp:resource-limit-exceeded", "amqp:internal-error", "amqp:not-found"}
)
"""Conditions of a rejected request delivery that pass (the component's replay room, which
frees as replays end, its request allowance; a failure of its own, its journal out of reach
a moment; no such link on the connection, as when the component detached the data link while
the request was on its way, and the retry names the link attached again):
:meth:`SourceRepairing.request_rejected` asks again with backoff."""


def _same_frame(frame: LinkFrame, other: LinkFrame | None) -> bool:
    """Whether ``frame`` is ``other`` or a copy of it, resent or not: a retransmission (a
    range request's answer, which may repeat a context's frame 0) differs only by its flag."""
    if other is None or type(frame) is not type(other):
        return False
    if frame.retransmit is not other.retransmit:
        if isinstance(frame, Publication):
            frame = frame.with_link(frame.link_seq, retransmit=other.retransmit)
        else:
            frame = attrs.evolve(frame, retransmit=other.retransmit)
    return frame == other


class SourceRepairing(StaleFrames):
    """Reset and source-level repair for :class:`~seqrepair.core.stub.SubscriberStub`, which
    defines the state declared here (attrs fields) and the link-side methods named below."""

    retry_interval: float
    heartbeat_interval: float
    backoff: float
    jitter: float
    max_retries: int
    space: SequenceSpace
    _stats: StubStats
    _gaps: GapTracker
    _buffer: dict[int, LinkFrame]
    _expected: int
    _expected_wire: int
    _highest: int
    _reset_frame: LinkFrame | None
    _reset_announced: bool
    _last_delivered: dict[str, int]
    _replay_floor: dict[str, int]
    _source: SourceRepair | None
    _source_ids: int
    _probe: int | None
    _asked: AskedRequests
    _resumed_at: int | None
    _resume_answered: SourceRepair | None
    _events: list[Event]
    _salvage: list[Publication]
    _covered_through: int
    _replay_top: dict[str, int]
    _given_up: deque[tuple[int, int]]
    _held: list[tuple[LinkFrame, int]]
    _stale_floor: dict[str, int]
    _stale_ahead: dict[str, int]
    _unproven_top: int
    _stale_seen: dict[int, tuple[str, int]]
    _releasing: bool
    _tail_probe: bool
    _hold_through: dict[str, int]
    _image_floor: dict[str, dict[str, int]]
    _now: float
    _last_frame_at: float | None
    _overdue_at: float | None
    _silence_limit: float
    max_buffer: int

    if TYPE_CHECKING:

        def _drain(self) -> None: ...

        def _consume(self, frame: LinkFrame) -> None: ...

        def _deliver(self, publication: Publication) -> bool: ...

        def _position(self, wire: int) -> int: ...

        def _unrecoverable_link(self, start: int, end: int, reason: str) -> None: ...

        def _on_link_frame(self, frame: LinkFrame, wire: int, now: float) -> None: ...


    def _on_reset(self, frame: LinkFrame, now: float) -> None:
        same = _same_frame(frame, self._reset_frame)
        if isinstance(frame, Publication) and not same and (
            frame.source_seq <= self._stale_floor.get(frame.source, 0)
            or (not self._expected and frame.source_seq <= self._last_delivered.get(
                frame.source, 0))
        ):
            # the frame 0 of an older context: a reset context's first publication is newer
            # than all an older context carried, and than what the replay its reset owes
            # delivers (its own frame 0 comes after that replay's cut)
            self._stats.duplicates += 1
            self._stats.stale_dropped += 1
            return
        if self._reset_announced and (
            (self._highest == 0 and not self._held)
            or type(frame) is Heartbeat
        ):
            # The first frame 0 after the announcement, even when frames after it overtook
            # it (a reset frame is a heartbeat; the adapter announces every reset): taking it
            # for a new reset would void what they brought and ask for it by numbers the
            # component reads in its own context.
            # the in-band frame of the reset announced by link_reset(): the same reset
            self._reset_announced = False
            self._reset_frame = frame
            if self._expected == 0:
                self._buffer[0] = frame  # still held: it takes the placeholder's place
            else:
                self._consume(frame)  # the replay has released the context already
            return
        if same and (
            (self._expected == 0 and self._highest == 0 and not self._held)
            or (type(frame) is Heartbeat and frame.timestamp is not None)
        ):
            # a copy of this context's frame 0 (resent or not), still held, or a heartbeat
            # that says when it was sent (no new reset sends the same); otherwise, once the
            # context has moved on (a later frame, or the frame itself released), a 0 is a new
            # reset: taking a copy for one costs a replay, taking a new reset for a copy would
            # lose what it voided
            self._stats.duplicates += 1
            return
        self._new_context(frame, now)

    # ----------------------------------------------------------------- the link view lost

    def _link_view_lost(self, frame: LinkFrame, wire: int, now: float) -> None:
        """A frame the link numbering calls old proved otherwise (its slot holds another frame,
        or its source has not delivered it): the stub's reading of link numbers is lost (the
        sender ran more than half the space ahead, or a stale frame took a slot).

        Nothing is dropped. The publications held are kept aside; the link gaps, the link
        requests and any source request in flight are void, since they name numbers read in
        the lost view. ``frame`` anchors a new view at a fresh absolute number and is held
        until a source replay (after the last delivered per source, cut where the link carries
        on past ``wire``) completes: everything the link sent before ``frame`` was journaled
        before the request, so the replay brings it; the link brings what follows, repaired by
        range as ever. The component reads ``wire`` as its latest frame so numbered, never an
        earlier one, so a stale anchor only makes the replay carry more; a frame then more than
        half the space ahead of it proves the view lost again and anchors anew.
        """
        self._stats.link_view_lost += 1
        self._salvage.extend(
            held for held in self._buffer.values() if isinstance(held, Publication)
        )
        self._buffer.clear()
        self._gaps.clear()
        self._replay_top.clear()
        self._given_up.clear()
        self._probe = None
        self._asked.new_context()
        self._source = None  # its answers are stray now; the anchored request replaces it
        self._resumed_at = None
        top = self.space.max
        number = (max(self._expected, self._highest) // top + 1) * top + wire  # wire(n) == wire
        self._expected = self._highest = number
        self._unproven_top = 0
        self._stale_seen.clear()
        self._expected_wire = wire
        self._buffer[number] = frame
        self._request_source(now, hold=True)

    def _offer_salvage(self, now: float) -> None:
        """After a replay: the publications kept aside when the view was lost go back to the
        link in their slots of the new view. What the replay delivered is dropped; one whose
        slot is behind the new view and that its source still lacks is delivered (after a trim
        or a give-up it was named Unrecoverable; delivering it late keeps its source's order)."""
        salvage, self._salvage = self._salvage, []
        for index, publication in enumerate(salvage):
            if self._source is not None and self._source.hold:
                self._salvage.extend(salvage[index:])  # lost again: after the next replay
                return
            wire = publication.link_seq
            assert wire is not None
            if publication.source_seq <= self._last_delivered.get(publication.source, 0):
                self._stats.duplicates += 1
            elif self._position(wire) < self._expected:
                # its slot went to another frame (a stale one): nothing of its source after it
                # has been delivered, and the replay brought its source up to the link's part,
                # of which it comes first in what is left: in order now
                self._deliver(publication)
            else:
                self._on_link_frame(publication, wire, now)

    def _new_context(self, frame: LinkFrame, now: float) -> None:
        """Void the old link context; ``frame`` is the new context's number 0.

        Mid-stream, what the old context still owed is asked for by source and the new context
        waits for that replay. After resume_point() the component has replayed by source before
        starting the new link at 0, so no other request goes out: if that replay has completed
        (and no link frame came since) the new context is delivered at once; if it is still
        coming, its ReplayComplete releases the new context.
        """
        source = self._source
        replayed = source is None and self._resumed_at == self._expected
        self._resumed_at = None
        self._events.append(
            LinkReset(
                previous_expected=self._expected_wire,
                abandoned=len(self._buffer) + len(self._held) + self._gaps.missing(),
            )
        )
        self._stats.resets += 1
        self._reset_announced = False
        self._buffer.clear()
        self._held.clear()
        self._hold_through.clear()
        self._gaps.clear()
        self._probe = None
        self._asked.new_context()
        self._reset_frame = frame
        self._buffer[0] = frame
        self._covered_through = 0
        self._replay_top.clear()
        self._given_up.clear()
        self._expected = 0
        self._expected_wire = RESET
        self._highest = self._unproven_top = 0
        self._stale_seen.clear()
        if source is not None and source.resume and source.quiet:
            # the new context of the (re)attach; a later reset voids frames the replay of
            # resume_point() may not reach, so it asks again like any other
            source.hold = True
            source.quiet = False
            source.cover_through = 0  # the new context's numbers were never missing from it
        elif replayed:
            self._drain()
        else:
            self._request_source(now, hold=True)

    def _request_source(self, now: float, *, hold: bool) -> None:
        """Ask for a replay after the last delivered numbers (replacing any in flight).

        The answer covers every link number missing now: all were sent before the request.
        """
        request = self._start_source_repair(next_at=now + self._retry_wait(1), hold=hold)
        self._events.append(RequestSourceGap(request))

    def _start_source_repair(
        self, *, next_at: float | None, hold: bool, resume: bool = False
    ) -> SourceGapRequest:
        """Put a source request in flight (replacing any): it covers every link number missing
        now and keeps the hold of the one it replaces, or of the resting request of a resume
        the link continued (its replay, like that one's, may bring numbers before the link's)."""
        request = self._new_source_request(self._highest)
        # a replay in flight takes what still comes of it (a new resume's replaces it)
        resting = self._resume_answered is not None and not resume
        self._resume_answered = None
        previous = self._source
        self._source = SourceRepair(
            request=request,
            cover_through=self._highest,
            hold=hold or resting or (previous is not None and previous.hold),
            attempts=1,
            next_at=next_at,
            resume=resume,
        )
        self._stats.source_requests_sent += 1
        return request

    def _new_source_request(self, cover_through: int) -> SourceGapRequest:
        """A request after the resume points, with an id of its own: an answer to an earlier
        request that asked the same (before a reset, say) does not end this one. It names the
        link number it covers through: what the link numbered after that, it brings."""
        self._source_ids += 1
        link_through: int | None = self.space.wire(cover_through) if cover_through else RESET
        if cover_through and cover_through == self._unproven_top:
            link_through = None  # a number no frame of this context proved sent: see _on_stale
        return SourceGapRequest(
            after=resume_after(self._last_delivered, self._replay_floor),
            request_id=self._source_ids,
            link_through=link_through,
        )

    def _skip_trimmed(
        self, trimmed_through: Mapping[str, int], now: float,
        items: Mapping[str, tuple[str, ...]] | None = None,
    ) -> bool:
        """Report the sources whose requested numbers were trimmed and ask again after them
        (with the items lost, per source, when the component named them).

        False when the answer names nothing beyond what the request's first attempt asked:
        no progress is possible, the caller gives up as for any other refusal.
        """
        source = self._source
        assert source is not None
        assert source.first_after is not None
        after = source.first_after
        lost = {
            name: through
            for name, through in sorted(trimmed_through.items())
            if through > after.get(name, 0)
        }
        if not lost:
            return False
        if source.hold and not self._expected and not source.resume:
            self._note_hold_through(lost)
        for name, through in lost.items():
            last = self._last_delivered.get(name, after.get(name))
            self._events.append(Unrecoverable(
                source=name, after=last, reason="trimmed",
                items=None if items is None else items.get(name)))
            self._replay_floor[name] = through
            self._stats.sources_trimmed += 1
        self._ask_again(source, now)
        return True

    def _continue_replay(self, through: Mapping[str, int], now: float) -> bool:
        """The replay stopped at the component's per-request limit (``more``): ask again after
        what it read, not after what was delivered (a filter may keep that far behind).

        False when the answer read nothing beyond what the request's first attempt asked
        (a component may have continued that attempt's replay for a retry, which asked after
        more): no progress is possible.
        """
        source = self._source
        assert source is not None
        assert source.first_after is not None
        after = source.first_after
        read = {name: seq for name, seq in through.items() if seq > after.get(name, 0)}
        if not read:
            return False
        for name, seq in read.items():
            self._replay_floor[name] = max(seq, self._replay_floor.get(name, 0))
        self._stats.source_continued += 1
        following = source.following
        if following is not None and all(
            following.after.get(name, 0) <= seq for name, seq in through.items()
        ):
            # asked already (pipelined), after no more than this replay reached: its answer
            # comes next on the link, nothing is skipped
            self._take_following(source, following, now)
            return True
        self._ask_again(source, now)
        return True

    def _ask_following(self, source: SourceRepair, started: ReplayStarted) -> None:
        """The replay in flight stops at the per-request limit (``started.more``): ask now for
        what follows it, after its ``through`` (after what was delivered for the sources it
        does not reach), so the component answers it as soon as this one ends instead of a
        round trip later (JetStream's clients pull the next batch before this one ends)."""
        after = resume_after(self._last_delivered, dict(self._replay_floor))
        for name, seq in started.through.items():
            after[name] = max(after.get(name, 0), seq)
        self._source_ids += 1
        following = SourceGapRequest(after=after, request_id=self._source_ids,
                                     link_through=source.request.link_through)
        source.following = following
        source.following_started = None
        self._stats.source_requests_sent += 1
        self._events.append(RequestSourceGap(following))

    def _take_following(self, source: SourceRepair, following: SourceGapRequest,
                        now: float) -> None:
        """The pipelined request is the one in flight now (its replay comes next)."""
        started = source.following_started
        source.request = following
        source.first_after = following.after
        source.following = source.following_started = None
        source.attempts = 1
        source.next_at = now + self._retry_wait(1)
        if started is not None:
            source.progress(now, self._progress_wait)  # the component said it runs it
            if started.more:
                self._ask_following(source, started)

    def _ask_again(self, source: SourceRepair, now: float) -> None:
        """Send the request in flight again from the current resume points, as a fresh try.

        A request it pipelined is dropped: the component takes this one as a replacement and
        drops the one queued behind the replay in progress (WIRE.md, One replay per link), so
        waiting for its answer would wait for a silence, and this one pipelines its own."""
        source.following = source.following_started = None
        source.request = self._new_source_request(source.cover_through)
        source.first_after = source.request.after
        source.attempts = 1
        source.next_at = now + self._retry_wait(1)
        self._stats.source_requests_sent += 1
        self._events.append(RequestSourceGap(source.request))

    @property
    def _progress_wait(self) -> float:
        """How long a live replay (acknowledged, or its frames coming) may fall silent before
        the stub asks "still going?": a heartbeat interval (the component sends a frame at
        least that often on a link with credit), at least the longest first retry wait. No
        draw from the generator: a replay's progress must not shift the jitter. Asking costs
        little: the component continues a replay it still runs (:class:`ReplayStarted`)."""
        return max(self.retry_interval * (1.0 + self.jitter), self.heartbeat_interval)

    def _on_replay_started(self, started: ReplayStarted, now: float) -> None:
        """The component runs the replay of the request in flight (or of an earlier attempt
        of it, which it continues): it is live, and only a real silence asks again."""
        if self._source is None:
            self._resume_answer(started.request)
        source = self._source
        if source is None:
            return
        if source.following is not None and same_attempt(started.request, source.following):
            source.following_started = started  # it runs once the replay in flight ends
            return
        if not same_attempt(started.request, source.request):
            return  # about a request given up or replaced: its frames are dropped as stray
        source.progress(now, self._progress_wait)
        if started.more and source.following is None:
            self._ask_following(source, started)

    def _retry_wait(self, attempts: int, most: float | None = None) -> float:
        """The wait before attempt ``attempts`` + 1: ``retry_interval`` doubling by
        ``backoff`` (at most ``most``, when given), plus up to ``jitter`` of it at random."""
        wait = self.retry_interval * self.backoff ** (attempts - 1)
        if most is not None:
            wait = min(wait, most)
        return float(wait * (1.0 + self.jitter * self._gaps.rng.random()))

    def _retry_source_request(self, now: float) -> None:
        source = self._source
        assert source is not None
        if source.attempts >= self.max_retries:
            self._abandon_source_repair("give-up", now)
            return
        source.attempts += 1
        # The cover point and the id stay the first attempt's: an answer may be to an earlier
        # attempt (a component continues the replay it still runs), made before the newer
        # frames went missing. ``after`` is the remainder: what has not come yet.
        after = resume_after(self._last_delivered, self._replay_floor)
        source.request = attrs.evolve(source.request, after=after)
        wait = self._retry_wait(source.attempts)
        if source.live:  # "still going?": a live replay is given at least a real silence
            wait = max(wait, self._progress_wait)
        source.next_at = now + wait
        self._stats.source_requests_sent += 1
        self._events.append(RequestSourceGap(source.request))

    def _resume_continued(self, now: float) -> None:
        """A new frame of the old link context answered resume_point(): the component kept the
        context, so the link brings what follows and link gaps are repaired by range. The
        request rests (neither retried nor given up) until :meth:`_await_resume_answer`."""
        assert self._source is not None
        self._resume_answered = self._source
        self._source = None
        if self._gaps.in_state(GapState.SOURCE):  # context-lost gaps still need a replay
            self._request_source(now, hold=False)

    def _await_resume_answer(self, now: float, *, heard: bool) -> None:
        """The resting request of a resume the link continued is in flight again, holding the
        link until its answer ends: an answer came (``heard``), or a link publication that is
        not its source's next number is due. The link passes over as given what a replay gave
        (WIRE.md), so that answer may bring the numbers before it, and may come after it (sent
        on the link's first credit, or resent ahead of the replay's pages)."""
        source = self._resume_answered
        assert source is not None
        assert self._source is None
        self._resume_answered = None
        source.hold = True
        source.quiet = False
        if heard:
            source.progress(now, self._progress_wait)
        else:
            source.next_at = now + self._retry_wait(source.attempts)
        self._source = source

    def _resume_answer(self, request: SourceGapRequest | None) -> bool:
        """Is an answer naming ``request`` (None: a replayed publication) to the resting
        request? If so that request is in flight again."""
        continued = self._resume_answered
        if continued is None or (request and not same_attempt(request, continued.request)):
            return False
        self._await_resume_answer(self._now, heard=True)
        return True

    def request_rejected(
        self, request: GapRequest | SourceGapRequest, condition: str | None, now: float
    ) -> list[Event]:
        """The component rejected the delivery of ``request`` (what a :class:`RequestGap` or
        :class:`RequestSourceGap` asked), with the AMQP ``condition`` (None: none given): it
        never reached the component, and no answer will come, so it is taken as that request
        refused. A link range is asked for by source (the journal still holds it). A source
        request, when the condition passes (:data:`TEMPORARY_REJECTIONS`: the replay room, a
        failure of the component's own),
        is asked again with backoff and holds what it held (the link, for resume_point()'s),
        and when it does not, or the retries run out, is given up: ``Unrecoverable`` for what
        it covers, the reason the condition. A rejection of resume_point()'s request that the
        link continued makes it the request in flight again, as its answer would."""
        now = check_now(now)
        self._now = now
        events: list[Event] = []
        self._events = events
        reason = condition or "rejected"
        self._stats.requests_rejected += 1
        if isinstance(request, GapRequest):
            self._on_gap_error(GapError("refused", request, detail=reason), now)
            return events
        if self._source is None:
            self._resume_answer(request)
        source = self._source
        if source is None or not same_attempt(request, source.request):
            self._stats.stray_dropped += 1  # given up, replaced or answered meanwhile
        elif reason in TEMPORARY_REJECTIONS and source.attempts < self.max_retries:
            self._refused_again(now)
        else:
            self._abandon_source_repair(reason, now)
        return events

    def _refused_again(self, now: float) -> None:
        """The component refused the request in flight for now (its resend budget, or the
        replay room, which free): asked again as if unanswered, given up only when the
        retries run out. For resume_point()'s: the journal holds all it asks for, and a link
        the component kept goes on (giving up named every source Unrecoverable while the link
        delivered them), but what that link passed over as given by a replay the stub never
        read only this request's answer brings: the link is held until it comes, and does not
        satisfy the request meanwhile."""
        source = self._source
        assert source is not None
        source.hold = source.hold or source.resume
        source.quiet = False
        source.live = False
        source.next_at = now + self._retry_wait(source.attempts)

    def _on_replayed(self, publication: Publication, now: float) -> None:
        if self._source is None and not self._resume_answer(None):
            # Without a replay in flight a link-less frame cannot be placed in link order;
            # delivering it could overtake buffered frames of its source, so it is not kept.
            self._stats.stray_dropped += 1
            return
        assert self._source is not None
        if self._deliver(publication):
            self._stats.source_repaired += 1
            self._replay_top[publication.source] = publication.source_seq
        # Delivered or not (one the link or an earlier answer brought), an answer is arriving:
        # the replay is making progress, so it is neither asked for again (which would restart
        # it from the start at the component) nor given up while answers keep coming.
        self._source.progress(now, self._progress_wait)

    def _take_replayed(
        self, frames: Sequence[object], start: int, now: float, events: list[Event]
    ) -> int:
        """Take the replayed publications (no link number) from ``frames[start]`` on, as
        :meth:`_on_replayed` takes each in turn, those delivered as one :class:`DeliveredRun`;
        return the index of the first frame not taken (``start``: none, the frame goes the
        usual way). The frames were checked already (:meth:`receive_many`)."""
        source = self._source
        if source is None or self._image_floor:
            return start  # stray, or judged against an image: one at a time
        delivered = self._last_delivered
        top = self._replay_top
        stats = self._stats
        taken: list[Publication] = []
        end = start
        for frame in itertools.islice(frames, start, None):
            if type(frame) is not Publication or frame.link_seq is not None:
                break
            end += 1
            name, seq = frame.source, frame.source_seq
            if seq <= delivered.get(name, 0):
                stats.duplicates += 1
                continue
            delivered[name] = top[name] = seq
            taken.append(frame)
        if end == start:
            return start
        stats.delivered += len(taken)
        stats.source_repaired += len(taken)
        self._now = now
        self._last_frame_at = now
        self._overdue_at = now + self._silence_limit
        source.progress(now, self._progress_wait)
        if taken:
            events.append(DeliveredRun(tuple(taken)))
        return end

    def _on_replay_complete(self, complete: ReplayComplete, now: float) -> None:
        continued = self._resume_answered
        if continued is not None and answers_request(complete, continued.request):
            self._await_resume_answer(now, heard=True)  # its end: it may say more
        source = self._source
        if source is None or not answers_request(complete, source.request):
            self._stats.stray_dropped += 1
            return
        if source.hold and not self._expected and not source.resume:
            self._note_hold_through(complete.through)
        if not complete.more:
            self._finish_source_repair(source, now)
        elif not self._continue_replay(complete.through, now):
            self._abandon_source_repair("no-progress", now)

    def _finish_source_repair(self, source: SourceRepair, now: float) -> None:
        self._source = None
        if source.hold and not self._expected and not source.resume:
            # a reset mid-stream (a reattach's new link carries nothing of the old): see _hold
            self._raise_stale_floor(self._hold_through)
        self._covered_through = max(self._covered_through, source.cover_through)
        for gap in self._gaps.mark(1, source.cover_through, GapState.SKIPPED):
            self._stats.source_covered += gap.size
        self._drain()
        if source.resume and source.quiet and not source.hold:
            self._resumed_at = self._expected
        if self._held:
            self._release_held(now)
        if self._salvage:
            self._offer_salvage(now)
        if self._gaps.in_state(GapState.SOURCE):
            self._request_source(now, hold=False)

    def _abandon_source_repair(self, reason: str, now: float) -> None:
        """Give the source request up (refused, retries run out with no answer arriving, or
        no progress possible): every source it asked for is reported ``Unrecoverable`` after
        what was delivered, and counted in ``stats.unrecoverable`` (the link numbers it was to
        cover, at least one: what a replay owed after a reset is not known by number)."""
        source = self._source
        assert source is not None
        after = source.request.after
        for name, seq in sorted(after.items()):
            # the replay may have delivered past what was asked: what is lost starts after that
            last = max(seq, self._last_delivered.get(name, 0))
            self._events.append(Unrecoverable(source=name, after=last, reason=reason))
        # and the sources it does not name (replayed from the link's start) may have lost some
        self._events.append(Unrecoverable(source=None, after=None, reason=reason))
        self._stats.sources_abandoned += 1
        self._source = None
        lost = 0
        for gap in self._gaps:
            if gap.state is GapState.SOURCE:
                gap.state = GapState.SKIPPED
                self._given_up.append((gap.start, gap.end))  # a late original is still taken
                lost += gap.size
        self._stats.unrecoverable += max(lost, 1)
        self._drain()
        if self._held:
            self._release_held(now)
        if self._salvage:
            self._offer_salvage(now)

    def _on_gap_error(self, error: GapError, now: float) -> None:
        request = error.request
        if isinstance(request, SourceGapRequest) and self._source is None:
            self._resume_answer(request)
        if isinstance(request, SourceGapRequest) or (request is None and self._source):
            if self._source is None or (
                request is not None and not same_attempt(request, self._source.request)
            ):
                self._stats.stray_dropped += 1
                return
            if error.reason == "refused" and self._source.resume and (
                self._source.attempts < self.max_retries
            ):
                self._refused_again(now)
                return
            trimmed = error.trimmed_through
            if error.reason == "trimmed" and trimmed and self._skip_trimmed(
                trimmed, now, error.items
            ):
                return
            self._abandon_source_repair(error.reason, now)
            return
        if self._asked.voided(request):  # not about the numbers this context uses again
            self._stats.stray_dropped += 1
            return
        if request is None:  # no request named: it concerns every link gap
            start, end = self._expected, self._highest
        else:
            start = self._position(request.link_from)
            end = start + self.space.distance(request.link_from, request.link_to)
            if start == end == self._probe and start > self._highest and error.reason == (
                "context-lost"
            ):  # the overdue probe: the component sent that number and cannot resend it
                self._gaps.add(self._highest + 1, start, now)
                self._highest = start
        if error.reason in ("context-lost", "refused"):  # a refused range (too wide, over the
            # budget) is in the journal all the same: asked by source, never skipped silently
            marked = self._gaps.mark(start, end, GapState.SOURCE)
            # A replay in flight covers what was missing when it was asked for; anything newer
            # is asked for when it completes (see _finish_source_repair).
            if marked and self._source is None:
                self._request_source(now, hold=False)
            return
        for gap in self._gaps.mark(start, end, GapState.SKIPPED):
            self._unrecoverable_link(gap.start, gap.end, error.reason)
        self._drain()

