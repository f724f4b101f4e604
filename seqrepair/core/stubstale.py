"""The subscriber stub's stale frames, a part of :class:`~seqrepair.core.stub.SubscriberStub`.

After a reset the new link context's frames are held unread until the replay the reset owes
completes (:meth:`StaleFrames._hold`); that replay's ``through`` raises, per source, the stale
floor, and a link publication at or below it is stale: it takes no slot, moves no highest number
and anchors no view, except a resent copy that proves itself this context's newest frame (a tail
probe: :meth:`StaleFrames._on_stale`). See the theory of operation in :mod:`seqrepair.core.stub`
and the source-level repair in :mod:`seqrepair.core.stubrepair`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from seqrepair.core.events import BufferOverflow, Event
from seqrepair.core.gaps import GapState, GapTracker
from seqrepair.core.messages import Heartbeat, Publication
from seqrepair.core.sequence import SequenceSpace
from seqrepair.core.sourcerepair import SourceRepair
from seqrepair.core.stubstats import StubStats

LinkFrame = Publication | Heartbeat


class StaleFrames:
    """Held and stale frames for :class:`~seqrepair.core.stub.SubscriberStub`, which defines
    the state declared here (attrs fields); the source repair it starts is
    :class:`~seqrepair.core.stubrepair.SourceRepairing`'s."""

    space: SequenceSpace
    max_buffer: int
    _stats: StubStats
    _events: list[Event]
    _gaps: GapTracker
    _buffer: dict[int, LinkFrame]
    _expected: int
    _highest: int
    _last_delivered: dict[str, int]
    _source: SourceRepair | None
    _held: list[tuple[LinkFrame, int]]
    _hold_through: dict[str, int]
    _stale_floor: dict[str, int]
    _stale_ahead: dict[str, int]
    _unproven_top: int
    _stale_seen: dict[int, tuple[str, int]]
    _releasing: bool
    _tail_probe: bool

    if TYPE_CHECKING:

        def _position(self, wire: int) -> int: ...

        def _on_link_frame(self, frame: LinkFrame, wire: int, now: float) -> None: ...

        def _request_source(self, now: float, *, hold: bool) -> None: ...

    def _hold(self, frame: LinkFrame, wire: int) -> None:
        """Keep a frame of a reset context unread until the replay its reset owes completes.

        A reset starts a new link context, like a new session: numbers of the old one mean
        nothing in it, yet a frame of the old one may still arrive (a transport that does not
        tie a reset to a new link), and its number reads as a slot of the new one. Which
        frames are old is known only once the replay completes: its ``through`` covers, per
        source, everything the old contexts carried (see :meth:`_raise_stale_floor`). So the
        new context's frames are read then, not before: no old frame takes a slot, stretches
        the highest number seen past what the component sent, or anchors a new view.
        """
        if len(self._held) >= self.max_buffer:
            self._stats.overflow_dropped += 1
            self._events.append(BufferOverflow(limit=self.max_buffer, dropped=1))
            return  # its number is found missing when the context is read, and asked for
        self._held.append((frame, wire))
        if len(self._held) > self._stats.max_buffered:
            self._stats.max_buffered = len(self._held)

    def _release_held(self, now: float) -> None:
        """Read the frames held while a reset context's replay was owed, in arrival order."""
        held, self._held = self._held, []
        self._releasing = True
        try:
            for index, (frame, wire) in enumerate(held):
                if not self._expected and self._source is not None and self._source.hold:
                    self._held.extend(held[index:])  # reset again meanwhile: after its replay
                    return
                self._on_link_frame(frame, wire, now)
        finally:
            self._releasing = False

    def _note_hold_through(self, through: Mapping[str, int]) -> None:
        for name, seq in through.items():
            if seq > self._hold_through.get(name, 0):
                self._hold_through[name] = seq

    def _raise_stale_floor(self, through: Mapping[str, int]) -> None:
        """The replay a reset owed answered every number at or below ``through``: the link
        contexts before the reset carried nothing above it (the replay stops where the new
        context starts), so a link frame at or below it is stale, or a copy of what the
        replay delivered (one that ran past the start of the new context): either way it is
        no new frame of the slot it names."""
        floor = self._stale_floor
        for name, seq in through.items():
            if seq > floor.get(name, 0):
                floor[name] = seq
        delivered = self._last_delivered
        self._stale_ahead = {
            name: seq for name, seq in floor.items() if seq > delivered.get(name, 0)
        }
        self._hold_through = {}

    def _on_stale(self, frame: Publication, wire: int, now: float) -> None:
        """A link publication at or below the stale floor: it takes no slot. One sent again
        (a range answer, or a component's tail probe: its newest frame resent while its window
        is full) may be the true frame of its slot (a copy of one the replay delivered) or a
        stale answer: a replay decides, the slot being left to source repair.

        A window full of frames carrying only publications the reset's replay delivered sends
        no heartbeat and nothing new, only its newest frame again (a tail probe), and unless
        the slots up to it are consumed the window never opens (issue 27 audit: the stub's ACK
        is the component's window). So a resent copy past the highest number seen moves it
        when, since the context was released:

        * this context brought the same publication at that number before, as an original
          (unread as stale; the frames held until the replay's end, where an old context's
          stragglers gather, do not count). An earlier resent copy does not count either: an
          old context's answer comes duplicated too. So a window whose newest original was
          lost stays shut as before;
        * nothing of its source newer than the floor has been delivered or is held (a link
          numbers each source in order: this context's frames before it carried older ones).

        Then the copy is most likely this context's newest frame, not an answer of an old
        context (whose number says nothing here). Still unproven: the replay that covers it
        runs to the journal's high-water (no ``link_through``: see
        :meth:`_new_source_request`), so whatever the component sent up to it is delivered
        once by source, and a later frame at a covered number that its source proves new
        anchors a new view. A lone copy past the highest number moves nothing, unless the component
        marked it as its tail probe (:meth:`receive_tail_probe`): then its number is proven."""
        self._stats.duplicates += 1
        self._stats.stale_dropped += 1
        ahead = self._stale_ahead.get(frame.source)
        if ahead is not None and ahead <= self._last_delivered.get(frame.source, 0):
            del self._stale_ahead[frame.source]
        if not self._expected:
            return
        number = self._position(wire)
        if not frame.retransmit:
            if number > self._highest and not self._releasing:
                self._note_stale_seen(number, frame)
            return
        first = number
        if number == self._expected > self._highest:
            # the answer to the probe for the next number: the component has sent it
            self._highest = number
            self._gaps.add(number, number, now)
        elif number > self._highest and not self._releasing and self._tail_probe:
            # marked by the component: this context's newest frame, so its number is proven
            first = self._highest + 1
            self._gaps.add(first, number, now)
            self._highest = number
            self._stale_seen = {n: key for n, key in self._stale_seen.items() if n > number}
        elif (
            number > self._highest
            and not self._releasing
            and self._stale_seen.get(number) == (frame.source, frame.source_seq)
            and self._last_delivered.get(frame.source, 0)
            <= self._stale_floor.get(frame.source, 0)
            and not any(
                type(held) is Publication and held.source == frame.source
                for held in self._buffer.values()
            )
        ):  # a tail probe (behind the expected number never gets here): see above
            first = self._highest + 1
            self._gaps.add(first, number, now)
            self._highest = self._unproven_top = number
            self._stale_seen = {n: key for n, key in self._stale_seen.items() if n > number}
        if self._expected <= number <= self._highest and number not in self._buffer and (
            self._gaps.mark(first, number, GapState.SOURCE) and self._source is None
        ):
            self._request_source(now, hold=False)

    def _note_stale_seen(self, number: int, frame: Publication) -> None:
        """Remember what a stale original past the highest number carried at ``number``
        (bounded: what the highest number has passed is forgotten first)."""
        seen = self._stale_seen
        if len(seen) >= self.space.half:
            seen = self._stale_seen = {n: k for n, k in seen.items() if n > self._highest}
            if len(seen) >= self.space.half:
                return
        seen[number] = (frame.source, frame.source_seq)
