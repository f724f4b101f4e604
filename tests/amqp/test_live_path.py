"""The live path batches only when busy: one wake per burst of ``publish()`` calls, the sender
never waits out the journal's round trip, the component sends what one read brought together
once the events at hand are handled (issue 26). No timing is asserted: what is checked is who
waits on whom and how many wakes, pumps and transfers there are."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from proton import Delivery, Message

from seqrepair.amqp.client import publisher as publisher_module
from seqrepair.amqp.client.publisher import LINGER
from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.journal.journal import Journal

from .test_numbering import Harness


class _Sender:
    """A proton sender stand-in with credit: records what is sent."""

    remote_max_message_size = 0

    def __init__(self) -> None:
        self.credit = 1_000
        self.sent: list[Any] = []

    def send(self, message: Any) -> Any:
        self.sent.append(message)
        return SimpleNamespace(tag=str(len(self.sent)))


def _publisher(journal: Journal | None = None) -> tuple[Publisher, list[object]]:
    publisher = Publisher("127.0.0.1:1", "feed.live", journal=journal)
    wakes: list[object] = []
    publisher._injector.trigger = wakes.append  # type: ignore[method-assign]
    return publisher, wakes


def test_publications_queued_while_a_wake_is_on_its_way_ride_on_it() -> None:
    publisher, wakes = _publisher()
    try:
        publisher._sender = _Sender()
        for n in range(5):
            publisher.publish("/live/a", {"n": n})
        assert len(wakes) == 1  # the container thread has not run: one wake for all five
        publisher.on_seqrepair_wake(None)
        assert len(publisher._sender.sent) == 1  # one transfer of the five
        assert [p.source_seq for p in next(iter(publisher._unsettled.values()))] == [1, 2, 3,
                                                                                    4, 5]
        publisher.publish("/live/a", {"n": 5})  # idle again: woken at once
        assert len(wakes) == 2
        publisher.on_seqrepair_wake(None)
        assert len(publisher._sender.sent) == 2
    finally:
        publisher._injector.close()


def test_while_the_application_is_inside_publish_what_is_queued_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The application journaling its next publication: the sender waits for it (on the
    application's lock) and sends both in one transfer."""
    monkeypatch.setattr(publisher_module, "LINGER", 60.0)  # only the lock's release ends it
    publisher, _wakes = _publisher()
    holding, proceed = threading.Event(), threading.Event()

    def publishing() -> None:  # what publish() does, back to back, held open until told
        with publisher._stamping:
            publisher._back_to_back = True
            holding.set()
            proceed.wait(30)
            publisher._pending.append(publisher.sequencer.stamp("/live/a", {"n": 1}))

    try:
        sender = publisher._sender = _Sender()
        publisher.publish("/live/a", {"n": 0})
        application = threading.Thread(target=publishing)
        application.start()
        assert holding.wait(30)
        sending = threading.Thread(target=publisher.on_seqrepair_wake, args=(None,))
        sending.start()
        proceed.set()
        application.join(30)
        sending.join(30)
        assert len(sender.sent) == 1
        assert [p.source_seq for p in publisher._unsettled["1"]] == [1, 2]
    finally:
        proceed.set()
        publisher._injector.close()


def test_what_lingered_long_enough_goes_though_the_application_is_inside_publish() -> None:
    publisher, _wakes = _publisher()
    try:
        sender = publisher._sender = _Sender()
        publisher.publish("/live/a", {"n": 0})
        publisher._waiting_since = time.monotonic() - LINGER
        with publisher._stamping:
            publisher._back_to_back = True
            publisher.on_seqrepair_wake(None)
        assert len(sender.sent) == 1
        publisher.publish("/live/a", {"n": 1})  # nobody inside publish(): at once
        publisher.on_seqrepair_wake(None)
        assert len(sender.sent) == 2
    finally:
        publisher._injector.close()


