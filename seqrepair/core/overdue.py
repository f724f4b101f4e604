"""Overdue heartbeats (XEP-0040 §2.5): what a subscriber does about a silent link, and how many
heartbeat intervals a silence has lasted."""

from __future__ import annotations

import enum
import math

import attrs

from seqrepair.core.errors import InvalidConfigError


class OverduePolicy(enum.Enum):
    """What the stub does, beyond alerting, when heartbeats are overdue (XEP-0040 §2.5)."""

    REQUEST = "request"  # probe: ask for the next link number
    WAIT = "wait"  # alert only
    DISCONNECT = "disconnect"  # ask the adapter to drop and re-attach the link


def parse_overdue_policy(value: OverduePolicy | str) -> OverduePolicy:
    """``value`` as a policy; an unknown name is an :class:`InvalidConfigError`."""
    try:
        return OverduePolicy(value)
    except ValueError:
        raise InvalidConfigError(
            f"unknown overdue policy {value!r}",
            expected=[p.value for p in OverduePolicy],
            got=value,
        ) from None


def whole_intervals(since: float, now: float, interval: float) -> int:
    """How many whole ``interval``s lie between ``since`` and ``now``.

    Floor division alone undercounts when float rounding leaves the quotient a hair below a
    whole number (``0.9 // 0.3 == 2.0``), so a shortfall within the rounding noise of the
    operands counts as a whole interval.
    """
    elapsed = now - since
    count = max(0, math.floor(elapsed / interval))
    slack = 4 * math.ulp(max(abs(now), abs(since), (count + 1) * interval))
    if (count + 1) * interval <= elapsed + slack:
        count += 1
    return count


@attrs.define
class MissedCount:
    """How many heartbeat intervals the alerts of one silence have counted.

    The first alert of a silence comes ``missed_heartbeats`` intervals in and each later one an
    interval after the last, so the count never falls short of that, whatever the rounding of
    the deadlines; a late poll counts the whole intervals that passed.
    """

    missed_heartbeats: int
    interval: float
    _missed: int = 0
    _since: float | None = None  # the start of the silence the last alert counted

    def alert(self, since: float, now: float) -> int:
        """The intervals missed at an alert at ``now`` of the silence that began at ``since``."""
        floor = self._missed + 1 if self._since == since else self.missed_heartbeats
        self._missed = max(floor, whole_intervals(since, now, self.interval))
        self._since = since
        return self._missed
