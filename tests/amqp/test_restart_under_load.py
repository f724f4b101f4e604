"""A component killed and restarted while a publisher runs at ~1,500/s (issue 22 §3).

The subscriber's source repair used to give up after 6 retries (~6-8 s) while the restarted
component was still streaming the replay, and the CLI's ``unrecoverable`` stayed 0. A replay
whose answers keep arriving must neither be asked for again nor given up: the subscriber ends
with every publication, once, in order, and nothing abandoned.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

RATE = 1500  # publications per second, per publisher
BATCH = 50


def test_a_component_killed_and_restarted_mid_stream_costs_no_publication(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "0.2")
    sources = ("feed.a", "feed.b")
    got: list[list[Publication]] = [[] for _ in range(4)]
    published = 0
    with contextlib.ExitStack() as running:
        subs = [
            running.enter_context(
                Subscriber(comp.url, "/weather/#", on_publication=out.append,
                           heartbeat_interval=0.2, link_name=f"under-load-{k}")
            )
            for k, out in enumerate(got)
        ]
        for sub in subs:
            assert sub.connected.wait(10)
        time.sleep(0.3)
        publishers = [
            running.enter_context(Publisher(comp.url, name, journal=Journal.from_url(redis_url)))
            for name in sources
        ]

        def publish_for(seconds: float) -> None:
            """Both publishers, each at RATE on average."""
            nonlocal published
            start = time.monotonic()
            while time.monotonic() - start < seconds:
                for publisher in publishers:
                    publisher.publish_many(
                        [("/weather/wind/LEMD", {"n": published + k}, "update", None)
                         for k in range(BATCH)]
                    )
                published += BATCH
                ahead = published / RATE - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)

        began = time.monotonic()
        publish_for(3.0)
        comp.kill()  # mid-stream
        publish_for(1.0)  # journaled by the publishers while the component is down
        comp.start()
        publish_for(5.0)
        for publisher in publishers:
            assert publisher.flush(60)
        done = wait_for(lambda: all(len(out) >= 2 * published for out in got), 120)
        time.sleep(0.5)  # a duplicate would arrive now
    reports = [sub.stats().as_dict() for sub in subs]
    assert done, (reports, [len(out) for out in got], published, comp.log_text()[-3000:])
    for out in got:
        for name in sources:
            assert [p.source_seq for p in out if p.source == name] == list(
                range(1, published + 1))
    for report in reports:
        assert report["sources_abandoned"] == 0, report
        assert report["unrecoverable"] == 0, report
        assert report["resets"] >= 1  # the restart reset the link
