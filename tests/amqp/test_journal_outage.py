"""A journal outage at the component: RELEASED where a resend is safe, REJECTED where not.

A publisher that numbers its own publications but keeps no journal of its own must not be
wedged by an outage: a message of it the journal could not take is RELEASED (sent again, the
numbers the journal took are skipped), and what it sent after that message on the same link is
RELEASED too, untried, until the released numbers come again; never refused as a gap
(``amqp:precondition-failed``). A plain publisher's message (numbered by the component) is
released only when the journal surely took nothing of it, else rejected (a resend would be
numbered again). Bad input stays rejected. What an append whose answer was lost did journal
reaches subscribers on the component's timer, though its source never publishes again, and
before anything that source publishes next. Should it land late, after the component numbered
a plain publisher's next message from the high-water it read, that message is released (none
of it journaled) and numbered again after what landed. Should retention trim it before the
component reads it back, what was trimmed is passed over (named in a warning: it never goes
out) and the rest goes out, in order; the source is served as before.

The component runs in memory on :class:`~tests.amqp.test_journalport.FakeJournal` (Redis
failures on demand), as in :mod:`tests.amqp.test_numbering`.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import structlog
from proton import Delivery, Message

from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.core.messages import Publication

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


def numbered_publications(first: int, last: int, source: str = SOURCE) -> list[Publication]:
    """Publications ``first..last`` of ``source`` as a publisher journals them itself."""
    return [Publication(topic="/plain/x", source=source, source_seq=seq, fields={"n": seq})
            for seq in range(first, last + 1)]


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


@pytest.mark.parametrize("skipped", [1, 2, 50])
def test_numbers_a_publisher_journaled_and_never_sent_go_out_before_what_it_sends_next(
    skipped: int,
) -> None:
    # a publisher journals before it sends: one that died in between resumes after its
    # high-water, so the numbers it journaled and never sent are skipped on its link
    h = Harness()
    assert outcome(h.send(numbered(1, 2))) == ACCEPTED
    h.journal.append(numbered_publications(3, 2 + skipped), 32)  # journaled, then it died
    after = h.send(numbered(3 + skipped, 4 + skipped))  # the restarted publisher goes on

    assert outcome(after) == ACCEPTED
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 5 + skipped)]  # in order, once
    assert h.component.ingested[SOURCE] == 4 + skipped
    assert outcome(h.send(numbered(5 + skipped, 5 + skipped))) == ACCEPTED  # served as before


def test_what_a_publisher_journaled_and_never_sent_goes_out_when_its_link_ends() -> None:
    # it died between journaling and sending, and its source stays silent: nothing would come
    # to skip those numbers, so the end of its link is what tells the component to look
    h = Harness()
    assert outcome(h.send(numbered(1, 2))) == ACCEPTED
    h.journal.append(numbered_publications(3, 5), 32)  # journaled, then it died
    h.component.ingest.poll(0.0)
    assert h.received() == [(SOURCE, 1, 1), (SOURCE, 2, 2)]  # nothing in doubt while it lives
    h.component.on_link_closed(SimpleNamespace(link=h.receiver))
    h.component.ingest.poll(0.0)
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 6)]  # in order, once
    assert h.component.ingested[SOURCE] == 5


@pytest.mark.parametrize("skipped", [1, 3])
def test_a_source_born_after_the_component_started_goes_out_from_its_first_number(
    skipped: int,
) -> None:
    # its publisher journaled its first numbers and died before sending any: nothing of it
    # went out, so what it sends next skips them, as for a source already fanned out
    h = Harness()
    h.journal.append(numbered_publications(1, skipped, "feed.new"), 32)  # then it died
    after = h.send(numbered(skipped + 1, skipped + 2, "feed.new"))

    assert outcome(after) == ACCEPTED
    assert h.received() == [("feed.new", seq, seq) for seq in range(1, skipped + 3)]
    assert h.component.ingested["feed.new"] == skipped + 2


def test_what_a_publisher_sent_during_an_outage_goes_out_when_its_link_ends() -> None:
    # it journaled 1..3 (a new source) and sent them while the component's journal was out:
    # released, and its link ended before it sent them again (it gave up, or died)
    h = Harness()
    h.journal.append(numbered_publications(1, 3, "feed.gone"), 32)
    h.journal.down.add("feed.gone")
    released = h.send(numbered(1, 3, "feed.gone"))
    h.journal.down.clear()
    h.component.on_link_closed(SimpleNamespace(link=h.receiver))
    h.component.ingest.poll(0.0)

    assert outcome(released) == RELEASED
    assert h.received() == [("feed.gone", seq, seq) for seq in range(1, 4)]  # in order, once


def test_a_publisher_that_skips_numbers_the_journal_does_not_hold_is_still_refused() -> None:
    h = Harness()
    assert outcome(h.send(numbered(1, 2))) == ACCEPTED
    skipping = h.send(numbered(5, 6))

    assert outcome(skipping) == (Delivery.REJECTED, "amqp:precondition-failed")
    assert h.received() == [(SOURCE, 1, 1), (SOURCE, 2, 2)]


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


def test_a_rejected_message_leaves_its_sources_numbering_and_width_as_they_were() -> None:
    h = Harness()
    h.send(numbered(1, 2))
    far_off = Message(body=[{"source": SOURCE, "source_seq": 1 << 40, "source_bits": 64,
                             "topic": "/elsewhere", "fields": {"n": 0}}],
                      properties={"message-type": "PUBLICATIONS"})
    assert outcome(h.send(far_off)) == (Delivery.REJECTED, "amqp:decode-error")
    assert h.component.capabilities().source_bits[SOURCE] == 32
    assert outcome(h.send(numbered(3, 4))) == ACCEPTED
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 5)]


# --- journaled, its answer lost, its source silent: fanned out on the component's timer ------


class Ticking:
    """Moves the component's clock by hand and runs its timer, as the container would."""

    def __init__(self, h: Harness) -> None:
        self.now = 1_000.0
        self.h = h
        h.component.clock = lambda: self.now
        h.component.container = SimpleNamespace(schedule=lambda delay, task: None)

    def run(self, seconds: float, every: float = 0.05) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now += every
            self.h.component.on_timer_task(None)


