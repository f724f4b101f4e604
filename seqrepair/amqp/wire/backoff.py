"""Capped, jittered exponential backoff between attempts to reach a peer.

Used by the gateway to reach its component again, and by every client
(:mod:`seqrepair.amqp.client.runner`) to reconnect after a lost connection or a refused or detached
link. Pure: the caller owns the clock, the timer and the random generator.
"""

from __future__ import annotations

import random

import attrs


@attrs.define
class Backoff:
    """Delays between attempts to reach a peer: ``initial`` doubled (``factor``) at each
    failed attempt up to ``maximum``, plus up to ``jitter`` of itself at random so that
    clients do not come back in step. After ``max_attempts`` failed attempts in a row
    :meth:`next_delay` says to give up (None: never give up; the delay stays bounded)."""

    initial: float = attrs.field(default=0.1, validator=attrs.validators.gt(0))
    maximum: float = attrs.field(default=5.0, validator=attrs.validators.gt(0))
    factor: float = attrs.field(default=2.0, validator=attrs.validators.ge(1))
    jitter: float = attrs.field(default=0.25, validator=attrs.validators.ge(0))
    max_attempts: int | None = None
    attempts: int = attrs.field(default=0, init=False)
    """Failed attempts since the last success."""

    def next_delay(self, rng: random.Random) -> float | None:
        """The delay before the next attempt (counting one more failure), or None to give up."""
        if self.max_attempts is not None and self.attempts >= self.max_attempts:
            return None
        base = min(self.maximum, self.initial * self.factor ** min(self.attempts, 64))
        self.attempts += 1
        return base * (1.0 + self.jitter * rng.random())

    def reset(self) -> None:
        """The peer is reached: the next failure starts again from ``initial``."""
        self.attempts = 0


__all__ = ["Backoff"]
