"""Link context: the recent frames of one subscriber link, kept to answer gap requests.

The component records every frame it sends on a link; a :class:`GapRequest` is answered from
what is still held. Anything older (or anything before a reset) is "context lost", and the
subscriber falls back to a source-level request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import cast

import attrs

from seqrepair.core.config import positive_int
from seqrepair.core.errors import InvalidConfigError, InvalidSequenceError
from seqrepair.core.messages import GapError, GapRequest, Heartbeat, Publication
from seqrepair.core.sequence import RESET, SequenceSpace

LinkFrame = Publication | Heartbeat




@attrs.define(on_setattr=attrs.setters.NO_OP)
class LinkContext:
    """The last ``capacity`` frames sent on one link, addressable by link number.

    ``max_range`` bounds how many numbers one request may ask for; a larger request is refused,
    so a hostile or confused subscriber cannot make the component resend its whole history.
    """

    bits: int = 16
    capacity: int = attrs.field(default=65_536, validator=positive_int)
    max_range: int = attrs.field(default=10_000, validator=positive_int)
    space: SequenceSpace = attrs.field(init=False)
    _frames: deque[LinkFrame] = attrs.field(init=False, factory=deque)
    _head: int = attrs.field(init=False, default=0)
    # absolute link number = position + _base; after a reset position 1 is the 0 frame.
    _base: int = attrs.field(init=False, default=0)
    _generation: int = attrs.field(init=False, default=0)  # counts resets

    @space.default
    def _space(self) -> SequenceSpace:
        return SequenceSpace(self.bits)

    def record(self, frame: LinkFrame) -> None:
        """Remember a frame just sent. A frame numbered 0 starts a new context."""
        if frame.link_seq is None:
            raise InvalidConfigError("only frames with a link number can be recorded")
        self.space.check(frame.link_seq, allow_reset=True)
        if frame.link_seq == RESET:
            self._frames.clear()
            self._head = 0
            self._base = -1
            self._generation += 1
        self._head += 1
        self._frames.append(frame)
        if len(self._frames) > self.capacity:
            self._frames.popleft()

    def answer(self, request: GapRequest) -> list[LinkFrame] | GapError:
        """The frames of the requested range, marked as retransmissions, or a GapError.

        Numbers not yet sent are simply not returned (a subscriber's probe for the next number).
        """
        resend = self.resend(request)
        if isinstance(resend, GapError):
            return resend
        # read at once, nothing can drop a frame meanwhile: no GapError among them
        return cast(list[LinkFrame], list(resend))

    def resend(self, request: GapRequest) -> Resend | GapError:
        """Like :meth:`answer`, but the frames are read from the context as the
        :class:`Resend` is iterated (a large answer is sent as credit allows, not built at
        once)."""
        try:
            span = self.space.distance(request.link_from, request.link_to) + 1
        except InvalidSequenceError as exc:
            return GapError("refused", request, exc.message)
        if span > self.max_range:
            return GapError("refused", request, f"range of {span} exceeds {self.max_range}")
        if self._head == 0:
            # Nothing sent on this link yet, so nothing is lost: a subscriber probing for its
            # first number (its attach raced ours) must not read this as frames it missed.
            return Resend(self, request, span, self._generation, 1, 0)
        last = self.space.unwrap(self._head + self._base, request.link_to) - self._base
        first = last - span + 1
        if first < self._oldest:
            return GapError("context-lost", request, "range no longer held")
        return Resend(self, request, span, self._generation, first, min(last, self._head))

    @property
    def _oldest(self) -> int:
        return self._head - len(self._frames) + 1

    def _held(self, position: int, generation: int) -> LinkFrame | None:
        """The frame at ``position`` of context ``generation``, if still held."""
        oldest = self._oldest
        if generation != self._generation or position < oldest:
            return None
        return self._frames[position - oldest]


@attrs.define
class Resend:
    """The frames of an accepted :class:`GapRequest`, read from its :class:`LinkContext` as
    they are iterated, publications marked as retransmissions.

    Frames the context dropped meanwhile (it moved on by more than its capacity) end the
    iteration with ``GapError("context-lost")`` for the rest of the range; a reset of the
    context ends it silently (the subscriber voided its requests of the old context).
    """

    context: LinkContext
    request: GapRequest
    span: int  # the numbers asked for, sent or not yet (what a budget is charged)
    generation: int
    first: int
    last: int

    def __len__(self) -> int:
        return max(0, self.last - self.first + 1)

    def __iter__(self) -> Iterator[LinkFrame | GapError]:
        context = self.context
        for position in range(self.first, self.last + 1):
            frame = context._held(position, self.generation)
            if frame is None:
                if self.generation == context._generation:
                    space = context.space
                    rest = GapRequest(space.wire(position + context._base), self.request.link_to)
                    yield GapError("context-lost", rest, "range no longer held")
                return
            if isinstance(frame, Publication):
                frame = frame.with_link(frame.link_seq, retransmit=True)
            yield frame
