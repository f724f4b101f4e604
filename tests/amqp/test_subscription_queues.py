"""Subscriptions managed at run time, seen from a subscriber attached to their queue.

A subscription made through the manager (the REST API's back end) is a queue,
``/subscriptions/<id>``, that delivers what its topic and filters select, exactly once and in
order, repairs included; pausing it stops live delivery (heartbeats go on) and resuming it
repairs the pause by source; changing what it selects re-attaches its subscribers under the new
selection; deleting it stops them with ``amqp:not-found``.

Real parts only: a real redis-server, the component in a thread of the test, publisher and
subscribers over proton on loopback. No timed assertions: every wait is a generous deadline;
"nothing arrives" is checked over a settle time after something later did arrive elsewhere.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.events import Event, HeartbeatOverdue, LinkReset
from seqrepair.core.filters import passes
from seqrepair.core.messages import Publication
from seqrepair.core.subscriptions import Subscription
from seqrepair.journal.journal import Journal
from seqrepair.rest.manager import SubscriptionManager

from .conftest import wait_for
from .inthread import HereComponent

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

TOPICS = ("/weather/wind/LEMD", "/weather/rain/LEMD", "/weather/wind/LFPG", "/traffic/LEMD")
PTYPES = ("update", "update", "correction", "image")

Row = tuple[str, dict[str, Any], str, str | None]

LEMD_UPDATES = {
    "topic": "/weather/#",
    "filters": [
        {"dialect": "basic", "type": "suffix", "property": "subject", "value": "/LEMD"},
        {"dialect": "basic", "type": "exact", "property": "type", "value": "update"},
    ],
}


def rows(first: int, n: int) -> list[Row]:
    """Publications over four topics and three publish types, numbered in their fields."""
    return [(TOPICS[i % 4], {"n": i}, PTYPES[(i // 4) % 4], None)
            for i in range(first, first + n)]


class Journaled:
    """A journaling publisher of source ``feed.s`` and the publications it was given."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.published: list[Row] = []

    def publish(self, n: int) -> None:
        batch = rows(len(self.published), n)
        self.published.extend(batch)
        self.publisher.publish_many(batch)
        assert self.publisher.flush(30)

    def selected(self, sub: Subscription, since: int = 0) -> list[int]:
        """The source numbers ``sub`` selects among what was published from ``since`` on."""
        return [
            i + 1 for i, (topic, fields, ptype, _) in enumerate(self.published)
            if i >= since and sub.topic.matches(topic) and passes(sub.filters, Publication(
                topic=topic, source="feed.s", source_seq=i + 1, ptype=ptype, fields=fields))
        ]


class Receiving:
    """A subscriber on a queue, what it delivered (source numbers) and its stub's events."""

    def __init__(self, url: str, address: str, name: str) -> None:
        self.got: list[int] = []
        self.events: list[Event] = []
        self.sub = Subscriber(url, address, link_name=name, heartbeat_interval=0.2,
                              on_publication=lambda p: self.got.append(p.source_seq),
                              on_event=self.events.append)

    def of(self, kind: type[Event]) -> list[Event]:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture
def manager() -> SubscriptionManager:
    return SubscriptionManager()


@contextlib.contextmanager
def running(
    here: Callable[..., HereComponent], redis_url: str, manager: SubscriptionManager,
    queues: dict[str, str], **settings: Any,
) -> Iterator[tuple[HereComponent, Journaled, dict[str, Receiving]]]:
    """The component, a subscriber per ``queues`` entry (name -> address) and a publisher."""
    comp = here(subscriptions=manager, **settings)
    with contextlib.ExitStack() as stack:
        receiving = {name: Receiving(comp.here_url, address, name)
                     for name, address in queues.items()}
        for r in receiving.values():
            stack.enter_context(r.sub)
            assert r.sub.connected.wait(20)
        publisher = stack.enter_context(
            Publisher(comp.here_url, "feed.s", journal=Journal.from_url(redis_url))
        )
        yield comp, Journaled(publisher), receiving


def test_a_filtered_subscription_delivers_exactly_what_it_selects_through_losses(
    here: Callable[..., HereComponent], redis_url: str, manager: SubscriptionManager
) -> None:
    lemd = manager.create(dict(LEMD_UPDATES, id="lemd"))
    with running(here, redis_url, manager,
                 {"lemd": lemd.queue, "all": "/weather/#"},
                 drop_rate=0.05, drop_seed=11) as (_comp, feed, r):
        feed.publish(800)
        wanted = feed.selected(lemd)
        everything = [i + 1 for i, row in enumerate(feed.published)
                      if row[0].startswith("/weather/")]
        assert 100 < len(wanted) < len(everything)
        assert wait_for(lambda: len(r["lemd"].got) >= len(wanted)
                        and len(r["all"].got) >= len(everything), 60)
        time.sleep(0.5)  # a duplicate or a leak would arrive now
    assert r["lemd"].got == wanted, r["lemd"].sub.stats()
    assert r["all"].got == everything
    assert r["lemd"].sub.stats().repaired > 0  # losses were repaired, through the filters
    assert r["lemd"].sub.stats().unrecoverable == 0


