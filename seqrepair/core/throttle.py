"""Token buckets: how many things a peer may do per second, with a burst (no clock inside).

:class:`TokenBucket` holds ``burst`` tokens, refilled at ``rate`` per second of the ``now`` the
caller passes; :meth:`TokenBucket.take` spends one or says no. :class:`Throttle` keeps one
bucket per key (a contributor's principal), bounded: when ``max_keys`` buckets are held, a new
key first evicts the buckets that have refilled (a full bucket is what a new key gets, so
forgetting it changes nothing), and only if none has, the oldest one.
"""

from __future__ import annotations

import attrs

from seqrepair.core.config import positive_int, positive_number


@attrs.define
class TokenBucket:
    """``rate`` tokens per second, at most ``burst``; starts full at the first ``take``."""

    rate: float = attrs.field(validator=positive_number)
    burst: float = attrs.field(validator=positive_number)
    tokens: float | None = None
    at: float | None = None

    def level(self, now: float) -> float:
        """The tokens held at ``now`` (a ``now`` before the last one refills nothing)."""
        if self.tokens is None or self.at is None:
            return self.burst
        return min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)

    def take(self, now: float, amount: float = 1.0) -> bool:
        """Spend ``amount`` tokens at ``now`` if held; False (nothing spent) if not."""
        level = self.level(now)
        self.at = now if self.at is None else max(self.at, now)
        if level < amount:
            self.tokens = level
            return False
        self.tokens = level - amount
        return True

    def full(self, now: float) -> bool:
        """Whether the bucket has refilled to ``burst`` at ``now``."""
        return self.level(now) >= self.burst


@attrs.define
class Throttle:
    """One :class:`TokenBucket` per key, at most ``max_keys`` held; ``refused`` counts, per
    key held, what :meth:`take` refused (``refused_total`` over every key)."""

    rate: float = attrs.field(validator=positive_number)
    burst: float = attrs.field(validator=positive_number)
    max_keys: int = attrs.field(default=10_000, validator=positive_int)
    buckets: dict[str, TokenBucket] = attrs.field(factory=dict)
    refused: dict[str, int] = attrs.field(factory=dict)
    refused_total: int = 0

    def take(self, key: str, now: float) -> bool:
        """Whether ``key`` may do one more thing at ``now`` (spends its token)."""
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= self.max_keys:
                self._evict(now)
            bucket = self.buckets[key] = TokenBucket(self.rate, self.burst)
        if bucket.take(now):
            return True
        self.refused[key] = self.refused.get(key, 0) + 1
        self.refused_total += 1
        return False

    def _evict(self, now: float) -> None:
        full = [key for key, bucket in self.buckets.items() if bucket.full(now)]
        if not full:
            full = [next(iter(self.buckets))]
        for key in full:
            del self.buckets[key]
            self.refused.pop(key, None)
