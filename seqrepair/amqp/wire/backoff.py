"""Capped exponential backoff: between attempts to reach a peer, and a listener's pauses.

:class:`Backoff` (jittered) is used by the gateway to reach its component again, and by every
client (:mod:`seqrepair.amqp.client.runner`) to reconnect after a lost connection or a refused
or detached link. :class:`AcceptPauses` is how long a listener whose ``accept()`` failed leaves
its socket unread (:func:`seqrepair.amqp.wire.reactor.accept_in_batches`). Pure: the caller
owns the clock, the timer and the random generator.
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


ACCEPT_PAUSE_FIRST = 0.005
"""Seconds a listener rests after its first failed accept (Go's ``net/http`` server: 5 ms)."""
ACCEPT_PAUSE_MOST = 1.0
"""Its longest rest, failures in a row doubling the first (Go's: 1 s)."""


@attrs.define
class AcceptPauses:
    """How long a listener whose ``accept()`` failed (the process out of descriptors, EMFILE;
    the system's, ENFILE; out of buffers or memory; a firewall's EPERM) leaves its socket
    unread before it tries again: ``first``, doubled at each failure in a row up to ``most``;
    a connection accepted starts again from ``first``. Not reading its socket is the point: it
    stays readable while connects wait in the backlog, so retrying at once would spin the
    event loop that serves every connection already held (libuv and nginx stop accepting a
    while too).

    An *episode* runs from a failure to the first readable event of the listener that ends
    without one (its backlog emptied, or its batch taken): the owner logs its start, not each
    failure; connections accepted between failures (a descriptor freed, taken at once by the
    next connect waiting) do not end it."""

    first: float = attrs.field(default=ACCEPT_PAUSE_FIRST, validator=attrs.validators.gt(0))
    most: float = attrs.field(default=ACCEPT_PAUSE_MOST, validator=attrs.validators.gt(0))
    failures: int = attrs.field(default=0, init=False)
    """Failed accepts in a row (since the last connection accepted)."""
    in_episode: bool = attrs.field(default=False, init=False)

    def failed(self) -> tuple[float, bool]:
        """An accept failed: the seconds to leave the socket unread, and whether this failure
        started an episode."""
        started = not self.in_episode
        self.in_episode = True
        pause = min(self.most, self.first * 2.0 ** min(self.failures, 64))
        self.failures += 1
        return pause, started

    def accepted(self) -> None:
        """A connection was accepted: the next failure rests ``first`` again."""
        self.failures = 0

    def caught_up(self) -> None:
        """A readable event of the listener ended without a failure: the episode is over."""
        self.failures = 0
        self.in_episode = False


__all__ = ["ACCEPT_PAUSE_FIRST", "ACCEPT_PAUSE_MOST", "AcceptPauses", "Backoff"]
