"""What a subscriber's application has taken (the ``taken`` of its ACKs), and when."""

from __future__ import annotations

import threading

from seqrepair.amqp.handoff import Handoff
from seqrepair.amqp.taken import TakenPositions
from seqrepair.core.messages import Publication, PublishType


def pub(source: str, seq: int) -> Publication:
    return Publication(topic="/t", source=source, source_seq=seq, ptype=PublishType.UPDATE,
                       fields={})


def test_a_drain_names_only_the_sources_that_advanced_since_the_last() -> None:
    taken = TakenPositions()
    assert taken.drain() is None
    taken.take(pub("a", 1))
    taken.take(pub("a", 2))
    taken.take(pub("b", 7))
    assert taken.pending()
    assert taken.drain() == {"a": 2, "b": 7}
    assert taken.drain() is None
    taken.take(pub("b", 8))
    taken.take_all({"a": 1})  # behind: no advance
    assert taken.drain() == {"b": 8}
    assert taken.position == {"a": 2, "b": 8}


def test_after_a_new_attach_the_next_drain_names_every_source_again() -> None:
    taken = TakenPositions()
    taken.take_all({"a": 5, "b": 3})
    assert taken.drain() == {"a": 5, "b": 3}
    taken.again()
    assert taken.drain() == {"a": 5, "b": 3}


def test_an_iterated_item_is_taken_when_the_reader_comes_back_for_the_next() -> None:
    taken: list[int] = []
    handoff: Handoff[int] = Handoff(10, on_taken=taken.append)
    for i in range(3):
        handoff.put(i, lambda: False)
    handoff.close()
    reader = iter(handoff)
    assert next(reader) == 0
    assert taken == []  # handed over, not yet done with
    assert next(reader) == 1
    assert taken == [0]
    assert list(reader) == [2]
    assert taken == [0, 1, 2]  # the loop ended: the last one was done with too


def test_an_item_whose_loop_body_raised_is_not_taken() -> None:
    taken: list[int] = []
    handoff: Handoff[int] = Handoff(10, on_taken=taken.append)
    handoff.put(1, lambda: False)
    handoff.put(2, lambda: False)
    try:
        for item in handoff:
            if item == 2:
                raise RuntimeError("the application failed on 2")
    except RuntimeError:
        pass
    assert taken == [1]


def test_takes_from_another_thread_are_all_counted() -> None:
    taken = TakenPositions()

    def run(source: str) -> None:
        for n in range(1, 2001):
            taken.take(pub(source, n))

    threads = [threading.Thread(target=run, args=(s,)) for s in ("a", "b", "c")]
    for t in threads:
        t.start()
    drained: dict[str, int] = {}
    while any(t.is_alive() for t in threads):
        drained.update(taken.drain() or {})
    for t in threads:
        t.join()
    drained.update(taken.drain() or {})
    assert drained == {"a": 2000, "b": 2000, "c": 2000}