def test_a_plain_publication_whose_answer_was_lost_goes_out_though_its_source_stays_silent(
) -> None:
    h = Harness()
    clock = Ticking(h)
    h.publish(1)
    h.journal.replies_lost.add(PUBLISHER)  # journaled, but the answer times out
    rejected = h.publish(2)
    h.journal.replies_lost.clear()
    before = h.received()
    clock.run(0.2)  # the publisher sends nothing more
    recovered = h.received()
    clock.run(2.0)
    assert outcome(h.publish(3)) == ACCEPTED

    assert outcome(rejected) == (Delivery.REJECTED, "amqp:internal-error")
    assert h.journaled() == [(1, 1), (2, 2), (3, 3)]
    assert before == [(PUBLISHER, 1, 1)]
    assert recovered == [(PUBLISHER, 1, 1), (PUBLISHER, 2, 2)]  # journaled is published
    assert h.received() == [(PUBLISHER, n, n) for n in (1, 2, 3)]  # once, in order
    assert h.component.ingested[PUBLISHER] == 3


def test_a_plain_batchs_source_whose_answer_was_lost_goes_out_on_the_timer() -> None:
    h = Harness()
    clock = Ticking(h)
    h.journal.replies_lost.add("feed.b")  # appends go source by source: feed.a's is answered
    rejected = h.send(Message(body=[{"source": "feed.a", "fields": {"n": 1}},
                                    {"source": "feed.b", "fields": {"n": 2}}],
                              properties={"message-type": "PUBLICATIONS"}))
    h.journal.replies_lost.clear()
    clock.run(0.2)

    assert outcome(rejected) == (Delivery.REJECTED, "amqp:internal-error")
    assert h.received() == [("feed.a", 1, 1), ("feed.b", 1, 2)]


def test_a_numbered_message_whose_answer_was_lost_goes_out_though_it_is_never_sent_again(
) -> None:
    h = Harness()
    clock = Ticking(h)
    h.send(numbered(1, 2))
    h.journal.replies_lost.add(SOURCE)
    released = h.send(numbered(3, 4))
    h.journal.replies_lost.clear()
    clock.run(0.2)  # the publisher is gone: it never sends 3..4 again
    recovered = h.received()
    again = h.send(numbered(3, 4))  # or it does, late

    assert outcome(released) == RELEASED
    assert recovered == [(SOURCE, seq, seq) for seq in range(1, 5)]
    assert outcome(again) == ACCEPTED
    assert h.received() == recovered  # not fanned out twice
    assert h.component.stats["duplicates"] == 2


