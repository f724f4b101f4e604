"""What a subscriber's application has taken (the ``taken`` of its ACKs), and when."""

from __future__ import annotations

import threading

from seqrepair.amqp.client.acks import AckSender
from seqrepair.amqp.client.handoff import Handoff
from seqrepair.amqp.client.taken import TakenPositions
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


def test_the_ack_sender_says_what_was_taken_soon_even_when_the_link_number_stands_still() -> None:
    taken = TakenPositions()
    sender = AckSender("l", 16, window=100, taken_from=taken)
    first = sender.due("e1", 5, now=0.0)
    assert first is not None
    assert first.taken == {}
    taken.take(pub("a", 3))  # the application took one; the link number did not move
    assert sender.due("e1", 5, now=0.01) is None  # coalesced: at most one per 20 ms
    ack = sender.due("e1", 5, now=0.03)
    assert ack is not None
    assert ack.taken == {"a": 3}
    assert sender.due("e1", 5, now=0.2) is None  # nothing new: only the refresh later


def test_during_a_new_contexts_replay_the_ack_carries_taken_without_a_link_number() -> None:
    taken = TakenPositions()
    sender = AckSender("l", 16, window=100, taken_from=taken)
    assert sender.due("e2", None, now=0.0) is None  # nothing to say
    taken.take(pub("a", 40))
    ack = sender.due("e2", None, now=0.05)
    assert ack is not None
    assert (ack.link_epoch, ack.link_through, dict(ack.taken)) == ("e2", None, {"a": 40})
    sender.reattached()  # a new attach: everything taken is said again
    again = sender.due("e3", 1, now=0.06)
    assert again is not None
    assert dict(again.taken) == {"a": 40}
