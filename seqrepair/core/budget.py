"""Refusal policy for repairs: a maximum range per request and a resend budget per subscriber.

XEP-0040 §2.4: "The pubsub or publishing source should have the ability to refuse a
rebuild/resynchronise." A flood of gap requests must not exhaust the component, so every
request is checked before anything is read or resent:

* a request spanning more than ``max_range`` numbers is refused outright;
* each subscriber holds a :class:`ResendBudget`, a token bucket of ``capacity`` resend units
  refilled at ``refill_per_second``; a request costs the number of sequence numbers it spans
  (what the component must read, whatever the filters later keep). A request the bucket cannot
  pay for is refused and costs nothing.

Pure accounting: no clock is read, ``now`` comes in from the adapter. Time that runs backwards
refills nothing (it never raises).
"""

from __future__ import annotations

import attrs

from seqrepair.core.config import check_now, non_negative_number, positive_int
from seqrepair.core.errors import InvalidConfigError


@attrs.define
class ResendBudget:
    """A token bucket of resend units for one subscriber. Starts full."""

    capacity: int = attrs.field(validator=positive_int)
    refill_per_second: float = attrs.field(validator=non_negative_number)
    _level: float = attrs.field(init=False)
    _updated: float | None = attrs.field(init=False, default=None)

    @_level.default
    def _full(self) -> float:
        return float(self.capacity)

    def _refill(self, now: float) -> None:
        if self._updated is not None and now > self._updated:
            self._level = min(
                float(self.capacity),
                self._level + (now - self._updated) * self.refill_per_second,
            )
        if self._updated is None or now > self._updated:
            self._updated = now

    def available(self, now: float) -> float:
        """Units that could be spent at ``now``."""
        self._refill(check_now(now))
        return self._level

    def try_spend(self, amount: int, now: float) -> bool:
        """Spend ``amount`` units if the bucket holds them; False (and nothing spent) if not."""
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise InvalidConfigError(
                "a resend cost must be an integer >= 0", expected=">= 0", got=amount
            )
        self._refill(check_now(now))
        if amount > self._level:
            return False
        self._level -= amount
        return True


@attrs.frozen
class RefusalPolicy:
    """Limits applied to every repair request of every subscriber.

    ``max_range``: the most sequence numbers one request may span. ``budget_capacity`` and
    ``budget_refill_per_second`` size each subscriber's :class:`ResendBudget`.
    """

    max_range: int = attrs.field(default=100_000, validator=positive_int)
    budget_capacity: int = attrs.field(default=1_000_000, validator=positive_int)
    budget_refill_per_second: float = attrs.field(default=100_000.0, validator=non_negative_number)

    def new_budget(self) -> ResendBudget:
        """A full budget for a newly attached subscriber."""
        return ResendBudget(self.budget_capacity, self.budget_refill_per_second)

    def refusal(self, span: int, budget: ResendBudget, now: float) -> str | None:
        """Why a request spanning ``span`` numbers is refused, or None after charging it."""
        if span > self.max_range:
            return f"range of {span} exceeds the maximum of {self.max_range} per request"
        if not budget.try_spend(span, now):
            return (
                f"resend budget exhausted: {span} requested, {int(budget.available(now))} available"
            )
        return None
