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
A replay is a session that makes progress, never starts over: until the component's
``ReplayStarted`` or a replayed publication comes, the request is retried with backoff; from
then on it is asked again only after a real silence (a heartbeat interval without a frame),
each time with the same ``request_id`` and ``after`` = the remainder not yet delivered, so a
component still running the replay continues it and one that lost it replays only the rest.
An answer to any attempt of the request (same ``request_id``) answers it.
A reset starts a new session: numbers of the old link context mean nothing in the new one,
yet a transport that does not tie a reset to a new link may still bring old frames, whose
numbers read as slots of the new context. So the new context's frames are held unread until
the replay the reset owes completes; its ``through`` covers per source everything the old
contexts carried (the component cuts it where the new context starts), and from then on a
link publication at or below it is stale: it takes no slot, moves no highest number and
anchors no view (``stats.stale_dropped``; see :meth:`StaleFrames._hold`). A window full of
such frames (a replay that ran past the new context's start) still moves: the component's tail
probe, repeating one, covers the numbers up to it by source (see ``StaleFrames._on_stale``).
An adapter that learns of a reset out of band (a component announces a new link context when
the link attaches) calls ``link_reset(now)``; the in-band frame 0 is then optional, and the
first one that comes (a heartbeat) is that reset's frame, even after later frames.
A (re)attaching subscriber sends ``resume_point()`` first. A component that kept the link
context answers it by continuing the link: the first new frame of the old context satisfies
the request (link gaps are then repaired by range as ever), yet its answer may still come and
bring what the link passed over as given: once any of it comes, or a link publication that is
not its source's next number is due, the request is in flight again and the link waits for its
end. One that did not replays by source and then starts the link at 0: that reset needs no
replay of its own, so the new context is delivered at once, or, when it overtakes the replay's
``ReplayComplete``, released by it.
A reset at any other time is handled as above. Answers to the requests a reset voided may still
come: each source request carries an id of its own (its retries keep it) that its answers echo,
and the link requests of the context before are remembered, so such an answer is dropped.
Delivery dedupes by source as well as by link: a publication whose source number is at or below
the last delivered for its source is a duplicate, which makes the two levels safe to mix.
Source numbers are the truth, link numbers only the fast path. A frame the link calls old
(behind the expected number, or its slot holding another frame) that its source proves new
means the reading of link numbers is lost (a sender more than half the space ahead, a stale
frame): the stub anchors a new view on it and replays by source (see
:mod:`seqrepair.core.stubrepair`); the late original of a number given up is delivered (in its
source's order). An original whose source's newest delivery came by link in an earlier slot
does not fill its slot (a link numbers each source in order): it is a stale frame, perhaps in
the slot of one that was lost, so the slot is asked for again, and only the component's answer
to that fills it.

The stub performs no I/O and reads no clock: ``receive(frame, now)`` and ``poll(now)`` return
events for an adapter to act on, and :attr:`SubscriberStub.next_deadline` says when to poll.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from math import inf

import attrs

from seqrepair.core.asked import AskedRequests
from seqrepair.core.config import check_now, non_negative_number, positive_int, positive_number
from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.events import (
    Delivered,
    DeliveredRun,
    Disconnect,
    Event,
    HeartbeatOverdue,
)
from seqrepair.core.gaps import GapState, GapTracker, RetryPolicy
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
)
from seqrepair.core.overdue import MissedCount, OverduePolicy, parse_overdue_policy
from seqrepair.core.runs import Run, scan_run
from seqrepair.core.sequence import RESET, SequenceSpace
from seqrepair.core.snapshot import ImageRequest
from seqrepair.core.sourcerepair import SourceRepair
from seqrepair.core.stubimages import ImageResyncing
from seqrepair.core.stublink import LinkReordering
from seqrepair.core.stubrepair import SourceRepairing
from seqrepair.core.stubstats import StubStats

LinkFrame = Publication | Heartbeat


@attrs.define(on_setattr=attrs.setters.NO_OP)
class SubscriberStub(LinkReordering, SourceRepairing, ImageResyncing):
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
    # the resume_point() request a frame of the kept context answered, while nothing of its
    # answer has come: that answer is still taken (see stubrepair._resume_continued)
    _resume_answered: SourceRepair | None = attrs.field(init=False, default=None)
    # the publications held when the link view was lost (see stubrepair), offered to the
    # new view once the replay has come
    _salvage: list[Publication] = attrs.field(init=False, factory=list)
    # the highest link number of this context a completed replay covered
    _covered_through: int = attrs.field(init=False, default=0)
    # the newest link ranges of this context given up as Unrecoverable (absolute numbers)
    _given_up: deque[tuple[int, int]] = attrs.field(init=False, factory=lambda: deque(maxlen=64))
    # per source, the highest number a replay delivered in this link context
    _replay_top: dict[str, int] = attrs.field(init=False, factory=dict)
    # the frames of a reset context that came while its replay is owed, unread (see stubstale)
    _held: list[tuple[LinkFrame, int]] = attrs.field(init=False, factory=list)
    # per source, the numbers the replays that released reset contexts answered: every link
    # context before the current one carried only publications at or below them
    _stale_floor: dict[str, int] = attrs.field(init=False, factory=dict)
    # the part of _stale_floor above the last delivered (what the fast paths must check)
    _stale_ahead: dict[str, int] = attrs.field(init=False, factory=dict)
    # the highest number a stale copy moved _highest to, no frame having proved it sent (see
    # stubstale._on_stale); 0 when none: a source request covering through it is not cut
    _unproven_top: int = attrs.field(init=False, default=0)
    # stale originals past the highest number, by absolute number: what a tail probe repeats
    _stale_seen: dict[int, tuple[str, int]] = attrs.field(init=False, factory=dict)
    _releasing: bool = attrs.field(init=False, default=False)  # reading the held frames
    _tail_probe: bool = attrs.field(init=False, default=False)  # see receive_tail_probe
    # the replay owed by the held reset context answers through here so far (``more``, trims)
    _hold_through: dict[str, int] = attrs.field(init=False, factory=dict)
    _now: float = attrs.field(init=False, default=0.0)  # the latest now given (reopened gaps)
    # image requests (see stubimages)
    _image_ids: int = attrs.field(init=False, default=0)
    _image_asked: dict[int, ImageRequest] = attrs.field(init=False, factory=dict)
    _image_topics: dict[int, set[str]] = attrs.field(init=False, factory=dict)
    _image_floor: dict[str, dict[str, int]] = attrs.field(init=False, factory=dict)
    _image_top: dict[str, int] = attrs.field(init=False, factory=dict)
    _image_due: dict[int, float] = attrs.field(init=False, factory=dict)  # when to ask again
    _image_tries: dict[int, int] = attrs.field(init=False, factory=dict)
    _image_rejections: dict[int, int] = attrs.field(init=False, factory=dict)
    _image_resend: set[int] = attrs.field(init=False, factory=set)
    _image_sends: dict[int, int] = attrs.field(init=False, factory=dict)
    _image_given: dict[str, dict[str, int]] = attrs.field(init=False, factory=dict)
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
    def consumed_through(self) -> int | None:
        """The wire link number of the current context up to which every number is consumed
        (delivered, a heartbeat, covered by a replay or given up as Unrecoverable): what an
        ACK's ``link_through`` says. 0 while nothing is (a reset context's frame 0 included);
        None before the link has brought anything."""
        expected = self._expected
        if expected > 1:
            return self.space.wire(expected - 1)
        if expected == 1 and self._highest == 0 and not self._stats.resets:
            return None
        return 0

    @property
    def buffered(self) -> int:
        """Frames held out of order right now (a reset context's included)."""
        return len(self._buffer) + len(self._held)

    @property
    def last_delivered(self) -> dict[str, int]:
        """The last source number delivered, per source."""
        return dict(self._last_delivered)

    def link_reset(self, now: float) -> list[Event]:
        """The link restarts at 0, learnt out of band (the attach of a new link context).

        Does what the reset frame (link number 0) does, so losing that frame costs nothing:
        the first in-band frame 0 that comes after it is taken as this reset's frame rather
        than as another reset (a publication only while no later frame has come; a heartbeat,
        what a reset frame is, even after later frames overtook it). The adapter must then
        announce every reset.
        """
        now = check_now(now)
        self._now = now
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
        gap) satisfies the request, which is then neither retried nor given up while the link
        brings each source's next number. An answer that still comes for it makes it the
        request in flight again (the component may have passed over on the link as given what
        that replay brings), as does a link publication that is not the next number of its
        source: it waits for that answer, which may bring the numbers before it.
        A refusal of it (the resend budget, which refills) is asked again with backoff, the
        link held until it is answered, and given up only when the retries run out; so is a
        rejection of its delivery that passes (:meth:`request_rejected`).
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
        if self._image_due:
            deadlines.append(min(self._image_due.values()))
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
            and not self._image_floor
            and self._resume_answered is None
            and frame.source_seq > self._last_delivered.get(frame.source, 0)
            and (not self._stale_ahead or frame.source_seq > self._stale_ahead.get(frame.source, 0))
        ):
            # The common case, kept short: the next frame, in order, new for its source,
            # nothing outstanding. (One its source has delivered may be a stale frame in the
            # slot of one lost: the slow path judges it.)
            self._last_frame_at = now
            self._overdue_at = now + self._silence_limit
            self._expected += 1
            self._highest = self._expected - 1
            self._expected_wire = 1 if expected == self.space.max else expected + 1
            self._last_delivered[frame.source] = frame.source_seq
            self._stats.delivered += 1
            return [Delivered(frame)]
        highest = self._highest
        if (
            type(frame) is Publication
            and frame.link_seq == highest % self.space.max + 1
            and self._source is None
            and expected
            and self._expected <= highest < self._expected + self.space.half
            and len(self._buffer) < self.max_buffer
            and (not self._stale_floor or frame.source_seq > self._stale_floor.get(frame.source, 0))
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

    def receive_tail_probe(self, frame: object, now: float) -> list[Event]:
        """:meth:`receive` for a frame the component marked as its tail probe (``tail_probe``
        on the wire, naming the context the adapter is in): the newest frame of the current
        link context, resent while its window is full. Every number up to it was sent by this
        context, so a stale publication there still tells how far the window reaches."""
        self._stats.tail_probes += 1
        self._tail_probe = True
        try:
            return self.receive(frame, now)
        finally:
            self._tail_probe = False

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
            replayed = self._take_replayed(frames, taken, now, events)  # a replay's chunk
            if replayed == taken:
                events.extend(self.receive(frames[taken], now))
                replayed += 1
            taken = self._take_run(frames, replayed, now, events, check_rest=False)
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
        if (self._buffer or self._gaps or self._source is not None or not self._expected
                or self._image_floor or self._resume_answered is not None):
            return None
        delivered = self._last_delivered
        if self._stale_ahead:  # what a stale frame may carry counts as delivered
            delivered = dict(delivered)
            for name, seq in self._stale_ahead.items():
                if seq > delivered.get(name, 0):
                    delivered[name] = seq
        return scan_run(frames, start, self._expected_wire, self.space.max, delivered)

    def _check(self, frame: object) -> int | None:
        """The link number of ``frame`` if it has one; raise if it is no frame for a stub."""
        if isinstance(frame, Publication | Heartbeat):
            if frame.link_seq is not None:
                return self.space.check(frame.link_seq, allow_reset=True)
        elif isinstance(frame, GapError):
            if isinstance(frame.request, GapRequest):
                self.space.check(frame.request.link_from)
                self.space.check(frame.request.link_to)
        elif not isinstance(frame, ReplayComplete | ReplayStarted) and not self._check_image(
            frame
        ):
            raise InvalidMessageError(
                "a stub receives Publication, Heartbeat, GapError, ReplayComplete, "
                "ReplayStarted or an image",
                expected="Publication | Heartbeat | GapError | ReplayComplete | ReplayStarted"
                " | ImageFrame | ImageComplete",
                got=type(frame).__name__,
            )
        return None

    def _receive(self, frame: object, now: float) -> list[Event]:
        link_seq = self._check(frame)
        self._now = now
        self._last_frame_at = now
        self._overdue_at = now + self._silence_limit
        events: list[Event] = []
        self._events = events
        if isinstance(frame, GapError):
            self._on_gap_error(frame, now)
        elif isinstance(frame, ReplayStarted):
            self._on_replay_started(frame, now)
        elif isinstance(frame, ReplayComplete):
            self._on_replay_complete(frame, now)
        elif not isinstance(frame, Publication | Heartbeat):
            self._receive_image(frame)  # an image answer: not a link frame (stubimages)
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
        self._now = now
        events: list[Event] = []
        self._events = events
        if self._image_due:
            self._retry_images(now)
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
        for give_up in give_ups:  # the component does not answer for its link context: the
            # journal still may, by source; only a source repair's give-up is Unrecoverable,
            # and it names the sources (a link range names no publication)
            marked = self._gaps.mark(give_up.start, give_up.end, GapState.SOURCE)
            if marked and self._source is None:
                self._request_source(now, hold=False)
        for request in requests:
            self._request_link(request.start, request.end)
        return events

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
