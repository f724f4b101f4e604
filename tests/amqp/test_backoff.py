"""Backoff: the delays between reconnect attempts (every client, the gateway, the ingest's
catch-up reads) double from ``initial`` up to ``maximum``, with up to ``jitter`` of each delay
added at random, and give up after ``max_attempts`` when that is set."""

from __future__ import annotations

import random

import pytest

from seqrepair.amqp.wire.backoff import Backoff


def test_backoff_doubles_up_to_its_maximum_with_bounded_jitter() -> None:
    backoff = Backoff(initial=0.1, maximum=1.0, factor=2.0, jitter=0.5)
    rng = random.Random(1)
    delays = [backoff.next_delay(rng) for _ in range(8)]
    bases = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for delay, base in zip(delays, bases, strict=True):
        assert delay is not None
        assert base <= delay <= base * 1.5
    backoff.reset()
    first = backoff.next_delay(rng)
    assert first is not None
    assert first <= 0.15


def test_backoff_gives_up_after_max_attempts_and_never_overflows() -> None:
    backoff = Backoff(max_attempts=3)
    rng = random.Random(2)
    assert all(backoff.next_delay(rng) is not None for _ in range(3))
    assert backoff.next_delay(rng) is None
    endless = Backoff(maximum=2.0, jitter=0.0)
    for _ in range(5000):
        delay = endless.next_delay(rng)
    assert delay == 2.0


@pytest.mark.parametrize("bad", [{"initial": 0}, {"maximum": -1.0}, {"factor": 0.5},
                                 {"jitter": -0.1}])
def test_backoff_refuses_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Backoff(**bad)  # type: ignore[arg-type]
