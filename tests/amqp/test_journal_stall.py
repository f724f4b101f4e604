"""A journal that hangs does not hold the component's event loop.

A Redis server that stops answering (stopped, or behind a path that drops packets) fails each
call only after the client's socket timeout, and the component's one event loop, which also
sends every link's heartbeats, waits that long. So a failed journal call that held the loop
``STALL`` seconds or more makes the journal *quiet* for twice that time: publications are
RELEASED untried (their publishers send them again later; a plain publisher's too, since
nothing of them was tried) and the timer's catch-up reads wait. A failure that comes at once
(connection refused, an error reply) leaves the journal tried as before. Nothing is lost or
duplicated: once the journal answers again every publication is journaled and fanned out
once, in order.

In memory on :class:`~tests.amqp.test_journalport.FakeJournal`; the journal's stall is a step
of the component's clock.
"""

from __future__ import annotations

from proton import Delivery

from seqrepair.amqp.component.ingest import STALL
from seqrepair.journal.errors import JournalTimeoutError

from .test_journal_outage import ACCEPTED, RELEASED, SOURCE, numbered, outcome
from .test_journalport import FakeJournal
from .test_numbering import PUBLISHER, Harness


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class HangingJournal(FakeJournal):
    """Calls for the sources in ``hanging`` time out after ``stall`` seconds of the clock."""

    def __init__(self, clock: Clock, stall: float) -> None:
        super().__init__()
        self.clock = clock
        self.stall = stall
        self.hanging: set[str] = set()

    def _reach(self, source: str) -> None:
        if source in self.hanging:
            self.clock.now += self.stall
            raise JournalTimeoutError("Timeout reading from socket", source=source)
        super()._reach(source)


def hanging_harness(stall: float) -> tuple[Harness, HangingJournal, Clock]:
    clock = Clock()
    journal = HangingJournal(clock, stall)
    h = Harness(journal)
    h.component.ingest.clock = clock
    return h, journal, clock


def test_a_call_that_stalled_leaves_the_journal_quiet_for_twice_the_stall() -> None:
    h, journal, clock = hanging_harness(stall=2.0)
    assert outcome(h.send(numbered(1, 2))) == ACCEPTED
    journal.hanging.add(SOURCE)
    stalled = h.send(numbered(3, 4))  # held the loop 2 s
    calls = len(journal.calls)
    clock.now += 3.9
    quiet = [h.send(numbered(3, 4)), h.send(numbered(1, 1, "feed.other"))]
    untried = len(journal.calls) == calls
    journal.hanging.clear()
    clock.now += 0.1  # twice the stall has passed
    again = [h.send(numbered(3, 4)), h.send(numbered(5, 6)), h.send(numbered(1, 1, "feed.other"))]

    assert outcome(stalled) == RELEASED
    assert [outcome(d) for d in quiet] == [RELEASED, RELEASED]
    assert untried  # no journal call while quiet, whatever the source
    assert [outcome(d) for d in again] == [ACCEPTED] * 3
    assert h.journaled(SOURCE) == [(seq, seq) for seq in range(1, 7)]
    assert [r for r in h.received() if r[0] == SOURCE] == [(SOURCE, n, n) for n in range(1, 7)]
    assert h.receiver.held_back == {}


def test_a_plain_publishers_message_is_released_untried_while_the_journal_is_quiet() -> None:
    h, journal, clock = hanging_harness(stall=1.0)
    h.publish(1)
    journal.hanging.add(PUBLISHER)
    stalled = h.publish(2)  # its append stalls 1 s, then times out: the outcome is unknown
    calls = len(journal.calls)
    quiet = h.publish(3)
    untried = len(journal.calls) == calls
    journal.hanging.clear()
    clock.now += 2.0
    resent = h.publish(3)

    # numbered here and perhaps journaled: rejected (a resend would be numbered again)
    assert outcome(stalled) == (Delivery.REJECTED, "amqp:internal-error")
    assert outcome(quiet) == RELEASED  # not rejected: the journal was not tried
    assert untried
    assert outcome(resent) == ACCEPTED
    assert [(seq, n) for _, seq, n in h.received()] == [(1, 1), (2, 3)]


def test_a_failure_that_comes_at_once_leaves_the_journal_tried() -> None:
    h, journal, _clock = hanging_harness(stall=STALL / 2)  # fails faster than STALL
    h.send(numbered(1, 2))
    journal.hanging.add(SOURCE)
    first = h.send(numbered(3, 4))
    calls = len(journal.calls)
    journal.hanging.clear()
    second = h.send(numbered(3, 4))

    assert outcome(first) == RELEASED
    assert len(journal.calls) > calls  # tried again at once
    assert outcome(second) == ACCEPTED
    assert h.component.ingest.quiet_until is None


def test_the_timer_does_not_read_a_quiet_journal_and_catches_up_after() -> None:
    h, journal, clock = hanging_harness(stall=1.0)
    h.send(numbered(1, 2))
    journal.replies_lost.add(SOURCE)  # 3..4 journaled, the answer lost: in doubt
    assert outcome(h.send(numbered(3, 4))) == RELEASED
    journal.replies_lost.clear()
    journal.hanging.add(SOURCE)
    h.component.ingest.poll(clock())  # the catch-up read stalls 1 s
    calls = len(journal.calls)
    journal.hanging.clear()
    clock.now += 1.5
    h.component.ingest.poll(clock())  # quiet: not tried
    untried = len(journal.calls) == calls
    clock.now += 1.0
    h.component.ingest.poll(clock())

    assert untried
    assert h.component.ingest.in_doubt == set()
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 5)]  # once, in order
