"""A subscriber whose application holds the thread: its own deafness is no silence of the link.

The component keeps sending while ``on_publication`` blocks; those frames wait unread in the
transport, and proton fires the subscriber's due tick before it reads them. Counting that time
as link silence made the stub report HeartbeatOverdue and probe for a frame already waiting,
whose answer then arrived as a duplicate (it showed in the pause tests as duplicates=1,
requests_sent=1, gaps_detected=0).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest

from seqrepair.amqp.client import Publisher, Subscriber
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
    events: list[Event] = []

    def application(publication: Publication) -> None:
        if not got:
            time.sleep(1.0)
        got.append(publication.source_seq)

    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(comp.url, "/weather/#", link_name="held", heartbeat_interval=0.2,
                       on_publication=application, on_event=events.append)
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
    assert [e for e in events if isinstance(e, HeartbeatOverdue)] == []
    assert report.requests_sent == 0
    assert report.duplicates == 0
    assert report.gaps_detected == 0
