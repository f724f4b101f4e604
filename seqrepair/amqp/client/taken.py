"""What a subscriber's application has *taken*, per source: the ``taken`` of its ``ACK``s.

A publication is taken once the application is done with it: its ``on_publication`` callback
returned, the iterator moved on to the next one (or ended), or, for ``seqrepair subscribe
--output``, the line holding it was flushed to the file. Only then may the component's durable
position (:mod:`seqrepair.amqp.component.durable`) pass it, so a subscriber killed at any moment
(kill -9) resumes with nothing lost and, at most, again what it had delivered but not yet
acknowledged: *at-least-once to the process, exactly-once with an idempotent sink*.

:class:`TakenPositions` is filled from the application's thread and drained by the client's
proton thread when it sends an ``ACK``: a lock keeps the two apart, and each call holds it for
a dict update.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from seqrepair.core.messages import Publication


class TakenPositions:
    """Per source, the last absolute number taken; and what advanced since the last drain."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: dict[str, int] = {}
        self._new: dict[str, int] = {}

    def take(self, publication: Publication) -> None:
        """``publication`` is taken (and, by delivery order, everything of its source before).
        Called for every delivery: no more than a comparison under the lock."""
        source, number = publication.source, publication.source_seq
        with self._lock:
            if number > self._taken.get(source, 0):
                self._taken[source] = number
                self._new[source] = number

    def take_all(self, taken: Mapping[str, int]) -> None:
        """Per source, everything through the number given is taken (a number at or below
        what was taken already changes nothing)."""
        with self._lock:
            for source, number in taken.items():
                if number > self._taken.get(source, 0):
                    self._taken[source] = number
                    self._new[source] = number

    def drain(self) -> dict[str, int] | None:
        """The sources that advanced since the last drain, with their numbers (None: none)."""
        with self._lock:
            if not self._new:
                return None
            new, self._new = self._new, {}
            return new

    def again(self) -> None:
        """The next drain names every source taken (a new attach: an ACK sent on a lost
        connection may never have arrived)."""
        with self._lock:
            self._new = dict(self._taken)

    def pending(self) -> bool:
        """Whether a drain would name something."""
        return bool(self._new)

    @property
    def position(self) -> dict[str, int]:
        """Per source, the last number taken."""
        with self._lock:
            return dict(self._taken)
