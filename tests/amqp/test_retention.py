"""``seqrepair serve --retain-count/--retain-age``: the component holds its journal to a
retention policy by itself, says so in its capabilities, and a subscriber that was away longer
than the journal keeps learns it as ``Unrecoverable("trimmed")`` instead of waiting forever."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.events import Event, Unrecoverable
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def items(first: int, n: int) -> list[tuple[str, dict, str]]:
    return [("/weather/wind/LEMD", {"n": i}, "update") for i in range(first, first + n)]


def test_serve_trims_by_its_policy_and_advertises_it(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--retain-count", "20", "--retain-age", "3600",
                     "--retention-interval", "0.1")
    journal = Journal.from_url(redis_url)
    with contextlib.ExitStack() as running:
        sub = running.enter_context(Subscriber(comp.url, "/weather/#"))
        assert sub.connected.wait(10)
        sub.query_capabilities()
        publisher = running.enter_context(Publisher(comp.url, "feed.a", journal=journal))
        publisher.publish_many(items(0, 100))
        assert publisher.flush(30)
        assert wait_for(lambda: journal.info("feed.a").trimmed_through == 80)
        assert wait_for(lambda: sub.capabilities is not None)
    assert sub.capabilities is not None
    assert sub.capabilities.retention == 3600.0
    assert sub.capabilities.retention_count == 20
    assert journal.info("feed.a").length == 20
    journal.close()


def test_a_subscriber_away_longer_than_retention_gets_the_rest_after_unrecoverable(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    got: list[Publication] = []
    events: list[Event] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(comp.url, "/weather/#", on_publication=got.append, on_event=events.append,
                       heartbeat_interval=0.2, link_name="away")
        )
        assert sub.connected.wait(10)
        publisher = Publisher(comp.url, "feed.a", journal=journal).start()
        try:
            publisher.publish_many(items(0, 10))
            assert publisher.flush(30)
            assert wait_for(lambda: len(got) == 10)
            comp.kill()  # the subscriber is cut off; its link context dies with the component
            publisher.publish_many(items(10, 100))  # journaled, never fanned out
        finally:
            publisher.close(timeout=0.0)  # gone before the component is back
        assert journal.info("feed.a").high_water == 110
        journal.trim_through("feed.a", 90, now=0.0)  # retention while the subscriber is away
        comp.start()
        with Publisher(comp.url, "feed.a", journal=journal) as publisher:
            publisher.publish_many(items(110, 5))
            assert publisher.flush(30)
        assert wait_for(lambda: len(got) >= 35, 30), (len(got), events, sub.stats().as_dict())
    delivered = [p.source_seq for p in got]
    assert delivered == list(range(1, 11)) + list(range(91, 116))
    lost = [e for e in events if isinstance(e, Unrecoverable)]
    assert lost == [Unrecoverable(source="feed.a", after=10, reason="trimmed")]
    journal.close()