def test_what_a_source_publishes_next_does_not_overtake_what_the_journal_took_unanswered(
) -> None:
    h = Harness()
    h.send(numbered(1, 2))
    h.journal.replies_lost.add(SOURCE)
    assert outcome(h.send(numbered(3, 4))) == RELEASED
    h.journal.replies_lost.clear()
    h.receiver.held_back = {}  # the publisher reconnected: a new link holds nothing back
    after = h.send(numbered(5, 6))  # before the component's timer ran
    again = h.send(numbered(3, 4))  # sent again, late

    assert [outcome(after), outcome(again)] == [ACCEPTED, ACCEPTED]
    assert h.journaled(SOURCE) == [(seq, seq) for seq in range(1, 7)]
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 7)]  # once, in order


def test_while_the_journal_stays_down_it_is_asked_again_with_a_capped_backoff() -> None:
    h = Harness()
    clock = Ticking(h)
    h.publish(1)
    h.journal.replies_lost.add(PUBLISHER)
    h.publish(2)
    h.journal.replies_lost.clear()
    h.journal.down.add(PUBLISHER)  # and now Redis is gone for a minute
    asked = h.journal.calls.count("high_water")
    clock.run(60.0)  # 1,200 ticks
    tries = h.journal.calls.count("high_water") - asked
    during = h.received()
    h.journal.down.clear()
    clock.run(7.0)  # the longest delay between two tries (5 s) and its jitter
    back = h.received()
    clock.run(5.0)

    assert 5 <= tries <= 25, tries  # 0.1 s doubled up to 5 s, not once per tick
    assert during == [(PUBLISHER, 1, 1)]
    assert back == [(PUBLISHER, 1, 1), (PUBLISHER, 2, 2)]
    assert h.received() == back


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


# --- an append whose answer was lost lands late: the component's numbering went stale ------


@pytest.mark.parametrize("timer_ran", [False, True])
def test_a_plain_message_numbered_before_a_late_write_landed_is_released_and_numbered_again(
    timer_ran: bool,
) -> None:
    h = Harness()
    clock = Ticking(h)
    h.publish(1)
    h.journal.late.add(PUBLISHER)  # 2's append times out unwritten; it lands later
    rejected = h.publish(2)
    h.journal.late.clear()
    if timer_ran:  # the component reads the high-water again before the late write lands
        clock.run(0.2)
    stale = h.publish(3)  # numbered 2 after the high-water read; 2's append lands first
    clock.run(0.2)  # the publisher waits before sending it again
    recovered = h.received()
    again = h.publish(3)

    assert outcome(rejected) == (Delivery.REJECTED, "amqp:internal-error")
    assert outcome(stale) == RELEASED  # not acknowledged: it is not journaled
    assert outcome(again) == ACCEPTED
    assert h.journaled() == [(1, 1), (2, 2), (3, 3)]  # each number once, nothing acked lost
    assert recovered == [(PUBLISHER, 1, 1), (PUBLISHER, 2, 2)]  # the late write goes out
    assert h.received() == [(PUBLISHER, n, n) for n in (1, 2, 3)]  # as journaled, once
    assert h.component.ingested[PUBLISHER] == 3


def test_a_late_write_goes_out_before_the_renumbered_message_sent_again_at_once() -> None:
    h = Harness()
    h.publish(1)
    h.journal.late.add(PUBLISHER)
    h.publish(2)
    h.journal.late.clear()
    stale = h.publish(3)
    again = h.publish(3)  # no timer ran in between

    assert [outcome(stale), outcome(again)] == [RELEASED, ACCEPTED]
    assert h.journaled() == [(1, 1), (2, 2), (3, 3)]
    assert h.received() == [(PUBLISHER, n, n) for n in (1, 2, 3)]


# --- retention trims what an append whose answer was lost journaled, before it went out ----

TRIMMED_UNSENT = "journaled publications trimmed before they were fanned out"
RETRY_EVENT = "journaled publications not fanned out yet: the journal cannot be read"


