"""A bounded hand-off from a client's proton thread to the application's iterator.

A subscriber started in a background thread hands its deliveries to ``for pub in
subscriber``. When the application reads slower than publications come, the proton thread
waits for room instead of queueing without end: it then reads nothing from the connection,
its credit runs out, and the component pauses the link and repairs it later (by gap fill),
exactly as for a slow ``on_publication`` callback. Memory stays bounded either way.

An item counts as *taken* once the reader asks for the next one (or ends the loop by
exhausting it): ``on_taken`` is called with it then, never when it is merely handed over
(see :mod:`seqrepair.amqp.client.taken`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from seqrepair.core.errors import InvalidConfigError

T = TypeVar("T")

_STOP_CHECK = 0.1
"""Seconds a waiting :meth:`Handoff.put` sleeps between looks at its ``give_up``."""


class Handoff(Generic[T]):
    """At most ``limit`` items between one producer thread and one consumer."""

    def __init__(self, limit: int, on_taken: Callable[[T], None] | None = None) -> None:
        if type(limit) is not int or limit < 1:
            raise InvalidConfigError("the hand-off limit must be an integer >= 1", got=limit)
        self.limit = limit
        self.on_taken = on_taken
        self._items: deque[T] = deque()
        self._closed = False
        self._changed = threading.Condition()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T, give_up: Callable[[], bool]) -> bool:
        """Add ``item``, waiting while the hand-off is full. Returns False, without adding,
        once it is closed or ``give_up()`` turns true while waiting."""
        with self._changed:
            while len(self._items) >= self.limit and not self._closed:
                if give_up():
                    return False
                self._changed.wait(_STOP_CHECK)
            if self._closed:
                return False
            self._items.append(item)
            # one producer and one consumer, and only one of them can be waiting at a time
            self._changed.notify()
            return True

    def close(self) -> None:
        """No more items: the iterator ends once it has taken those already here."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def __iter__(self) -> Iterator[T]:
        """The items in the order put, until closed and empty. Each is reported to
        ``on_taken`` when the reader comes back for the next (the loop body is done with it)."""
        while True:
            with self._changed:
                while not self._items and not self._closed:
                    self._changed.wait()
                if not self._items:
                    return
                item = self._items.popleft()
                self._changed.notify()
            yield item
            if self.on_taken is not None:
                self.on_taken(item)