def test_an_application_that_publishes_now_and_then_is_never_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inside publish() but not back to back (more time between the calls than in them):
    what is queued goes at once."""
    monkeypatch.setattr(publisher_module, "LINGER", 60.0)
    publisher, _wakes = _publisher()
    try:
        sender = publisher._sender = _Sender()
        publisher.publish("/live/a", {"n": 0})
        publisher._last_end = time.monotonic() - 1.0  # a second ago, after a short call
        with publisher._stamping:
            publisher._call_began()
            assert not publisher._back_to_back
            publisher.on_seqrepair_wake(None)  # would wait a minute if it lingered
        assert len(sender.sent) == 1
        publisher._last_end, publisher._last_call = time.monotonic(), 1.0
        publisher._call_began()
        assert publisher._back_to_back  # right after a long call
    finally:
        publisher._injector.close()


def test_what_is_queued_while_the_sender_sends_needs_no_wake_of_its_own() -> None:
    """While the container thread is sending, a publish() writes no wake; what it queued
    after the sender looked brings the sender round once more."""
    publisher, wakes = _publisher()
    try:
        sender = publisher._sender = _Sender()
        publisher.publish("/live/a", {"n": 0})
        real_send = publisher._send

        def send_then_publish() -> None:
            real_send()
            publisher.publish("/live/a", {"n": 1})  # the application, just after

        publisher._send = send_then_publish  # type: ignore[method-assign]
        publisher.on_seqrepair_wake(None)
        assert len(wakes) == 2  # the first wake, and the sender's own turn: none by publish
        publisher._send = real_send  # type: ignore[method-assign]
        publisher.on_seqrepair_wake(None)
        assert [len(publisher._unsettled[t]) for t in ("1", "2")] == [1, 1]
        assert len(wakes) == 2  # nothing left: no further turn
        sender.credit = 0
        publisher.publish("/live/a", {"n": 2})
        publisher.on_seqrepair_wake(None)  # no credit: on_sendable will send it, no turn
        assert len(wakes) == 3
        assert len(publisher._pending) == 1
    finally:
        publisher._injector.close()


def test_a_publish_after_the_wake_was_taken_wakes_again() -> None:
    """The flag is cleared before the queue is read: a publication queued after that read is
    never left without a wake of its own."""
    publisher, wakes = _publisher()
    try:
        publisher._sender = _Sender()
        publisher.publish("/live/a", {"n": 0})
        publisher._wake_due = False  # the container thread took the wake, then:
        publisher.publish("/live/a", {"n": 1})
        assert len(wakes) == 2
    finally:
        publisher._injector.close()


@pytest.mark.redis
def test_the_sender_is_not_held_up_by_a_publish_waiting_for_the_journal(redis_url: str) -> None:
    """A ``publish()`` holds its own lock across the journal's round trip; the container
    thread sends what is already journaled meanwhile (once it has lingered LINGER)."""
    publisher, _wakes = _publisher(Journal.from_url(redis_url))
    appending, release = threading.Event(), threading.Event()
    try:
        publisher._sender = _Sender()
        publisher.publish("/live/a", {"n": 0})  # journaled, queued
        embedded = publisher.embedded
        assert embedded is not None
        real_flush = embedded.flush

        def slow_flush() -> int:  # the next publication's journal call, still out
            appending.set()
            release.wait(30)
            return real_flush()

        embedded.flush = slow_flush  # type: ignore[method-assign]
        second = threading.Thread(target=publisher.publish, args=("/live/a", {"n": 1}))
        second.start()
        assert appending.wait(30)
        publisher._waiting_since = time.monotonic() - LINGER  # 1 has lingered its most
        sender = threading.Thread(target=publisher.on_seqrepair_wake, args=(None,))
        sender.start()
        sender.join(30)
        finished = not sender.is_alive()
        release.set()
        second.join(30)
        assert finished  # it did not wait for the journal call of publication 2
        assert [p.source_seq for p in next(iter(publisher._unsettled.values()))] == [1]
    finally:
        release.set()
        publisher._injector.close()


def test_the_component_sends_once_the_events_at_hand_are_handled() -> None:
    """Two messages handled in one turn of the event loop: fan-out offers each at once (in
    order), the link is pumped once, when no events are left."""
    h = Harness()
    pumped: list[list[int]] = []

    def pump(link: Any, now: float) -> None:
        pumped.append([p.source_seq for p, _ in link.pending])

    h.component._pump_link = pump  # type: ignore[method-assign]
    h.component.container = SimpleNamespace()  # running: pumps wait for the quiet point
    assert h.publish(1).outcome == Delivery.ACCEPTED
    assert h.publish(2).outcome == Delivery.ACCEPTED
    assert pumped == []
    assert [seq for _, seq, _ in h.received()] == [1, 2]
    h.component.on_reactor_quiesced(None)
    assert pumped == [[1, 2]]
    h.component.on_reactor_quiesced(None)  # nothing new: no pump
    assert pumped == [[1, 2]]


def test_without_a_running_container_fan_out_pumps_at_once() -> None:
    h = Harness()
    pumped: list[int] = []
    h.component._pump_link = lambda link, now: pumped.append(len(link.pending))  # type: ignore[method-assign]
    h.send(Message(body={"n": 1}))
    assert pumped == [1]
