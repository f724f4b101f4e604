"""The bounded hand-off between a subscriber's proton thread and the application's iterator."""

from __future__ import annotations

import threading
import time

import pytest

from seqrepair.amqp.client.handoff import Handoff
from seqrepair.core.errors import InvalidConfigError


def never() -> bool:
    return False


def test_items_come_out_in_the_order_put_and_the_iterator_ends_after_close() -> None:
    handoff: Handoff[int] = Handoff(10)
    for i in range(5):
        assert handoff.put(i, never)
    handoff.close()
    assert list(handoff) == [0, 1, 2, 3, 4]  # what was there before the close is kept


def test_a_full_handoff_makes_the_producer_wait_for_the_reader() -> None:
    handoff: Handoff[int] = Handoff(3)
    seen_lengths: list[int] = []

    def produce() -> None:
        for i in range(200):
            handoff.put(i, never)
            seen_lengths.append(len(handoff))
        handoff.close()

    producer = threading.Thread(target=produce)
    producer.start()
    got = []
    for item in handoff:
        got.append(item)
        time.sleep(0.0005)  # a reader slower than the producer
    producer.join(10)
    assert got == list(range(200))
    assert max(seen_lengths) <= 3


def test_a_waiting_producer_gives_up_when_asked_and_adds_nothing() -> None:
    handoff: Handoff[str] = Handoff(1)
    assert handoff.put("a", never)
    stopping = threading.Event()
    threading.Timer(0.2, stopping.set).start()
    assert handoff.put("b", stopping.is_set) is False
    handoff.close()
    assert list(handoff) == ["a"]


def test_nothing_is_added_after_close() -> None:
    handoff: Handoff[int] = Handoff(5)
    handoff.close()
    assert handoff.put(1, never) is False
    assert list(handoff) == []


def test_close_wakes_a_waiting_reader() -> None:
    handoff: Handoff[int] = Handoff(5)
    got: list[list[int]] = []
    reader = threading.Thread(target=lambda: got.append(list(handoff)))
    reader.start()
    time.sleep(0.1)
    handoff.close()
    reader.join(5)
    assert not reader.is_alive()
    assert got == [[]]


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "3"])
def test_the_limit_is_a_positive_integer(limit: object) -> None:
    with pytest.raises(InvalidConfigError, match="limit"):
        Handoff(limit)  # type: ignore[arg-type]
