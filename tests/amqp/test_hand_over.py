"""``seqrepair publish`` hands a batch over to its publisher again after a journal outage,
never the part a failed call already stamped (that would publish it twice), and gives up only
after ``--timeout`` of outage in a row. A fake publisher and clock: the real-process test is
tests/amqp/test_publish_command.py."""

from __future__ import annotations

from typing import Any

import pytest

from seqrepair.amqp.client.publishcmd import hand_over, not_journaled
from seqrepair.journal.errors import (
    BacklogFullError,
    JournalUnavailableError,
    PublicationQueuedError,
    SequenceConflictError,
)


class FlakyPublisher:
    """Stamps items; raises the scripted failures first (each stamping ``n`` items)."""

    def __init__(self, failures: list[tuple[type[Exception], int]]) -> None:
        self.failures = failures
        self.stamped: list[Any] = []
        self.calls = 0

    def publish_many(self, items: list[Any]) -> None:
        self.calls += 1
        if self.failures:
            kind, n = self.failures.pop(0)
            self.stamped.extend(items[:n])
            if kind is PublicationQueuedError:
                raise PublicationQueuedError("queued", publication=items[n - 1], pending=n,
                                             source="s", stamped=items[:n])
            raise kind("journal out", source="s")
        self.stamped.extend(items)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        self.now += delay


def test_what_a_failed_call_stamped_is_not_handed_over_again() -> None:
    publisher = FlakyPublisher([(PublicationQueuedError, 3), (BacklogFullError, 0),
                                (PublicationQueuedError, 2)])
    clock = Clock()
    hand_over(publisher, list(range(10)), 60, sleep=clock.sleep,  # type: ignore[arg-type]
              clock=lambda: clock.now)
    assert publisher.stamped == list(range(10))  # each once, in order
    assert publisher.calls == 4
    assert len(clock.slept) == 3
    assert clock.slept[0] < clock.slept[1] < clock.slept[2] <= 1.25  # backs off, capped


def test_all_stamped_is_handed_over() -> None:
    publisher = FlakyPublisher([(PublicationQueuedError, 4)])
    clock = Clock()
    hand_over(publisher, list(range(4)), 60, sleep=clock.sleep,  # type: ignore[arg-type]
              clock=lambda: clock.now)
    assert publisher.stamped == [0, 1, 2, 3]
    assert clock.slept == []  # the publisher journals them when it can


def test_an_outage_longer_than_the_patience_raises() -> None:
    publisher = FlakyPublisher([(BacklogFullError, 0)] * 1000)
    clock = Clock()
    with pytest.raises(BacklogFullError):
        hand_over(publisher, list(range(4)), 5, sleep=clock.sleep,  # type: ignore[arg-type]
                  clock=lambda: clock.now)
    assert 5 <= clock.now <= 5.01
    assert publisher.stamped == []


def test_an_error_that_waiting_cannot_cure_is_raised_at_once() -> None:
    publisher = FlakyPublisher([(SequenceConflictError, 0)])
    with pytest.raises(SequenceConflictError):
        hand_over(publisher, [1], 60, sleep=pytest.fail)  # type: ignore[arg-type]


class _Embedded:
    source = "feed.a"
    published_through = 100
    pending = 64  # 101..164 stamped, the answer to their append lost


class _Journal:
    def __init__(self, held: int | None) -> None:
        self.held = held

    def high_water(self, source: str) -> int:
        if self.held is None:
            raise JournalUnavailableError("redis unavailable", source=source)
        return self.held


@pytest.mark.parametrize(
    ("held", "says"),
    [
        (164, "the journal holds 'feed.a' through 164: 101..164 are journaled"),
        (130, "101..130 are journaled (an append whose answer was lost; the component fans "
              "them out from the journal), 131..164 are not"),
        (100, "'feed.a' 101..164 are not journaled (it holds through 100)"),
        (None, "'feed.a' 101..164 are not known to be journaled: the journal could not be read"),
    ],
)
def test_what_is_not_journaled_is_said_only_after_reading_the_journal(
    held: int | None, says: str
) -> None:
    publisher = type("P", (), {"embedded": _Embedded()})()
    said = not_journaled(publisher, _Journal(held))  # type: ignore[arg-type]
    assert says in said
    if held is not None and held >= 164:
        assert "not journaled" not in said
