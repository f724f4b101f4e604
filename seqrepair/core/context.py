"""Link context: the recent frames of one subscriber link, kept to answer gap requests.

The component records every frame it sends on a link; a :class:`GapRequest` is answered from
what is still held. Anything older (or anything before a reset) is "context lost", and the
subscriber falls back to a source-level request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from itertools import accumulate, islice
from typing import cast

import attrs

from seqrepair.core.config import positive_int
from seqrepair.core.errors import InvalidConfigError, InvalidSequenceError
from seqrepair.core.messages import GapError, GapRequest, Heartbeat, Publication
from seqrepair.core.sequence import RESET, SequenceSpace

LinkFrame = Publication | Heartbeat

FRAME_OVERHEAD = 256
"""Bytes a held frame costs besides its values (the frame object, its slot in the context)."""


def frame_size(frame: LinkFrame) -> int:
    """What holding ``frame`` costs, estimated in bytes: :data:`FRAME_OVERHEAD` plus its
    strings and field values (a string or bytes value by its length, any other 32)."""
    if not isinstance(frame, Publication):
        return FRAME_OVERHEAD
    size = FRAME_OVERHEAD + len(frame.topic) + len(frame.source)
    if frame.permtoken:
        size += len(frame.permtoken)
    for key, value in frame.fields.items():
        size += 32 + len(key) + (len(value) if isinstance(value, str | bytes) else 32)
    return size


@attrs.define(on_setattr=attrs.setters.NO_OP)
class LinkContext:
    """The last ``capacity`` frames sent on one link, addressable by link number, and no more
    than ``max_bytes`` of them (estimated by :func:`frame_size`; None: no byte bound).

    ``max_range`` bounds how many numbers one request may ask for; a larger request is refused,
    so a hostile or confused subscriber cannot make the component resend its whole history.
    The byte bound evicts the oldest frames first, never one of the newest ``keep`` a
    :meth:`record` or :meth:`trim` names (the frames a windowed subscriber has not
    acknowledged, which it may still ask for: the link stamps no new number while they fill
    the bound, see :meth:`newest_bytes`). ``max_bytes`` may change (the component shares a
    budget among links); :meth:`trim` applies a smaller one at once.
    """

    bits: int = 16
    capacity: int = attrs.field(default=65_536, validator=positive_int)
    max_range: int = attrs.field(default=10_000, validator=positive_int)
    max_bytes: int | None = None
    space: SequenceSpace = attrs.field(init=False)
    _frames: deque[LinkFrame] = attrs.field(init=False, factory=deque)
    # bytes recorded in this context through each held frame, and through the last one evicted
    _through: deque[int] = attrs.field(init=False, factory=deque)
    _evicted: int = attrs.field(init=False, default=0)
    _head: int = attrs.field(init=False, default=0)
    # absolute link number = position + _base; after a reset position 1 is the 0 frame.
    _base: int = attrs.field(init=False, default=0)
    _generation: int = attrs.field(init=False, default=0)  # counts resets
    recorded: int = attrs.field(init=False, default=0)
    """Frames recorded so far, every context together: what a reader of the numbering (a
    replay's :class:`LinkCover`) compares to know nothing was numbered since it last read."""

    @space.default
    def _space(self) -> SequenceSpace:
        return SequenceSpace(self.bits)

    def record(self, frame: LinkFrame, keep: int = 0, size: int | None = None) -> None:
        """Remember a frame just sent. A frame numbered 0 starts a new context. ``keep``: how
        many of the newest frames (this one included) the byte bound must not evict; ``size``:
        what holding the frame costs, when the caller knows better than :func:`frame_size`."""
        if frame.link_seq is None:
            raise InvalidConfigError("only frames with a link number can be recorded")
        self.space.check(frame.link_seq, allow_reset=True)
        if frame.link_seq == RESET:
            if self._head:  # what was sent is void; a context that sent nothing just starts at 0
                self._generation += 1
            self._frames.clear()
            self._through.clear()
            self._evicted = 0
            self._head = 0
            self._base = -1
        self._head += 1
        self.recorded += 1
        self._frames.append(frame)
        self._through.append(
            (self._through[-1] if self._through else self._evicted)
            + (frame_size(frame) if size is None else size)
        )
        if len(self._frames) > self.capacity:
            self._evict()
        if self.max_bytes is not None:
            self.trim(keep)

    def record_run(
        self, frames: list[LinkFrame], keep: int = 0, sizes: list[int | None] | None = None
    ) -> None:
        """:meth:`record` each of ``frames`` in order (``sizes`` by index, None: estimated),
        in one pass: the same frames held and evicted as recording them one by one (eviction
        takes the oldest first, and what one record's trim evicts the last one's would too)."""
        if sizes is not None and len(sizes) != len(frames):
            raise InvalidConfigError("one size per frame", expected=len(frames), got=len(sizes))
        if not frames:
            return  # as recording nothing: no bound applied anew
        check = self.space.check
        top = self.space.max
        held = self._frames
        through = self._through
        total = through[-1] if through else self._evicted
        for i, frame in enumerate(frames):
            seq = frame.link_seq
            if seq is None:
                raise InvalidConfigError("only frames with a link number can be recorded")
            if seq == RESET:  # starts a new context: the one-by-one way (rare)
                self._settle()
                self.record(frame, keep, None if sizes is None else sizes[i])
                total = through[-1]
                continue
            if type(seq) is not int or not 0 < seq <= top:  # the usual number checked in line
                check(seq, allow_reset=True)
            size = None if sizes is None else sizes[i]
            total += frame_size(frame) if size is None else size
            held.append(frame)
            through.append(total)
            self._head += 1
            self.recorded += 1
        self._settle(keep)

    def next_number(self) -> int | None:
        """The link number the next frame recorded after those held must carry, from its
        position (None: the next one must start a context, numbered 0)."""
        absolute = self._head + 1 + self._base
        return None if absolute < 1 else self.space.wire(absolute)

    def record_numbered(
        self, publications: list[Publication], first: int, keep: int = 0,
        sizes: list[int] | None = None,
    ) -> None:
        """:meth:`record_run` of ``publications`` numbered ``first``, ``first`` + 1, ...
        (after the space's max comes 1), held as given, without a numbered copy each: a
        frame's number follows from its position, and :class:`Resend` numbers it when read.
        ``first`` must be :meth:`next_number` (a context starts by :meth:`record`)."""
        if first != self.next_number():
            raise InvalidConfigError("a numbered run goes on from the frames held",
                                     expected=self.next_number(), got=first)
        if sizes is not None and len(sizes) != len(publications):
            raise InvalidConfigError("one size per frame", expected=len(publications),
                                     got=len(sizes))
        if not publications:
            return
        for pub in publications:  # all checked before any is held
            if pub.link_seq is not None or type(pub) is not Publication:
                raise InvalidConfigError("a numbered run holds publications without a number",
                                         expected=None, got=getattr(pub, "link_seq", pub))
        through = self._through
        total = through[-1] if through else self._evicted
        # the running totals at C speed (a Python loop over the run was ~0.1 us a
        # publication), made before anything is held: a size that raises holds nothing
        totals = list(islice(accumulate(
            map(frame_size, publications) if sizes is None else sizes, initial=total), 1, None))
        self._frames.extend(publications)
        through.extend(totals)
        self._head += len(publications)
        self.recorded += len(publications)
        self._settle(keep)

    def _settle(self, keep: int = 0) -> None:
        """Evict past the capacity, then past the byte bound (keeping the newest ``keep``)."""
        over = len(self._frames) - self.capacity
        if over > 0:  # the oldest ``over`` (a run's worth, a frame each at steady state)
            drop, taken = self._frames.popleft, self._through.popleft
            for _ in range(over - 1):
                drop()
                taken()
            drop()
            self._evicted = taken()
        if self.max_bytes is not None:
            self.trim(keep)

    @property
    def bytes(self) -> int:
        """The estimated bytes of the frames held."""
        return self._through[-1] - self._evicted if self._through else 0

    def newest_bytes(self, count: int) -> int:
        """The estimated bytes of the newest ``count`` frames held."""
        held = len(self._through)
        if count <= 0 or not held:
            return 0
        older = self._evicted if count >= held else self._through[held - count - 1]
        return self._through[-1] - older

    def trim(self, keep: int = 0) -> None:
        """Evict the oldest frames while over ``max_bytes``, keeping the newest ``keep``."""
        max_bytes = self.max_bytes
        if max_bytes is None:
            return
        through = self._through
        evicted = self._evicted
        newest = through[-1] if through else evicted  # newest - evicted: :attr:`bytes`
        if newest - evicted <= max_bytes:
            return
        # :meth:`_evict` in line: at steady state a frame or more per frame recorded
        frames = self._frames
        left = len(frames) - keep
        drop, taken = frames.popleft, through.popleft
        try:
            while left > 0 and newest - evicted > max_bytes:
                drop()
                evicted = taken()
                left -= 1
        finally:
            self._evicted = evicted

    def _evict(self) -> None:
        self._frames.popleft()
        self._evicted = self._through.popleft()

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
        if last > self._head + 1:
            # Nothing a subscriber of this context saw can be asked for past the number after
            # the newest frame (its overdue probe): the range reaches back more than half the
            # space (the numbers are ambiguous) or belongs to another context. Either way the
            # link cannot name these frames; the journal can, by source.
            return GapError(
                "context-lost", request,
                f"link_to {request.link_to} is not within half the link space behind the"
                " newest frame",
            )
        first = last - span + 1
        if first < self._oldest:
            return GapError("context-lost", request, "range no longer held")
        return Resend(self, request, span, self._generation, first, min(last, self._head))

    def cover(self, link_through: int) -> LinkCover:
        """What this link itself brings past a subscriber's ``link_through`` (the wire number
        of the highest frame it had seen): see :class:`LinkCover`.

        The number is read as the *latest* frame of the current context that carries it (none:
        before the context's first frame). A later reading than the subscriber meant only makes
        a replay carry more, never less: a frame the subscriber saw lies at or before it, or in
        an older context, whose publications all precede this context's.
        """
        self.space.check(link_through, allow_reset=True)
        if link_through == RESET:
            position = 1 if self._base == -1 else 0  # the reset frame, if this context has one
        else:
            head = self._head + self._base  # the newest frame's absolute number
            latest = head - self.space.distance(link_through, self.space.wire(head)) if (
                head >= 1
            ) else 0
            position = latest - self._base if latest >= 1 else 0
        return LinkCover(self, self._generation, position)

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
                seq = frame.link_seq  # None: held by record_numbered, numbered by position
                frame = frame.with_link(
                    context.space.wire(position + context._base) if seq is None else seq,
                    retransmit=True)
            else:
                frame = attrs.evolve(frame, retransmit=True)
            yield frame


@attrs.define
class LinkCover:
    """Per source, the first publication a link numbered after a subscriber's cover point.

    A subscriber whose link context broke asks for a replay after the last numbers it delivered
    (:class:`~seqrepair.core.messages.SourceGapRequest`), naming the highest link number it had
    seen. Everything the link numbered after that reaches it by the link (sent, or resent from
    the context on a link request; a frame the context no longer holds is asked for again by
    source), and a link numbers each source's publications in order. So a replay may stop each
    source just before its first publication numbered past the cover point: what follows is
    the link's to bring, and replaying it too would only be dropped as duplicates.

    The frames are read as the replay goes (:meth:`limit`), since the link keeps numbering
    meanwhile. Once the context resets, nothing new is read: a source not seen by then has no
    limit, its replay runs to the journal's high-water, as without a cover point.
    """

    context: LinkContext
    generation: int
    scanned: int  # the last position read (the cover point to start with)
    first: dict[str, int] = attrs.field(factory=dict)

    def limit(self, source: str) -> int | None:
        """The last number of ``source`` the replay must carry, or None: all it holds."""
        first = self.first.get(source)
        if first is None:
            self._read()
            first = self.first.get(source)
        return None if first is None else first - 1

    def _read(self) -> None:
        context = self.context
        head = context._head
        if context._generation != self.generation or self.scanned >= head:
            return
        # frames gone before they were read precede those held: their limit comes later, fine
        unread = min(head - self.scanned, len(context._frames))
        first = self.first
        frames = context._frames
        for index in range(-unread, 0):  # from the newest end: a deque reads its ends at once
            frame = frames[index]
            if isinstance(frame, Publication) and frame.source not in first:
                first[frame.source] = frame.source_seq
        self.scanned = head
