"""Backoff: the delays between reconnect attempts (every client, the gateway, the ingest's
catch-up reads) double from ``initial`` up to ``maximum``, with up to ``jitter`` of each delay
added at random, and give up after ``max_attempts`` when that is set. A listener whose accept
failed rests 5 ms doubling to 1 s, and logs the start of an episode only."""

from __future__ import annotations

import random

import pytest

from seqrepair.amqp.wire.backoff import AcceptPauses, Backoff


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


def test_a_listener_rests_5ms_doubling_to_1s_and_from_5ms_again_once_it_accepts() -> None:
    pauses = AcceptPauses()
    got = [pauses.failed() for _ in range(10)]
    assert [p for p, _ in got] == pytest.approx(
        [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0])
    assert [started for _, started in got] == [True] + [False] * 9  # one episode: logged once
    pauses.accepted()  # a descriptor freed, a connect taken: the same episode, the pause reset
    assert pauses.failed() == (pytest.approx(0.005), False)
    pauses.caught_up()  # a readable event without a failure: the episode is over
    assert pauses.failed() == (pytest.approx(0.005), True)
    for _ in range(200):  # never overflows
        pause, _ = pauses.failed()
    assert pause == 1.0


def test_accept_pauses_take_their_bounds() -> None:
    pauses = AcceptPauses(first=0.1, most=0.3)
    assert [pauses.failed()[0] for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="first"):
        AcceptPauses(first=0)
