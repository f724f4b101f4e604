"""A subscriber whose application holds the thread: its own deafness is no silence of the link.

The component keeps sending while ``on_publication`` blocks; those frames wait unread in the
transport, and proton fires the subscriber's due tick before it reads them. Counting that time
as link silence made the stub report HeartbeatOverdue and probe for a frame already waiting,
whose answer then arrived as a duplicate (it showed in the pause tests as duplicates=1,
requests_sent=1, gaps_detected=0).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.events import Event, HeartbeatOverdue
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .test_link_contexts import publish_rows

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_an_application_that_holds_the_thread_past_the_silence_limit_causes_no_repair(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    # heartbeats every 0.2 s, overdue after 3 (0.6 s); the application holds the thread 1.0 s
    # on its first publication while the rest and the heartbeats arrive
    comp = component("--heartbeat", "0.2")
    got: list[int] = []
    events: list[tuple[float, Event]] = []  # (when the application was told, the event)
    held: list[float] = []  # when the hold began and ended

    def application(publication: Publication) -> None:
        if not got:
            held.append(time.time())
            time.sleep(1.0)
            held.append(time.time())
        got.append(publication.source_seq)

    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(comp.url, "/weather/#", link_name="held", heartbeat_interval=0.2,
                       on_publication=application,
                       on_event=lambda e: events.append((time.time(), e)))
        )
        assert sub.connected.wait(10)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.h", journal=Journal.from_url(redis_url))
        )
        publisher.publish_many(publish_rows(0, 1))
        assert publisher.flush(30)
        assert wait_for(lambda: len(got) == 1, 10)
        publisher.publish_many(publish_rows(1, 99))  # sent while the application holds on
        assert publisher.flush(30)
        assert wait_for(lambda: len(got) >= 100, 30)
        time.sleep(0.5)  # a probe's answer would arrive now
    assert got == list(range(1, 101))
    report = sub.stats()
    overdue = [(at, e) for at, e in events if isinstance(e, HeartbeatOverdue)]
    # the hold counted as silence: an overdue as soon as the thread was back, its silence
    # begun before the hold ended (the silence limit is counted from the hold's end, 0.6 s)
    hold_end = held[1]
    assert [e for at, e in overdue if hold_end <= at < hold_end + 0.6 and e.since < hold_end] \
        == [], (held, overdue)
    # any other overdue is a stall of this (loaded) machine: each asked one probe, whose
    # answer may be a duplicate; nothing was a gap
    assert report.requests_sent == len(overdue), (report, overdue)
    assert report.duplicates <= report.requests_sent
    assert report.gaps_detected == 0


def test_a_reader_slower_than_the_feed_gets_everything_once_while_memory_stays_bounded(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    # the iterator holds at most 50; then the subscriber stops reading, its credit (2
    # transfers of at most 10) runs out, and the component pauses the link 300 frames behind
    comp = component("--heartbeat", "0.2", "--max-pending", "300", "--max-batch", "10")
    got: list[int] = []
    queued: list[int] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(comp.url, "/weather/#", link_name="slow-reader", heartbeat_interval=0.2,
                       max_queued=50, credit=2)
        )
        assert sub.connected.wait(10)

        def read() -> None:
            for publication in sub:
                got.append(publication.source_seq)
                queued.append(sub.queued)
                time.sleep(0.001)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        publisher = running.enter_context(
            Publisher(comp.url, "feed.slow", journal=Journal.from_url(redis_url))
        )
        publisher.publish_many(publish_rows(0, 3000))
        assert publisher.flush(30)
        assert wait_for(lambda: len(got) >= 3000, 60)
    reader.join(5)
    assert not reader.is_alive()  # stopping ended the iteration
    assert got == list(range(1, 3001))
    assert max(queued) <= 50
    report = sub.stats()
    assert report.paused >= 1  # the slow reader made a slow subscriber: paused, then repaired
    assert report.unrecoverable == 0


def test_a_subscriber_with_a_callback_cannot_also_be_iterated() -> None:
    sub = Subscriber("127.0.0.1:1", "/weather/#", on_publication=lambda _p: None)
    with pytest.raises(InvalidConfigError, match="on_publication"):
        iter(sub)
