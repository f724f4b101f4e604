"""The subscriber stub's link frames, a part of :class:`~seqrepair.core.stub.SubscriberStub`.

A frame numbered by the link (neither a reset's frame 0 nor a replayed publication) is read at
its absolute link number (:meth:`LinkReordering._position`): taken at the expected number,
buffered past it (the numbers in between becoming a gap), or found old (a duplicate, or proof
that the link view is lost: :mod:`seqrepair.core.stubrepair`); :meth:`LinkReordering._drain`
delivers from the expected number on. It is apart from ``stub.py`` so that module holds the
stub's state, its public surface and the fast paths of
:meth:`~seqrepair.core.stub.SubscriberStub.receive`. See the theory of operation in
:mod:`seqrepair.core.stub`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from seqrepair.core.asked import AskedRequests
from seqrepair.core.events import BufferOverflow, Delivered, Event, RequestGap, Unrecoverable
from seqrepair.core.gaps import GapState, GapTracker
from seqrepair.core.messages import GapRequest, Heartbeat, Publication
from seqrepair.core.sequence import RESET, SequenceSpace
from seqrepair.core.sourcerepair import SourceRepair
from seqrepair.core.stubstale import LinkFrame
from seqrepair.core.stubstats import StubStats


class LinkReordering:
    """Link frames for :class:`~seqrepair.core.stub.SubscriberStub`, which defines the state
    declared here (attrs fields): the reorder buffer, link gaps and in-order delivery; what
    breaks the link view is :class:`~seqrepair.core.stubrepair.SourceRepairing`'s."""

    space: SequenceSpace
    max_buffer: int
    # the reorder buffer and the link gaps, by absolute link number
    _buffer: dict[int, LinkFrame]
    _expected: int
    _expected_wire: int
    _highest: int
    _gaps: GapTracker
    _asked: AskedRequests
    _given_up: deque[tuple[int, int]]
    _covered_through: int
    # what decides whether a publication is new for its source
    _last_delivered: dict[str, int]
    _replay_top: dict[str, int]
    _stale_floor: dict[str, int]
    _image_floor: dict[str, dict[str, int]]
    # the source repair under way, if any
    _source: SourceRepair | None
    _resumed_at: int | None
    _resume_answered: SourceRepair | None
    # the counters, and the events of the call under way
    _stats: StubStats
    _events: list[Event]
    _now: float

    if TYPE_CHECKING:

        def _hold(self, frame: LinkFrame, wire: int) -> None: ...

        def _on_stale(self, frame: Publication, wire: int, now: float) -> None: ...

        def _link_view_lost(self, frame: LinkFrame, wire: int, now: float) -> None: ...

        def _resume_continued(self, now: float) -> None: ...

        def _await_resume_answer(self, now: float, *, heard: bool) -> None: ...

        def _covered(self, publication: Publication) -> bool: ...

    def _on_link_frame(self, frame: LinkFrame, wire: int, now: float) -> None:
        self._resumed_at = None
        source = self._source
        if source is not None:
            source.quiet = False
        if (
            self._stale_floor
            and type(frame) is Publication
            and frame.source_seq <= self._stale_floor.get(frame.source, 0)
        ):
            self._on_stale(frame, wire, now)
            return
        if not self._expected and source is not None and source.hold:
            self._hold(frame, wire)
            return
        number = self._position(wire)
        if (
            number > self._highest
            and number > self._expected
            and type(frame) is Publication
            and not frame.retransmit
            and frame.source_seq <= self._last_delivered.get(frame.source, 0)
        ):
            # Past every number seen, and its source has it: a copy more than half the space
            # old read ahead (a sender or a copy past the window), or one a replay ran past.
            # It must not move the highest number: a source request names that number as
            # link_through and the replay's cover counts from it, so a number the component
            # has not sent yet would cut the replay short of slots it then calls covered. Its
            # content is delivered; were it the slot's own frame, a later frame shows the slot
            # missing and its resend fills it.
            self._stats.duplicates += 1
            return
        if number < self._expected or number in self._buffer:
            if not self._proves_view_lost(frame, number):
                self._stats.duplicates += 1
            elif number < self._expected and any(
                start <= number <= end for start, end in self._given_up
            ):
                # the late original of a number given up: nothing of its source after it has
                # been delivered and what the link holds of it comes later, so it is in order
                assert isinstance(frame, Publication)
                self._deliver(frame)
            else:
                self._link_view_lost(frame, wire, now)
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
        else:
            gap = self._gaps.fill(number)
            if gap is None:
                if self._proves_view_lost(frame, number):
                    self._link_view_lost(frame, wire, now)
                else:
                    self._stats.duplicates += 1
                return
            if isinstance(frame, Publication) and frame.retransmit:
                self._stats.link_repaired += 1
                if gap.reopened and frame.source_seq <= self._last_delivered.get(
                    frame.source, 0
                ):
                    # the component says the slot asked for again carries one delivered
                    # already: the slot is filled, as a heartbeat fills one
                    frame = Heartbeat(link_seq=wire)
        if not room:
            self._stats.overflow_dropped += 1
            self._events.append(BufferOverflow(limit=self.max_buffer, dropped=1))
            return
        self._buffer[number] = frame
        if len(self._buffer) > self._stats.max_buffered:
            self._stats.max_buffered = len(self._buffer)
        if number == self._expected:
            self._drain()

    def _proves_view_lost(self, frame: LinkFrame, number: int) -> bool:
        """Does ``frame``, which the link numbering calls old (``number`` delivered, or held),
        prove the link view lost? Yes when its slot holds another frame, or when its source
        number says new: neither delivered nor held. Absolute source numbers are the truth."""
        held = self._buffer.get(number)
        if held is not None:
            if type(held) is not type(frame):
                return True
            if type(frame) is not Publication:
                return False  # two heartbeats: nothing can be lost between them
            assert type(held) is Publication
            return (held.source, held.source_seq) != (frame.source, frame.source_seq)
        if type(frame) is not Publication:
            return False
        if frame.source_seq <= self._last_delivered.get(frame.source, 0):
            return False
        key = (frame.source, frame.source_seq)
        return not any(
            type(other) is Publication and (other.source, other.source_seq) == key
            for other in self._buffer.values()
        )

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
        floors = self._image_floor
        continued = self._resume_answered
        while True:
            frame = buffer.pop(expected, None)
            if frame is not None:
                expected += 1
                if type(frame) is not Publication:
                    self._consume(frame)
                elif frame.source_seq > last_delivered.get(frame.source, 0):
                    if floors and self._covered(frame):
                        continue  # an image delivered holds it (stubimages)
                    if continued is not None and frame.source_seq > last_delivered.get(
                        frame.source, 0
                    ) + 1:
                        # the answer to the resume the link continued may bring numbers of
                        # its source before it (what the link passed over as given): it waits
                        expected -= 1
                        buffer[expected] = frame
                        self._await_resume_answer(self._now, heard=False)
                        break
                    # _deliver, inlined: a repair drains thousands of frames at a time
                    last_delivered[frame.source] = frame.source_seq
                    stats.delivered += 1
                    events.append(Delivered(frame))
                elif expected <= self._covered_through + 1 or last_delivered[
                    frame.source
                ] <= self._replay_top.get(frame.source, 0):
                    # a replay covered the slot (whatever took it, what it carried was
                    # replayed), or it is the reset frame, never asked for by link; or a
                    # replay of this context delivered it (one that ran on past the link)
                    stats.duplicates += 1
                else:
                    # Its source's newest delivery came by link, in an earlier slot: a link
                    # numbers each source in order, so this is a stale frame (an old
                    # context's, an earlier lap's, an answer to a voided request) in the slot
                    # of one perhaps lost. The slot is asked for again; what the component
                    # resends there is the truth.
                    stats.duplicates += 1
                    stats.slots_reopened += 1
                    expected -= 1
                    self._gaps.reopen(expected, self._now)
                    break
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
        """Deliver ``publication`` unless its source has it; True when taken (delivered, or
        covered by an image delivered: consumed all the same)."""
        if publication.source_seq <= self._last_delivered.get(publication.source, 0):
            self._stats.duplicates += 1
            return False
        if self._image_floor and self._covered(publication):
            return True
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
        self._given_up.append((start, end))
        wire = self.space.wire
        self._events.append(Unrecoverable(source=None, after=None, reason=reason,
                                          link_from=wire(start), link_to=wire(end)))