def _trim_warnings(logs: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [(e["source"], e["first"], e["last"]) for e in logs
            if e["event"] == TRIMMED_UNSENT and e["log_level"] == "warning"]


def _lost_answer_then_trimmed(h: Harness, through: int) -> object:
    """Plain publications 1, then 2..4 in one message whose append's answer is lost (the
    journal holds them, none went out); retention then trims the source through ``through``
    before the component reads them back. The message's outcome."""
    assert outcome(h.publish(1)) == ACCEPTED
    h.journal.replies_lost.add(PUBLISHER)
    lost = h.send(Message(body=[{"fields": {"n": n}} for n in (2, 3, 4)],
                          properties={"message-type": "PUBLICATIONS"}))
    h.journal.replies_lost.clear()
    h.journal.trim(PUBLISHER, through)
    return outcome(lost)


@pytest.mark.parametrize(
    ("through", "left"),
    [(3, [(PUBLISHER, 4, 4)]), (4, [])],  # part of the unsent numbers, or all of them
)
def test_what_retention_trimmed_before_the_catch_up_is_passed_over_and_the_rest_goes_out(
    through: int, left: list[tuple[str, int, int]]
) -> None:
    h = Harness()
    clock = Ticking(h)
    with structlog.testing.capture_logs() as logs:
        lost = _lost_answer_then_trimmed(h, through)
        clock.run(0.2)
        recovered = h.received()
        in_doubt = set(h.component.ingest.in_doubt)
        clock.run(10.0)  # no further tries: the source left doubt
        later = h.publish(5)

    assert lost == (Delivery.REJECTED, "amqp:internal-error")
    assert recovered == [(PUBLISHER, 1, 1), *left]  # what the journal still holds, in order
    assert in_doubt == set()
    assert outcome(later) == ACCEPTED
    assert h.journaled()[-1] == (5, 5)  # numbered after everything the journal took
    assert h.received() == [(PUBLISHER, 1, 1), *left, (PUBLISHER, 5, 5)]  # once, in order
    assert h.component.ingested[PUBLISHER] == 5
    assert _trim_warnings(logs) == [(PUBLISHER, 2, through)]  # named once, never fanned out
    assert h.component.stats["trimmed_unsent"] == through - 1  # and counted: 2..through
    assert not [e for e in logs if e["event"] == RETRY_EVENT]


@pytest.mark.parametrize(
    ("through", "left"),
    [(3, [(PUBLISHER, 4, 4)]), (4, [])],
)
def test_a_publication_of_the_source_that_comes_before_the_timer_is_taken_after_the_rest(
    through: int, left: list[tuple[str, int, int]]
) -> None:
    h = Harness()
    with structlog.testing.capture_logs() as logs:
        _lost_answer_then_trimmed(h, through)
        later = h.publish(5)  # the catch-up runs on this message's path, not released

    assert outcome(later) == ACCEPTED
    assert h.received() == [(PUBLISHER, 1, 1), *left, (PUBLISHER, 5, 5)]
    assert h.component.ingest.in_doubt == set()
    assert _trim_warnings(logs) == [(PUBLISHER, 2, through)]


@pytest.mark.parametrize(
    ("through", "left"),
    [(4, [(SOURCE, 5, 5)]), (5, [])],
)
def test_a_numbering_publishers_trimmed_numbers_sent_again_are_duplicates_not_fanned_out(
    through: int, left: list[tuple[str, int, int]]
) -> None:
    h = Harness()
    clock = Ticking(h)
    h.send(numbered(1, 2))
    h.journal.replies_lost.add(SOURCE)
    released = h.send(numbered(3, 5))  # journaled, its answer lost
    h.journal.replies_lost.clear()
    h.journal.trim(SOURCE, through)
    with structlog.testing.capture_logs() as logs:
        clock.run(0.2)
    again = h.send(numbered(3, 5))  # the publisher sends the released message again
    after = h.send(numbered(6, 6))

    assert outcome(released) == RELEASED
    assert [outcome(again), outcome(after)] == [ACCEPTED, ACCEPTED]
    assert h.received() == [(SOURCE, 1, 1), (SOURCE, 2, 2), *left, (SOURCE, 6, 6)]
    assert h.component.stats["duplicates"] == 3  # 3..5 went out, or were passed over
    assert h.component.ingest.in_doubt == set()
    assert h.receiver.held_back == {}
    assert _trim_warnings(logs) == [(SOURCE, 3, through)]


def test_a_restarted_component_reports_the_bit_widths_its_journal_holds() -> None:
    first = Harness()
    narrow = Message(body=[{"source": "feed.narrow", "source_seq": seq, "source_bits": 8,
                            "topic": "/plain/x", "fields": {"n": seq}} for seq in (1, 2)],
                     properties={"message-type": "PUBLICATIONS"})
    assert outcome(first.send(narrow)) == ACCEPTED
    restarted = Harness(first.journal)  # a new component on the same journal
    assert restarted.component.capabilities().source_bits == {"feed.narrow": 8}
