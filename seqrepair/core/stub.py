"""The subscriber stub: reorders, detects gaps, asks for repair, delivers exactly once in order.

Theory of operation
-------------------
Frames arrive numbered by link (wire numbers of a ``bits``-wide space). The stub reads each
number in the window of half the space around the next number it expects to deliver, so it
keeps absolute link numbers internally. A frame at the expected number is delivered at once;
one ahead of it is buffered and the numbers in between become a gap (see
:mod:`seqrepair.core.gaps` for the per-gap state table). Heartbeats fill link numbers but are
never delivered.

Repair has two levels (XEP-0040 §2.4). Link gaps are requested by range after ``nak_delay``.
When the component has lost the link context (``GapError("context-lost")``) or the link resets
(a frame numbered 0), the stub asks for everything after the last source number it delivered
per source; replayed publications are delivered as they come and the closing
``ReplayComplete`` covers every link number that was missing when the request went out. The
request names the highest link number seen then (``link_through``): the component stops each
source's replay where the link itself carried on. A link range refused (too wide, or over the
resend budget: ``GapError("refused")``) is asked for by source the same way.
A replay that reaches into numbers retention trimmed is answered ``GapError("trimmed")`` naming
how far each source was trimmed; the stub reports those sources ``Unrecoverable`` and asks again
after the trimmed numbers, so what the journal still holds is delivered. A replay that stopped
at the component's per-request limit ends ``ReplayComplete(more=True)``: the stub asks again
after the ``through`` it names, until one ends without ``more``.
An adapter that learns of a reset out of band (a component announces a new link context when
the link attaches) calls ``link_reset(now)``; the in-band frame 0 is then optional.
A (re)attaching subscriber sends ``resume_point()`` first. A component that kept the link
context answers it by continuing the link: the first new frame of the old context satisfies
the request (link gaps are then repaired by range as ever). One that did not replays by source
and then starts the link at 0: that reset needs no replay of its own, so the new context is
delivered at once, or, when it overtakes the replay's ``ReplayComplete``, released by it.
A reset at any other time is handled as above. Answers to the requests a reset voided may still
come: each source request carries an id of its own (its retries keep it) that its answers echo,
and the link requests of the context before are remembered, so such an answer is dropped.
Delivery dedupes by source as well as by link: a publication whose source number is at or below
the last delivered for its source is a duplicate, which makes the two levels safe to mix.

The stub performs no I/O and reads no clock: ``receive(frame, now)`` and ``poll(now)`` return
events for an adapter to act on, and :attr:`SubscriberStub.next_deadline` says when to poll.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from math import inf

import attrs

from seqrepair.core.asked import AskedRequests
from seqrepair.core.config import check_now, non_negative_number, positive_int, positive_number
from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.events import (
    BufferOverflow,
    Delivered,
    DeliveredRun,
    Disconnect,
    Event,
    HeartbeatOverdue,
    LinkReset,
    RequestGap,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.gaps import GapState, GapTracker, RetryPolicy
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.overdue import MissedCount, OverduePolicy, parse_overdue_policy
from seqrepair.core.runs import Run, scan_run
from seqrepair.core.sequence import RESET, SequenceSpace
from seqrepair.core.sourcerepair import SourceRepair, answers_request, resume_after
from seqrepair.core.stubstats import StubStats

LinkFrame = Publication | Heartbeat


@attrs.define(on_setattr=attrs.setters.NO_OP)
class SubscriberStub:
    """Turns a lossy, reordering, duplicating link into an ordered, exact stream.

    ``bits``: link sequence width. ``heartbeat_interval`` and ``missed_heartbeats``: silence
    longer than ``missed_heartbeats`` intervals raises :class:`HeartbeatOverdue`.
    ``nak_delay``: reordering tolerance before a gap is requested. ``max_buffer``: most frames
    held out of order. Retries back off from ``retry_interval`` by ``backoff`` with ``jitter``,
    at most ``max_retries`` times; at most ``max_outstanding`` link requests are in flight, each
    spanning at most ``max_request_span`` numbers; gaps separated by up to ``coalesce`` received
    numbers go in one request. ``seed`` fixes the jitter for reproducible runs.
    """

    bits: int = 16
    heartbeat_interval: float = attrs.field(default=1.0, validator=positive_number)
    missed_heartbeats: int = attrs.field(default=3, validator=positive_int)
    nak_delay: float = attrs.field(default=0.05, validator=non_negative_number)
    max_buffer: int = attrs.field(default=100_000, validator=positive_int)
    retry_interval: float = attrs.field(default=0.2, kw_only=True, validator=positive_number)
    backoff: float = attrs.field(default=2.0, kw_only=True, validator=positive_number)
    jitter: float = attrs.field(default=0.25, kw_only=True, validator=non_negative_number)
    max_retries: int = attrs.field(default=6, kw_only=True, validator=positive_int)
    max_outstanding: int = attrs.field(default=32, kw_only=True, validator=positive_int)
    max_request_span: int = attrs.field(default=10_000, kw_only=True, validator=positive_int)
    coalesce: int = attrs.field(default=2, kw_only=True, validator=non_negative_number)
    overdue_policy: OverduePolicy = attrs.field(
        default=OverduePolicy.REQUEST, kw_only=True, converter=parse_overdue_policy
    )
    seed: int | None = attrs.field(default=None, kw_only=True)

    space: SequenceSpace = attrs.field(init=False)
    _stats: StubStats = attrs.field(init=False, factory=StubStats)
    _gaps: GapTracker = attrs.field(init=False)
    _buffer: dict[int, LinkFrame] = attrs.field(init=False, factory=dict)
    # absolute link numbers of the current context: wire = space.wire(n); 0 = the reset frame
    _expected: int = attrs.field(init=False, default=1)
    _expected_wire: int = attrs.field(init=False, default=1)
    _highest: int = attrs.field(init=False, default=0)
    _reset_frame: LinkFrame | None = attrs.field(init=False, default=None)
    # a reset was announced out of band (link_reset) and its in-band frame 0 has not come yet
    _reset_announced: bool = attrs.field(init=False, default=False)
    _last_delivered: dict[str, int] = attrs.field(init=False, factory=dict)
    # per source, numbers retention trimmed before they could be replayed: ask after them
    _replay_floor: dict[str, int] = attrs.field(init=False, factory=dict)
    _source: SourceRepair | None = attrs.field(init=False, default=None)
    _source_ids: int = attrs.field(init=False, default=0)  # the last SourceGapRequest.request_id
    _probe: int | None = attrs.field(init=False, default=None)  # the overdue probe's number
    _asked: AskedRequests = attrs.field(init=False, factory=AskedRequests)
    # _expected when the replay answering resume_point() completed before any link frame came;
    # None once a link frame or a reset has come since. A reset then is the new link context of
    # a component that replayed by source first (see _new_context).
    _resumed_at: int | None = attrs.field(init=False, default=None)
    _last_frame_at: float | None = attrs.field(init=False, default=None)
    _overdue_at: float | None = attrs.field(init=False, default=None)
    _missed: MissedCount = attrs.field(init=False)
    _events: list[Event] = attrs.field(init=False, factory=list)
    _silence_limit: float = attrs.field(init=False)

    @_missed.default
    def _missed_default(self) -> MissedCount:
        return MissedCount(self.missed_heartbeats, self.heartbeat_interval)

    @_silence_limit.default
    def _silence_default(self) -> float:
        return self.missed_heartbeats * self.heartbeat_interval

    @space.default
    def _space(self) -> SequenceSpace:
        return SequenceSpace(self.bits)

    @_gaps.default
    def _gap_tracker(self) -> GapTracker:
        policy = RetryPolicy(
            nak_delay=self.nak_delay,
            retry_interval=self.retry_interval,
            backoff=self.backoff,
            jitter=self.jitter,
            max_retries=self.max_retries,
            max_outstanding=self.max_outstanding,
            max_span=min(self.max_request_span, self.space.half),
            coalesce=self.coalesce,
        )
        return GapTracker(policy, random.Random(self.seed))

    # ----------------------------------------------------------------- public surface

    @property
    def stats(self) -> StubStats:
        """A copy of the counters."""
        return attrs.evolve(self._stats)

    @property
    def expected_link_seq(self) -> int:
        """The wire link number the stub will deliver next (0 while a reset frame waits)."""
        return self._expected_wire

    @property
    def buffered(self) -> int:
        """Frames held out of order right now."""
        return len(self._buffer)

    @property
    def last_delivered(self) -> dict[str, int]:
        """The last source number delivered, per source."""
        return dict(self._last_delivered)

    def link_reset(self, now: float) -> list[Event]:
        """The link restarts at 0, learnt out of band (the attach of a new link context).

        Does what the reset frame (link number 0) does, so losing that frame costs nothing:
        while no later frame of the new context has arrived, an in-band frame 0 is taken as
        this reset's frame rather than as another reset.
        """
        now = check_now(now)
        events: list[Event] = []
        self._events = events
        self._last_frame_at = now
        self._overdue_at = now + self._silence_limit
        self._new_context(Heartbeat(link_seq=RESET), now)  # a placeholder for frame 0
        self._reset_frame = None
        self._reset_announced = True
        return events

    def listening(self, now: float) -> None:
        """The adapter reads frames again from ``now`` on, after its thread was held (the
        application's callback): frames that came meanwhile still wait unread, so the silence
        that makes heartbeats overdue is counted from ``now``, not from the last frame taken.
        Gap and source-request deadlines are unchanged."""
        now = check_now(now)
        if self._overdue_at is not None and self._overdue_at < now + self._silence_limit:
            self._overdue_at = now + self._silence_limit
        if self._source is not None:
            self._source.listening(now, self._progress_wait)

    def resume_point(self) -> SourceGapRequest:
        """What a (re)attaching subscriber sends first: the last delivered number per source.

        Send it: the stub now expects the replay that answers it (delivered as it comes, the
        closing ``ReplayComplete`` covering the link numbers missing now), and retries it from
        :meth:`poll` if no answer comes, like a source request of its own.

        A component that kept the link context may instead simply continue the link: a frame
        that continues it (the next link number, or a later one, which opens an ordinary link
        gap) satisfies the request, which is then neither retried nor given up. A replay or
        ``ReplayComplete`` that still comes for it is dropped as stray: the link carries it all.
        A component that did not keep it replays by source, then starts the link at 0; that
        reset asks for nothing more (see :meth:`_new_context`).
        """
        return self._start_source_repair(next_at=None, hold=False, resume=True)

    @property
    def next_deadline(self) -> float | None:
        """When :meth:`poll` has work to do next, or None if nothing is timed."""
        deadlines = [self._overdue_at, self._gaps.next_deadline()]
        if self._source is not None:
            next_at = self._source.next_at
            deadlines.append(self._last_frame_at if next_at is None else next_at)
        timed = [d for d in deadlines if d is not None]
        return min(timed) if timed else None

    def receive(self, frame: object, now: float) -> list[Event]:
        """Take one frame from the component; return what to do about it.

        Raises :class:`InvalidMessageError` (or :class:`InvalidSequenceError`) for a frame that
        is not a seqrepair frame or whose link number is outside the space; the stub's state is
        then unchanged.
        """
        if type(now) is not float or not -inf < now < inf:  # NaN would silence every deadline
            now = check_now(now)
        expected = self._expected_wire
        if (
            type(frame) is Publication
            and frame.link_seq == expected
            and expected
            and not self._buffer
            and not self._gaps
            and self._source is None
        ):
            # The common case, kept short: the next frame, in order, nothing outstanding.
            self._last_frame_at = now
            self._overdue_at = now + self._silence_limit
            self._expected += 1
            self._highest = self._expected - 1
            self._expected_wire = 1 if expected == self.space.max else expected + 1
            events: list[Event] = []
            last = self._last_delivered.get(frame.source, 0)
            if frame.source_seq > last:
                self._last_delivered[frame.source] = frame.source_seq
                self._stats.delivered += 1
                events.append(Delivered(frame))
            else:
                self._stats.duplicates += 1
            return events
        highest = self._highest
        if (
            type(frame) is Publication
            and frame.link_seq == highest % self.space.max + 1
            and self._source is None
            and expected
            and self._expected <= highest < self._expected + self.space.half
            and len(self._buffer) < self.max_buffer
        ):
            # The next case, kept short too: the number after the highest, held behind a gap.
            self._resumed_at = None
            self._last_frame_at = now
            self._overdue_at = now + self._silence_limit
            self._highest = highest + 1
            self._buffer[highest + 1] = frame
            if len(self._buffer) > self._stats.max_buffered:
                self._stats.max_buffered = len(self._buffer)
            return []
        return self._receive(frame, now)

    def receive_many(self, frames: Sequence[object], now: float) -> list[Event]:
        """Take several frames (a transfer's worth) in order, as :meth:`receive` takes one.

        The events, their order and the counters are those of calling :meth:`receive` on each
        frame in turn, except that each run of publications delivered in order comes as one
        :class:`DeliveredRun` rather than one :class:`Delivered` per publication: the cheap
        path for batches. Every frame is checked before any is taken, so an invalid one raises
        as :meth:`receive` would and leaves the stub unchanged.
        """
        if type(now) is not float or not -inf < now < inf:
            now = check_now(now)
        events: list[Event] = []
        taken = self._take_run(frames, 0, now, events, check_rest=True)
        while taken < len(frames):
            events.extend(self.receive(frames[taken], now))
            taken = self._take_run(frames, taken + 1, now, events, check_rest=False)
        return events

    def _take_run(
        self, frames: Sequence[object], start: int, now: float, events: list[Event],
        *, check_rest: bool,
    ) -> int:
        """Deliver the in-order publications from ``frames[start]`` on; return the index of
        the first frame not taken. With ``check_rest`` the frames after the run are checked
        before the run is taken, so an invalid frame leaves the stub unchanged."""
        run = self._scan_run(frames, start)
        stop = start if run is None else run.stop
        if check_rest:
            for frame in frames[stop:]:
                self._check(frame)
        if run is None or stop == start:
            return stop
        self._last_delivered.update(run.last)
        self._expected += stop - start
        self._highest = self._expected - 1
        self._expected_wire = run.expected_wire
        self._last_frame_at = now
        self._overdue_at = now + self._silence_limit
        self._stats.delivered += len(run.publications)
        self._stats.duplicates += run.duplicates
        if run.publications:
            events.append(DeliveredRun(run.publications))
        return stop

    def _scan_run(self, frames: Sequence[object], start: int) -> Run | None:
        """The run of frames from ``start`` that :meth:`receive`'s in-order case would take,
        found without changing the stub; None when that case does not apply now."""
        if self._buffer or self._gaps or self._source is not None or not self._expected:
            return None
        return scan_run(frames, start, self._expected_wire, self.space.max, self._last_delivered)

    def _check(self, frame: object) -> int | None:
        """The link number of ``frame`` if it has one; raise if it is no frame for a stub."""
        if isinstance(frame, Publication | Heartbeat):
            if frame.link_seq is not None:
                return self.space.check(frame.link_seq, allow_reset=True)
        elif isinstance(frame, GapError):
            if isinstance(frame.request, GapRequest):
                self.space.check(frame.request.link_from)
                self.space.check(frame.request.link_to)
        elif not isinstance(frame, ReplayComplete):
            raise InvalidMessageError(
                "a stub receives Publication, Heartbeat, GapError or ReplayComplete",
                expected="Publication | Heartbeat | GapError | ReplayComplete",
                got=type(frame).__name__,
            )
        return None

    def _receive(self, frame: object, now: float) -> list[Event]:
        link_seq = self._check(frame)
        self._last_frame_at = now
        self._overdue_at = now + self._silence_limit
        events: list[Event] = []
        self._events = events
        if isinstance(frame, GapError):
            self._on_gap_error(frame, now)
        elif isinstance(frame, ReplayComplete):
            self._on_replay_complete(frame, now)
        elif link_seq is None:
            assert isinstance(frame, Publication)
            self._on_replayed(frame, now)
        else:
            assert isinstance(frame, Publication | Heartbeat)  # what _check lets through
            if link_seq == RESET:
                self._on_reset(frame, now)
            else:
                self._on_link_frame(frame, link_seq, now)
        return events

    def poll(self, now: float) -> list[Event]:
        """Timed work: overdue heartbeats, due and retried gap requests, source retries.

        Call it once when the link is attached (that starts the heartbeat watch even if no
        frame ever arrives), then whenever ``now`` reaches :attr:`next_deadline`.
        """
        now = check_now(now)
        events: list[Event] = []
        self._events = events
        if self._last_frame_at is None:
            self._last_frame_at = now
            self._overdue_at = now + self._silence_limit
        elif self._overdue_at is not None and now >= self._overdue_at:
            self._on_overdue(now)
        source = self._source
        if source is not None:
            if source.next_at is None:
                source.next_at = now + self._retry_wait(source.attempts)
            elif now >= source.next_at:
                self._retry_source_request(now)
        requests, give_ups = self._gaps.due(now, below=self._expected + self.max_buffer)
        for give_up in give_ups:
            self._unrecoverable_link(give_up.start, give_up.end, "give-up")
        for request in requests:
            self._request_link(request.start, request.end)
        if give_ups:
            self._drain()
        return events

    # ----------------------------------------------------------------- link frames

    def _on_link_frame(self, frame: LinkFrame, wire: int, now: float) -> None:
        self._resumed_at = None
        source = self._source
        if source is not None:
            source.quiet = False
        number = self._position(wire)
        if number < self._expected or number in self._buffer:
            self._stats.duplicates += 1
            return
        if source is not None and source.resume and not source.hold:
            self._resume_continued(now)
        room = len(self._buffer) < self.max_buffer or number == self._expected
        if number > self._highest:
            if number > self._highest + 1:
                self._gaps.add(self._highest + 1, number - 1, now)
                self._stats.gaps_detected += 1
            if not room:
                self._gaps.add(number, number, now)
            self._highest = number
        elif not room:
            pass  # the number stays missing and is requested again when there is room
        elif self._gaps.fill(number) is None:
            self._stats.duplicates += 1
            return
        elif isinstance(frame, Publication) and frame.retransmit:
            self._stats.link_repaired += 1
        if not room:
            self._stats.overflow_dropped += 1
            self._events.append(BufferOverflow(limit=self.max_buffer, dropped=1))
            return
        self._buffer[number] = frame
        if len(self._buffer) > self._stats.max_buffered:
            self._stats.max_buffered = len(self._buffer)
        if number == self._expected:
            self._drain()

    def _position(self, wire: int) -> int:
        """The absolute link number of ``wire``: within half the space of the expected one."""
        if not self._expected:
            return wire  # a reset context: numbers count from the reset frame at 0
        ahead = (wire - self._expected_wire) % self.space.max
        if ahead > self.space.half and self._expected + ahead - self.space.max >= 1:
            return self._expected + ahead - self.space.max
        return self._expected + ahead

    def _drain(self) -> None:
        """Deliver from the expected number on, jumping covered or abandoned gaps."""
        if self._source is not None and self._source.hold:
            return
        buffer = self._buffer
        expected = self._expected
        last_delivered = self._last_delivered
        stats = self._stats
        events = self._events
        while True:
            frame = buffer.pop(expected, None)
            if frame is not None:
                expected += 1
                if type(frame) is not Publication:
                    self._consume(frame)
                elif frame.source_seq > last_delivered.get(frame.source, 0):
                    # _deliver, inlined: a repair drains thousands of frames at a time
                    last_delivered[frame.source] = frame.source_seq
                    stats.delivered += 1
                    events.append(Delivered(frame))
                else:
                    stats.duplicates += 1
                continue
            gap = self._gaps.first()
            if gap is not None and gap.start == expected and gap.state is GapState.SKIPPED:
                expected = gap.end + 1
                self._gaps.pop_first()
                continue
            break
        self._expected = expected
        self._expected_wire = self.space.wire(expected) if expected else RESET

    def _consume(self, frame: LinkFrame) -> None:
        if isinstance(frame, Publication):
            self._deliver(frame)
        else:
            self._stats.heartbeats += 1

    def _deliver(self, publication: Publication) -> bool:
        if publication.source_seq <= self._last_delivered.get(publication.source, 0):
            self._stats.duplicates += 1
            return False
        self._last_delivered[publication.source] = publication.source_seq
        self._stats.delivered += 1
        self._events.append(Delivered(publication))
        return True

    def _request_link(self, start: int, end: int) -> None:
        self._stats.requests_sent += 1
        request = GapRequest(link_from=self.space.wire(start), link_to=self.space.wire(end))
        self._asked.note(request)
        self._events.append(RequestGap(request))

    def _unrecoverable_link(self, start: int, end: int, reason: str) -> None:
        self._stats.unrecoverable += end - start + 1
        wire = self.space.wire
        self._events.append(Unrecoverable(source=None, after=None, reason=reason,
                                          link_from=wire(start), link_to=wire(end)))

    # ----------------------------------------------------------------- reset and source repair

    def _on_reset(self, frame: LinkFrame, now: float) -> None:
        if self._reset_announced and self._highest == 0:
            # the in-band frame of the reset announced by link_reset(): the same reset
            self._reset_announced = False
            self._reset_frame = frame
            if self._expected == 0:
                self._buffer[0] = frame  # still held: it takes the placeholder's place
            else:
                self._consume(frame)  # the replay has released the context already
            return
        if self._expected == 0 and self._highest == 0 and frame == self._reset_frame:
            # a copy of this context's frame 0, still held; once the context has moved on (a
            # later frame, or the frame itself released), a 0 is a new reset: taking a copy for
            # one costs a replay, taking a new reset for a copy would lose what it voided
            self._stats.duplicates += 1
            return
        self._new_context(frame, now)

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
                abandoned=len(self._buffer) + self._gaps.missing(),
            )
        )
        self._stats.resets += 1
        self._reset_announced = False
        self._buffer.clear()
        self._gaps.clear()
        self._probe = None
        self._asked.new_context()
        self._reset_frame = frame
        self._buffer[0] = frame
        self._expected = 0
        self._expected_wire = RESET
        self._highest = 0
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
        now and keeps the hold of the one it replaces."""
        request = self._new_source_request(self._highest)
        previous = self._source
        self._source = SourceRepair(
            request=request,
            cover_through=self._highest,
            hold=hold or (previous is not None and previous.hold),
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
        return SourceGapRequest(
            after=resume_after(self._last_delivered, self._replay_floor),
            request_id=self._source_ids,
            link_through=self.space.wire(cover_through) if cover_through else RESET,
        )

    def _skip_trimmed(self, trimmed_through: Mapping[str, int], now: float) -> bool:
        """Report the sources whose requested numbers were trimmed and ask again after them.

        False when the answer names nothing beyond what was asked: no progress is possible,
        the caller gives up as for any other refusal.
        """
        source = self._source
        assert source is not None
        after = source.request.after
        lost = {
            name: through
            for name, through in sorted(trimmed_through.items())
            if through > after.get(name, 0)
        }
        if not lost:
            return False
        for name, through in lost.items():
            last = self._last_delivered.get(name, after.get(name))
            self._events.append(Unrecoverable(source=name, after=last, reason="trimmed"))
            self._replay_floor[name] = through
            self._stats.sources_trimmed += 1
        self._ask_again(source, now)
        return True

    def _continue_replay(self, through: Mapping[str, int], now: float) -> bool:
        """The replay stopped at the component's per-request limit (``more``): ask again after
        what it read, not after what was delivered (a filter may keep that far behind).

        False when the answer read nothing beyond what was asked: no progress is possible.
        """
        source = self._source
        assert source is not None
        after = source.request.after
        read = {name: seq for name, seq in through.items() if seq > after.get(name, 0)}
        if not read:
            return False
        for name, seq in read.items():
            self._replay_floor[name] = max(seq, self._replay_floor.get(name, 0))
        self._stats.source_continued += 1
        self._ask_again(source, now)
        return True

    def _ask_again(self, source: SourceRepair, now: float) -> None:
        """Send the request in flight again from the current resume points, as a fresh try."""
        source.request = self._new_source_request(source.cover_through)
        source.attempts = 1
        source.next_at = now + self._retry_wait(1)
        self._stats.source_requests_sent += 1
        self._events.append(RequestSourceGap(source.request))

    @property
    def _progress_wait(self) -> float:
        """How long a replay that is making progress may pause: the longest first retry wait
        (no draw from the generator: a replay's progress must not shift the jitter)."""
        return self.retry_interval * (1.0 + self.jitter)

    def _retry_wait(self, attempts: int) -> float:
        wait = self.retry_interval * self.backoff ** (attempts - 1)
        return float(wait * (1.0 + self.jitter * self._gaps.rng.random()))

    def _retry_source_request(self, now: float) -> None:
        source = self._source
        assert source is not None
        if source.attempts >= self.max_retries:
            self._abandon_source_repair("give-up")
            return
        source.attempts += 1
        # The cover point stays the first attempt's: requests with the same ``after`` are equal,
        # so an answer may be to an earlier attempt, made before the newer frames went missing.
        after = resume_after(self._last_delivered, self._replay_floor)
        source.request = attrs.evolve(source.request, after=after)
        source.next_at = now + self._retry_wait(source.attempts)
        self._stats.source_requests_sent += 1
        self._events.append(RequestSourceGap(source.request))

    def _resume_continued(self, now: float) -> None:
        """A new frame of the old link context answered resume_point(): the component kept the
        context, so the link itself brings what follows and link gaps are repaired by range. The
        request is done; a replay that still comes for it is stray (the link carries it all)."""
        self._source = None
        if self._gaps.in_state(GapState.SOURCE):  # context-lost gaps still need a replay
            self._request_source(now, hold=False)

    def _on_replayed(self, publication: Publication, now: float) -> None:
        if self._source is None:
            # Without a replay in flight a link-less frame cannot be placed in link order;
            # delivering it could overtake buffered frames of its source, so it is not kept.
            self._stats.stray_dropped += 1
            return
        if self._deliver(publication):
            self._stats.source_repaired += 1
            self._source.progress(now, self._progress_wait)

    def _on_replay_complete(self, complete: ReplayComplete, now: float) -> None:
        source = self._source
        if source is None or not answers_request(complete, source.request):
            self._stats.stray_dropped += 1
            return
        if not complete.more:
            self._finish_source_repair(source, now)
        elif not self._continue_replay(complete.through, now):
            self._abandon_source_repair("no-progress")

    def _finish_source_repair(self, source: SourceRepair, now: float) -> None:
        self._source = None
        for gap in self._gaps.mark(1, source.cover_through, GapState.SKIPPED):
            self._stats.source_covered += gap.size
        self._drain()
        if source.resume and source.quiet and not source.hold:
            self._resumed_at = self._expected
        if self._gaps.in_state(GapState.SOURCE):
            self._request_source(now, hold=False)

    def _abandon_source_repair(self, reason: str) -> None:
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
        for gap in self._gaps:
            if gap.state is GapState.SOURCE:
                gap.state = GapState.SKIPPED
                self._stats.unrecoverable += gap.size
        self._drain()

    def _on_gap_error(self, error: GapError, now: float) -> None:
        request = error.request
        if isinstance(request, SourceGapRequest) or (request is None and self._source):
            if self._source is None or (
                request is not None and not request.same_as(self._source.request)
            ):
                self._stats.stray_dropped += 1
                return
            trimmed = error.trimmed_through
            if error.reason == "trimmed" and trimmed and self._skip_trimmed(trimmed, now):
                return
            self._abandon_source_repair(error.reason)
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

    # ----------------------------------------------------------------- heartbeats

    def _on_overdue(self, now: float) -> None:
        since = self._last_frame_at
        assert since is not None
        missed = self._missed.alert(since, now)
        self._events.append(HeartbeatOverdue(missed=missed, since=since))
        self._overdue_at = now + self.heartbeat_interval
        if self.overdue_policy is OverduePolicy.REQUEST:
            self._probe = self._highest + 1
            self._request_link(self._probe, self._probe)
        elif self.overdue_policy is OverduePolicy.DISCONNECT:
            self._events.append(Disconnect(reason=f"{missed} heartbeat intervals without a frame"))
