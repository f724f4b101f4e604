"""Window discipline of one subscriber link: never more link numbers outstanding than the
subscriber's stub can read unambiguously.

The stub reads a link number in the half of the space around where it is (see
:mod:`seqrepair.core.sequence`). A sender that runs more than half the space ahead of what the
stub has consumed makes numbers ambiguous: a new frame reads as an old one (a "duplicate") and
is lost. :class:`LinkWindow` keeps the component from stamping link number ``n`` unless
``n - acked_through <= size``, where ``acked_through`` is the last link number the subscriber
said (``ACK``) it has consumed in this context and ``size`` is ``W = (M - 1) / 2`` for
``M = 2**bits - 1`` (``(2**bits - 2) / 2``), or the frames the link context keeps, if fewer (a
frame the stub may still ask for must still be held).

Every number stamped counts, whatever became of its frame: buffered, in flight, dropped on the
way (forced loss) or sitting in a gap. Numbers are counted absolutely within one context (the
wire value only travels); a reset starts a fresh window.
"""

from __future__ import annotations

import attrs

from seqrepair.core.config import check_positive_int
from seqrepair.core.errors import InvalidSequenceError
from seqrepair.core.sequence import RESET, SequenceSpace


def window_size(bits: int, context_capacity: int | None = None) -> int:
    """The window W of a ``bits``-wide link: ``(2**bits - 2) // 2`` (1 at 2 bits), no more
    than ``context_capacity`` frames (what the component keeps to answer gap requests)."""
    half = SequenceSpace(bits).half
    return half if context_capacity is None else max(1, min(half, context_capacity))


@attrs.define(on_setattr=attrs.setters.NO_OP)
class LinkWindow:
    """How far one link may number ahead of what its subscriber acknowledged.

    ``size`` defaults to :func:`window_size` of ``bits``. The link calls :meth:`room` before
    stamping and :meth:`stamped` for each number it takes; an ``ACK`` moves ``acked_through``
    (:meth:`ack`); :meth:`reset` starts a new context (its first frame, 0, always fits).
    """

    bits: int
    size: int = attrs.field(default=0)
    space: SequenceSpace = attrs.field(init=False)
    # absolute numbers within the current context: 1, 2, ... (0: nothing yet)
    _stamped: int = attrs.field(init=False, default=0)
    _acked: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self.space = SequenceSpace(self.bits)
        if self.size == 0:
            self.size = window_size(self.bits)
        check_positive_int("window size", self.size)
        if self.size > self.space.half:
            raise InvalidSequenceError(
                f"a window of {self.size} is more than half the {self.bits}-bit link space",
                expected=(1, self.space.half),
                got=self.size,
            )

    @property
    def acked_through(self) -> int:
        """The absolute link number (in this context) the subscriber has consumed through."""
        return self._acked

    @property
    def outstanding(self) -> int:
        """Numbers stamped and not yet acknowledged."""
        return self._stamped - self._acked

    @property
    def newest(self) -> int | None:
        """The wire number last stamped in this context (None: none yet)."""
        return self.space.wire(self._stamped) if self._stamped else None

    def room(self) -> int:
        """How many new link numbers may be stamped now (0: the window is full)."""
        return self.size - (self._stamped - self._acked)

    def stamped(self, count: int = 1) -> None:
        """``count`` new numbers were taken (a publication or a heartbeat each)."""
        if count > self.room():
            raise InvalidSequenceError(
                f"stamping {count} numbers past a window with room for {self.room()}",
                expected=self.room(),
                got=count,
            )
        self._stamped += count

    def reset(self) -> None:
        """A new context: the next frame is 0 (the reset frame), nothing outstanding."""
        self._stamped = 0
        self._acked = 0

    def ack(self, link_through: int) -> bool:
        """The subscriber consumed every number through the wire number ``link_through``.

        Read relative to the last number stamped: only a number the window has stamped and
        not yet seen acknowledged moves it (an older or repeated ACK, or a number never
        stamped, is no news). Returns whether ``acked_through`` moved.
        """
        self.space.check(link_through, allow_reset=True)
        if link_through == RESET or self._stamped == 0:
            return False
        behind = self.space.distance(link_through, self.space.wire(self._stamped))
        acked = self._stamped - behind
        if acked <= self._acked:
            return False
        self._acked = acked
        return True

    def stale(self, link_seq: int) -> bool:
        """Whether a resend of the wire number ``link_seq`` is at or below ``acked_through``:
        its subscriber has consumed it, and read now it could be taken for a new number."""
        if self._acked == 0 or link_seq == RESET:
            return False
        behind = self.space.distance(link_seq, self.space.wire(self._stamped))
        return self._stamped - behind <= self._acked
