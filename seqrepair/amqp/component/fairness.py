"""How live delivery and repair share the component's one event loop (issue 24).

Live fan-out runs as publications arrive and is never made to wait for anybody's repair.
Repair work (reading the journal for a source replay, reading a link context for a range
resend, encoding the chunks) runs only in *repair turns*: a turn serves the routes that have
such work, one step each in turn (:class:`FairRing`: round-robin across connections, and within
a connection across its routes, so a connection's share does not grow with its requests or
links), until its time budget is spent (:class:`TurnBudget`, ``--repair-turn``); the rest
waits for the next turn, which comes after the event loop has served every other connection's
I/O. One step sends at most one chunk of answers, or reads at most one journal page of entries
the link is not entitled to (a replay that scans and skips yields too).

How much repair may be in flight is bounded too: source replays
per connection and per principal (``--max-replays-per-connection``,
``--max-replays-per-principal``); a request past either is rejected
``amqp:resource-limit-exceeded`` and its requester asks again later (a subscriber stub backs
off and retries).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import attrs

T = TypeVar("T", bound=Hashable)


@attrs.define
class FairRing(Generic[T]):
    """Items waiting for a turn, served round-robin across groups, then within a group.

    ``add(group, item)`` queues an item (again: no effect while it waits); ``pop()`` takes the
    next one: the first item of the group whose turn it is, after which that group goes to the
    back of the ring. An item is in at most one group.
    """

    _groups: dict[Hashable, dict[T, None]] = attrs.field(factory=dict, init=False)
    _group_of: dict[T, Hashable] = attrs.field(factory=dict, init=False)

    def add(self, group: Hashable, item: T) -> None:
        """Queue ``item`` of ``group`` at the back of its group (if not queued already)."""
        if item in self._group_of:
            return
        self._group_of[item] = group
        self._groups.setdefault(group, {})[item] = None

    def pop(self) -> T | None:
        """The item whose turn it is (None: nothing waits)."""
        if not self._groups:
            return None
        group = next(iter(self._groups))
        members = self._groups.pop(group)
        item = next(iter(members))
        del members[item]
        del self._group_of[item]
        if members:
            self._groups[group] = members  # the group's next item waits a round
        return item

    def discard(self, item: T) -> None:
        """Forget ``item`` (its route went away)."""
        group = self._group_of.pop(item, None)
        if group is None:
            return
        members = self._groups[group]
        del members[item]
        if not members:
            del self._groups[group]

    def __len__(self) -> int:
        return len(self._group_of)

    def __contains__(self, item: object) -> bool:
        return item in self._group_of


@attrs.define
class TurnBudget:
    """The event-loop time one repair turn may take: ``seconds`` from :meth:`start`."""

    seconds: float
    clock: Callable[[], float]
    _started: float = attrs.field(default=0.0, init=False)

    def start(self) -> None:
        """A new turn begins now."""
        self._started = self.clock()

    def spent(self) -> bool:
        """Whether the turn has used its time."""
        return self.clock() - self._started >= self.seconds
