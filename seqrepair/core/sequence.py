"""Sequence-number arithmetic for XEP-0040 link and source numbers.

A space of ``bits`` b holds the values 1..M with M = 2**b - 1. Zero is outside the cycle: it
means reset. The number after M is 1. Because the modulus M is odd there is no ambiguous
half-way point: b is *after* a when the forward distance ``(b - a) mod M`` is in
1..(M-1)/2. (RFC 1982 uses a modulus of 2**b and is therefore wrong for this space.)

Internally numbers are absolute and never wrap (1, 2, 3, ... forever); only the wire carries
``bits`` bits. :meth:`SequenceSpace.wire` and :meth:`SequenceSpace.unwrap` convert.
"""

from __future__ import annotations

import attrs

from seqrepair.core.errors import InvalidSequenceError

RESET = 0
"""The wire value that means "reset / resynchronise", never part of the cycle."""

MIN_BITS = 2
MAX_BITS = 64


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or not MIN_BITS <= bits <= MAX_BITS:
        raise InvalidSequenceError(
            f"bit width must be an integer in {MIN_BITS}..{MAX_BITS}, got {bits!r}",
            expected=(MIN_BITS, MAX_BITS),
            got=bits,
        )
    return bits


@attrs.frozen
class SequenceSpace:
    """The cyclic space 1..2**bits-1 of one link or source."""

    bits: int = attrs.field(converter=_check_bits)
    max: int = attrs.field(init=False)
    half: int = attrs.field(init=False)

    @max.default
    def _max(self) -> int:
        return (1 << self.bits) - 1

    @half.default
    def _half(self) -> int:
        return (self.max - 1) // 2

    def check(self, value: int, *, allow_reset: bool = False) -> int:
        """Return ``value`` if it is a wire number of this space, else raise."""
        low = RESET if allow_reset else 1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= self.max:
            raise InvalidSequenceError(
                f"{value!r} is outside the {self.bits}-bit sequence space {low}..{self.max}",
                expected=(low, self.max),
                got=value,
            )
        return value

    def next(self, value: int) -> int:
        """The number after ``value``: M wraps to 1 and reset (0) is followed by 1."""
        self.check(value, allow_reset=True)
        return 1 if value == self.max else value + 1

    def distance(self, a: int, b: int) -> int:
        """Forward distance from ``a`` to ``b``: ``(b - a) mod M``, in 0..M-1."""
        self.check(a)
        self.check(b)
        return (b - a) % self.max

    def is_after(self, b: int, a: int) -> bool:
        """True when ``b`` comes after ``a``: the forward distance is in 1..(M-1)/2."""
        return 1 <= self.distance(a, b) <= self.half

    def wire(self, absolute: int) -> int:
        """The wire value of an absolute (never-wrapping, >= 1) number."""
        if isinstance(absolute, bool) or not isinstance(absolute, int) or absolute < 1:
            raise InvalidSequenceError(
                f"absolute sequence numbers start at 1, got {absolute!r}",
                expected=">= 1",
                got=absolute,
            )
        return (absolute - 1) % self.max + 1

    def unwrap(self, last_absolute: int, wire: int) -> int:
        """The absolute number for ``wire`` nearest to ``last_absolute``.

        Within half the space after ``last_absolute`` the number is read as ahead, otherwise as
        behind (never below 1). ``last_absolute`` 0 means "nothing seen yet": the first cycle.
        """
        self.check(wire)
        if isinstance(last_absolute, bool) or not isinstance(last_absolute, int):
            raise InvalidSequenceError("last_absolute must be an integer", got=last_absolute)
        if last_absolute < 0:
            raise InvalidSequenceError(
                "last_absolute must be >= 0", expected=">= 0", got=last_absolute
            )
        if last_absolute == 0:
            return wire
        ahead = self.distance(self.wire(last_absolute), wire)
        if ahead <= self.half:
            return last_absolute + ahead
        behind = self.max - ahead
        if last_absolute - behind >= 1:
            return last_absolute - behind
        return last_absolute + ahead
