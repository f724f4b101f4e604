"""A journal outage at the component: RELEASED where a resend is safe, REJECTED where not.

A publisher that numbers its own publications but keeps no journal of its own must not be
wedged by an outage: a message of it the journal could not take is RELEASED (sent again, the
numbers the journal took are skipped), and what it sent after that message on the same link is
RELEASED too, untried, until the released numbers come again; never refused as a gap
(``amqp:precondition-failed``). A plain publisher's message (numbered by the component) is
released only when the journal surely took nothing of it, else rejected (a resend would be
numbered again). Bad input stays rejected.

The component runs in memory on :class:`~tests.amqp.test_journalport.FakeJournal` (Redis
failures on demand), as in :mod:`tests.amqp.test_numbering`.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from proton import Delivery, Message

from seqrepair.amqp.client import Publisher

from .test_numbering import PUBLISHER, Harness

SOURCE = "feed.own"  # a publisher that numbers its own publications


def numbered(first: int, last: int, source: str = SOURCE) -> Message:
    """One message of publications ``first..last`` of ``source``, numbered by the publisher
    (the field ``n`` repeats the number)."""
    body = [
        {"source": source, "source_seq": seq, "source_bits": 32, "topic": "/plain/x",
         "fields": {"n": seq}}
        for seq in range(first, last + 1)
    ]
    return Message(body=body, properties={"message-type": "PUBLICATIONS"})


def outcome(delivery: object) -> tuple[object, str | None]:
    return delivery.outcome, delivery.condition  # type: ignore[attr-defined]


ACCEPTED = (Delivery.ACCEPTED, None)
RELEASED = (Delivery.RELEASED, None)


@pytest.mark.parametrize("failure", ["down", "refusing", "replies_lost"])
def test_a_numbered_message_the_journal_did_not_take_is_released_then_taken_once(
    failure: str,
) -> None:
    h = Harness()
    assert outcome(h.send(numbered(1, 2))) == ACCEPTED
    getattr(h.journal, failure).add(SOURCE)
    released = h.send(numbered(3, 4))
    getattr(h.journal, failure).clear()
    again = h.send(numbered(3, 4))  # the publisher sends it again
    after = h.send(numbered(5, 6))

    assert outcome(released) == RELEASED
    assert [outcome(again), outcome(after)] == [ACCEPTED, ACCEPTED]
    assert h.journaled(SOURCE) == [(seq, seq) for seq in range(1, 7)]
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 7)]  # once, in order
    assert h.component.stats["released"] == 1


def test_what_follows_a_released_message_is_released_untried_until_it_comes_again() -> None:
    h = Harness()
    h.send(numbered(1, 2))
    h.journal.down.add(SOURCE)
    first = h.send(numbered(3, 4))
    h.journal.down.clear()  # Redis is back before the messages sent after 3..4 arrive
    calls = len(h.journal.calls)
    in_flight = [h.send(numbered(5, 6)), h.send(numbered(7, 8))]
    untried = len(h.journal.calls) == calls
    other = h.send(numbered(1, 1, "feed.other"))  # another source is not held back
    resent = [h.send(numbered(3, 4)), h.send(numbered(5, 6)), h.send(numbered(7, 8))]

    assert outcome(first) == RELEASED
    assert [outcome(d) for d in in_flight] == [RELEASED, RELEASED]  # not precondition-failed
    assert untried  # released without a journal round trip
    assert outcome(other) == ACCEPTED
    assert [outcome(d) for d in resent] == [ACCEPTED] * 3
    assert h.journaled(SOURCE) == [(seq, seq) for seq in range(1, 9)]
    assert [r for r in h.received() if r[0] == SOURCE] == [
        (SOURCE, seq, seq) for seq in range(1, 9)
    ]
    assert h.receiver.held_back == {}


def test_a_resend_cut_differently_still_releases_the_hold() -> None:
    # the client re-cuts its queue into batches: the resend may carry more than was released
    h = Harness()
    h.send(numbered(1, 2))
    h.journal.down.add(SOURCE)
    assert outcome(h.send(numbered(3, 4))) == RELEASED
    assert outcome(h.send(numbered(5, 5))) == RELEASED
    h.journal.down.clear()
    assert outcome(h.send(numbered(3, 5))) == ACCEPTED
    assert outcome(h.send(numbered(6, 6))) == ACCEPTED
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 7)]


def test_a_numbered_message_the_journal_took_part_of_is_released_and_not_duplicated() -> None:
    h = Harness()
    h.journal.refusing.add("feed.b")  # appends go source by source: feed.a's is taken
    mixed = Message(
        body=numbered(1, 2, "feed.a").body + numbered(1, 2, "feed.b").body,
        properties={"message-type": "PUBLICATIONS"},
    )
    released = h.send(mixed)
    h.journal.refusing.clear()
    again = h.send(mixed)

    assert outcome(released) == RELEASED
    assert outcome(again) == ACCEPTED
    assert h.received() == [("feed.a", 1, 1), ("feed.a", 2, 2), ("feed.b", 1, 1),
                            ("feed.b", 2, 2)]
    assert h.component.stats["duplicates"] == 2  # feed.a's, skipped when sent again


def test_a_plain_message_is_released_only_when_the_journal_surely_took_nothing() -> None:
    h = Harness()
    h.journal.down.add(PUBLISHER)  # the high-water cannot be read: nothing was written
    released = h.publish(1)
    h.journal.down.clear()
    assert outcome(h.publish(1)) == ACCEPTED  # sent again: numbered 1
    h.journal.replies_lost.add(PUBLISHER)  # an append with an unknown outcome
    rejected = h.publish(2)
    h.journal.replies_lost.clear()
    assert outcome(h.publish(3)) == ACCEPTED

    assert outcome(released) == RELEASED
    assert outcome(rejected) == (Delivery.REJECTED, "amqp:internal-error")  # may be held
    assert h.journaled() == [(1, 1), (2, 2), (3, 3)]  # nothing numbered twice


def test_bad_input_is_still_rejected() -> None:
    h = Harness()
    h.send(numbered(1, 2))
    skipped = h.send(numbered(5, 6))  # a hole: the publisher skipped 3..4
    h.journal.down.add(SOURCE)
    assert outcome(h.send(numbered(3, 4))) == RELEASED
    h.journal.down.clear()
    outside = Message(body=[{"source": SOURCE, "source_seq": 3, "source_bits": 32,
                             "topic": "/elsewhere", "fields": {"n": 3}}],
                      properties={"message-type": "PUBLICATIONS"})
    bad = h.send(outside)  # held back or not, bad input is refused as such

    assert outcome(skipped) == (Delivery.REJECTED, "amqp:precondition-failed")
    assert outcome(bad) == (Delivery.REJECTED, "amqp:decode-error")
    assert outcome(h.send(numbered(3, 4))) == ACCEPTED
    assert h.receiver.held_back == {}
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 5)]


# --- the client Publisher's handlers alone (no network) ------------------------------------


class _Timers:
    """Stands in for the container: records what the publisher schedules."""

    def __init__(self) -> None:
        self.scheduled: list[tuple[float, object]] = []

    def schedule(self, delay: float, task: object) -> None:
        self.scheduled.append((delay, task))


def _outcome_event(tag: str) -> SimpleNamespace:
    remote = SimpleNamespace(condition=None)
    return SimpleNamespace(delivery=SimpleNamespace(tag=tag, remote=remote))


def _in_flight(count: int) -> tuple[Publisher, _Timers]:
    """A publisher with ``count`` batches of two publications sent, tags "1".."count", and two
    more publications queued behind them."""
    publisher = Publisher("127.0.0.1:1", SOURCE, journal=None, reconnect_delay=0.2,
                          max_backoff=1.0)
    timers = _Timers()
    publisher._container = timers
    for i in range(count):
        publisher._unsettled[str(i + 1)] = [
            publisher.sequencer.stamp("/plain/x", {"n": 2 * i + k}) for k in (1, 2)
        ]
    publisher._pending.extend(publisher.sequencer.stamp("/plain/x", {}) for _ in range(2))
    return publisher, timers


def _queued(publisher: Publisher) -> list[int]:
    return [p.source_seq for p in publisher._pending]


def test_the_publisher_sends_released_batches_again_in_order_after_a_backoff() -> None:
    publisher, timers = _in_flight(3)
    try:
        publisher.on_released(_outcome_event("1"))
        publisher.on_released(_outcome_event("2"))  # sent after 1: released too
        assert [delay for delay, _ in timers.scheduled] == [0.2]  # one backoff for the episode
        publisher.on_timer_task(None)
        assert _queued(publisher) == [7, 8]  # 3's outcome is not in yet: nothing moves
        publisher.on_released(_outcome_event("3"))  # after the timer: a new, doubled backoff
        assert _queued(publisher) == [7, 8]
        assert [delay for delay, _ in timers.scheduled] == [0.2, 0.4]
        publisher.on_timer_task(None)
        assert _queued(publisher) == [1, 2, 3, 4, 5, 6, 7, 8]  # first sent, first again
        assert publisher._unsettled == {}
        assert publisher.released == 6
        assert publisher.flush(0.1) is False  # still to be accepted
    finally:
        publisher._injector.close()


def test_the_backoff_doubles_to_its_cap_and_starts_again_after_an_accepted_batch() -> None:
    publisher, timers = _in_flight(1)
    try:
        for _ in range(5):  # released again and again: 0.2, 0.4, 0.8, 1.0, 1.0
            publisher.on_released(_outcome_event("1"))
            publisher.on_timer_task(None)
            publisher._unsettled["1"] = [publisher._pending.popleft() for _ in range(2)]
        assert [delay for delay, _ in timers.scheduled] == [0.2, 0.4, 0.8, 1.0, 1.0]
        publisher.on_accepted(_outcome_event("1"))
        publisher._unsettled["2"] = [publisher._pending.popleft() for _ in range(2)]
        publisher.on_released(_outcome_event("2"))
        assert timers.scheduled[-1][0] == 0.2
        assert publisher.accepted == 2
    finally:
        publisher._injector.close()