def test_a_paused_subscription_sends_nothing_new_and_its_resume_repairs_the_pause(
    here: Callable[..., HereComponent], redis_url: str, manager: SubscriptionManager
) -> None:
    wx = manager.create({"id": "wx", "topic": "/weather/wind/*"})
    with running(here, redis_url, manager,
                 {"paused": wx.queue, "witness": "/weather/wind/*"}) as (_comp, feed, r):
        feed.publish(200)
        assert wait_for(lambda: len(r["paused"].got) == len(feed.selected(wx)), 30)

        paused = manager.update("wx", dict(wx.to_json(), subscription_status="PAUSED"))
        assert paused.paused
        assert wait_for(lambda: r["paused"].sub.stats().paused == 1, 10)
        before = len(r["paused"].got)
        feed.publish(200)
        assert wait_for(lambda: len(r["witness"].got) == len(feed.selected(wx)), 30)
        # heartbeats go on while it is paused (five come, 0.2 s apart): it stays quiet and up.
        # An overdue is not counted against it: the component is a thread of this process,
        # and a loaded machine's stall of 0.6 s makes one; a link left silent misses these
        beats = r["paused"].sub.stub.stats.heartbeats
        assert wait_for(lambda: r["paused"].sub.stub.stats.heartbeats >= beats + 5, 20), (
            r["paused"].sub.stats(), r["paused"].of(HeartbeatOverdue))
        assert len(r["paused"].got) == before
        assert r["paused"].sub.stats().disconnections == 0

        manager.update("wx", dict(wx.to_json(), subscription_status="ACTIVE"))
        feed.publish(100)
        assert wait_for(lambda: len(r["paused"].got) >= len(feed.selected(wx)), 30)
        time.sleep(0.5)
    assert r["paused"].got == feed.selected(wx)
    assert len(r["paused"].of(LinkReset)) == 1  # the resume started the link again at 0
    assert r["paused"].sub.stats().unrecoverable == 0


def test_a_subscription_made_paused_sends_only_after_it_is_resumed(
    here: Callable[..., HereComponent], redis_url: str, manager: SubscriptionManager
) -> None:
    quiet = manager.create({"id": "quiet", "topic": "/traffic/#",
                            "subscription_status": "PAUSED"})
    with running(here, redis_url, manager,
                 {"quiet": quiet.queue, "witness": "/traffic/#"}) as (_comp, feed, r):
        feed.publish(120)
        assert wait_for(lambda: len(r["witness"].got) == len(feed.selected(quiet)), 30)
        time.sleep(0.5)
        assert r["quiet"].got == []
        manager.update("quiet", {"topic": "/traffic/#"})  # ACTIVE by default
        assert wait_for(lambda: len(r["quiet"].got) >= len(feed.selected(quiet)), 30)
        time.sleep(0.5)
    assert r["quiet"].got == feed.selected(quiet)


def test_changing_what_a_subscription_selects_reattaches_its_subscriber_under_the_new_filters(
    here: Callable[..., HereComponent], redis_url: str, manager: SubscriptionManager
) -> None:
    wide = manager.create({"id": "moving", "topic": "/weather/#"})
    with running(here, redis_url, manager, {"moving": wide.queue}) as (_comp, feed, r):
        feed.publish(200)
        first = feed.selected(wide)
        assert wait_for(lambda: len(r["moving"].got) == len(first), 30)

        narrow = manager.update("moving", dict(LEMD_UPDATES))
        assert wait_for(lambda: r["moving"].sub.stats().connections == 2, 20)
        feed.publish(200)
        then = feed.selected(narrow, since=200)
        assert wait_for(lambda: len(r["moving"].got) >= len(first) + len(then), 30)
        time.sleep(0.5)
    assert r["moving"].got == first + then
    assert r["moving"].sub.error is None
    assert r["moving"].sub.stats().unrecoverable == 0


def test_deleting_a_subscription_stops_its_subscriber_and_its_queue_is_gone(
    here: Callable[..., HereComponent], redis_url: str, manager: SubscriptionManager
) -> None:
    gone = manager.create({"id": "gone", "topic": "/weather/#"})
    with running(here, redis_url, manager, {"gone": gone.queue}) as (comp, feed, r):
        feed.publish(40)
        assert wait_for(lambda: len(r["gone"].got) == len(feed.selected(gone)), 30)
        manager.delete("gone")
        assert wait_for(lambda: r["gone"].sub.error is not None, 20)
        assert "amqp:not-found" in str(r["gone"].sub.error)
        assert comp.call(lambda: [link.address for link in comp.links.values()]) == []

        late = Subscriber(comp.here_url, gone.queue, link_name="late")
        with late:
            assert wait_for(lambda: late.error is not None, 20)
        assert "amqp:not-found" in str(late.error)
