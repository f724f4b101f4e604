"""Large answers are streamed as credit allows; answers waiting for credit are bounded.

A GAP-REQUEST may carry 256 ranges, each up to ``--max-gap-range``: the component reads its
answer from the link context a chunk per transfer, a quota of transfers per turn of the event
loop (other links are served in between), instead of encoding it all at once. Real parts: a
redis-server, the component in a thread of the test, a subscriber over proton on loopback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.component.links import MAX_WAITING_ANSWERS
from seqrepair.amqp.wire.errors import RequestFloodError
from seqrepair.core.events import Event, HeartbeatOverdue
from seqrepair.core.messages import GapRequest, Publication

from .conftest import wait_for
from .inthread import HereComponent

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_an_answer_of_many_ranges_reaches_the_subscriber_whole_and_in_order(
    here: Callable[..., HereComponent],
) -> None:
    comp = here()
    got: list[Publication] = []
    overdue: list[Event] = []
    # ack=False: no window, so the numbers it already has are resent (an acknowledging
    # subscriber is not sent what it acknowledged: test_window_parts)
    with Subscriber(comp.here_url, "/weather/#", link_name="big", heartbeat_interval=0.2,
                    on_publication=got.append, ack=False,
                    on_event=lambda e: overdue.extend(
                        [e] if isinstance(e, HeartbeatOverdue) else [])) as sub:
        assert sub.connected.wait(10)
        with Publisher(comp.here_url, "feed.b", address="/weather/#") as publisher:
            publisher.publish_many([("/weather/a", {"n": i}, "update") for i in range(2000)])
            assert publisher.flush(30)
        assert wait_for(lambda: len(got) >= 2000, 30)
        # 40 ranges of 2,000 link numbers: 80,000 frames the subscriber already has
        comp.ask("big", [GapRequest(1, 2000)] * 40)
        assert wait_for(lambda: sub.stats().duplicates >= 80_000, 60), sub.stats()
        time.sleep(0.3)
        report = sub.stats()
    assert [p.source_seq for p in got] == list(range(1, 2001))
    assert report.unrecoverable == 0
    # no request of its own: the only one a subscriber makes here is an overdue probe (a
    # stall of this loaded machine, 0.6 s at --heartbeat 0.2), whose answer is a duplicate
    assert report.requests_sent == len(overdue), (report, overdue)
    assert 80_000 <= report.duplicates <= 80_000 + report.requests_sent, report


def test_requests_are_refused_while_answers_wait_for_credit_the_subscriber_never_gives(
    here: Callable[..., HereComponent],
) -> None:
    comp = here()
    release = threading.Event()
    with Subscriber(comp.here_url, "/weather/#", link_name="stuck", heartbeat_interval=0.2,
                    credit=5, on_publication=lambda _p: release.wait(30)) as sub:
        assert sub.connected.wait(10)
        with Publisher(comp.here_url, "feed.s", address="/weather/#") as publisher:
            publisher.publish_many([("/weather/a", {"n": i}, "update") for i in range(20)])
            assert publisher.flush(30)
        # the application holds the subscriber's thread: no credit goes back
        assert wait_for(lambda: comp.call(lambda: comp.links["stuck"].sender.credit) == 0, 10)
        for _ in range(MAX_WAITING_ANSWERS):
            comp.ask("stuck", [GapRequest(1, 5)])
        with pytest.raises(RequestFloodError, match="grant credit"):
            comp.ask("stuck", [GapRequest(1, 5)])
        waiting = comp.call(lambda: len(comp.links["stuck"].route.responses))
        release.set()
        assert wait_for(lambda: sub.stats().delivered >= 20, 30)
    assert waiting == MAX_WAITING_ANSWERS
