"""Image requests over real processes (WIRE.md "Image requests"): a private redis-server, the
component as ``seqrepair serve``, library subscribers and publishers.

The application in these tests keeps an :class:`ImageCache` fed with what it is delivered and
the images it is given, in order: the check is that it ends equal to the cache of the whole
journal (the exact current image), with every publication after an image delivered once, in
order, and nothing outside the subscriber's entitlement ever given to it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.respann import RESPONSE_TARGET
from seqrepair.amqp.wire.technical import MESSAGE_TYPE
from seqrepair.core.events import Event, Unrecoverable
from seqrepair.core.image import ImageCache
from seqrepair.core.messages import Publication
from seqrepair.core.snapshot import ImageResynced
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .principals import MISSING, amqp_identity, client_security, serve_args
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

TOPICS = ["/weather/wind/LEMD", "/weather/wind/EGLL", "/weather/temp/LEMD", "/weather/rain/LFPG"]


def items(first: int, n: int) -> list[tuple[str, dict[str, Any], str]]:
    """A mix of images, updates, corrections and drops over four items."""
    out: list[tuple[str, dict[str, Any], str]] = []
    for i in range(first, first + n):
        topic = TOPICS[i % len(TOPICS)]
        if i % 17 == 0:
            out.append((topic, {}, "drop"))
        elif i % 7 == 0:
            out.append((topic, {"speed": i, "dir": i % 360, "note": None}, "image"))
        elif i % 5 == 0:
            out.append((topic, {"dir": -i}, "correction"))
        else:
            out.append((topic, {f"f{i % 3}": i}, "update"))
    return out


class App:
    """What an application does with a subscriber: an ImageCache fed in delivery order."""

    def __init__(self) -> None:
        self.cache = ImageCache()
        self.delivered: list[Publication] = []
        self.images: list[Publication] = []
        self.order: list[tuple[str, Publication]] = []
        self.events: list[Event] = []

    def publication(self, pub: Publication) -> None:
        self.delivered.append(pub)
        self.order.append(("pub", pub))
        self.cache.apply(pub)

    def image(self, pub: Publication) -> None:
        self.images.append(pub)
        self.order.append(("image", pub))
        self.cache.apply(pub)

    def resyncs(self) -> list[ImageResynced]:
        return [e for e in self.events if isinstance(e, ImageResynced)]


def image_of(pubs: list[Publication]) -> dict[str, dict[str, Any]]:
    cache = ImageCache()
    for pub in pubs:
        cache.apply(pub)
    return cache.snapshot()


def after_last_image(app: App) -> list[int]:
    last = max(i for i, (kind, _) in enumerate(app.order) if kind == "image")
    return [p.source_seq for kind, p in app.order[last + 1:] if kind == "pub"]


def test_resync_on_unrecoverable_brings_the_exact_image_and_the_stream_goes_on(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    """The journal is trimmed while the subscriber is away, so its gap is unrecoverable;
    ``resync_on_unrecoverable`` asks for the images of the source's items: the application's
    cache becomes the journal's, and what is published next is delivered once, in order,
    right after the images."""
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    app = App()
    with contextlib.ExitStack() as running:
        sub = running.enter_context(Subscriber(
            comp.url, "/weather/#", on_publication=app.publication, on_image=app.image,
            on_event=app.events.append, heartbeat_interval=0.2, link_name="away",
            resync_on_unrecoverable=True))
        assert sub.connected.wait(10)
        publisher = Publisher(comp.url, "feed.a", journal=journal).start()
        try:
            published = publisher.publish_many(items(1, 10))
            assert publisher.flush(30)
            assert wait_for(lambda: len(app.delivered) == 10)
            comp.kill()  # its link context dies with it
            published += publisher.publish_many(items(11, 100))  # journaled, never fanned out
        finally:
            publisher.close(timeout=0.0)
        journal.trim_through("feed.a", 90, now=0.0)  # the gap 11..90 is gone for good
        comp.start()
        assert wait_for(lambda: app.resyncs(), 30), (app.events, sub.stats().as_dict())
        # every item of feed.a the link may see is held as of 110: that is its position now
        assert sub.taken.position.get("feed.a") == 110
        with Publisher(comp.url, "feed.a", journal=journal) as publisher:
            published += publisher.publish_many(items(111, 20))
            assert publisher.flush(30)
        assert wait_for(lambda: app.delivered and app.delivered[-1].source_seq == 130, 30), (
            [p.source_seq for p in app.delivered], app.events)
    lost = [e for e in app.events if isinstance(e, Unrecoverable)]
    assert lost == [Unrecoverable(source="feed.a", after=10, reason="trimmed", items=None)]
    [resync] = app.resyncs()
    assert resync.request.patterns == ("/#",)
    assert resync.request.sources == ("feed.a",)
    as_of = resync.as_of["feed.a"]
    assert as_of == 110  # the journal's high-water when asked
    assert all(p.source_seq == as_of and p.retransmit for p in app.images)
    assert {p.topic for p in app.images} == set(TOPICS) == resync.topics
    # after the images: exactly what followed them, once, in order
    assert after_last_image(app) == list(range(as_of + 1, 131))
    seqs = [p.source_seq for p in app.delivered]
    assert seqs == sorted(set(seqs))
    assert seqs[:10] == list(range(1, 11))
    assert [p.source_seq for p in published] == list(range(1, 131))
    assert app.cache.snapshot() == image_of(published)
    assert sub.taken.position.get("feed.a", 0) == 130
    journal.close()


@pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")
def test_image_by_pattern_gives_only_what_the_subscriber_may_see(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    """Alice asks for the images of every item (``/#``): she gets those of her subscription
    and grant, never bob's topics nor a publication whose token she lacks."""
    policy = tmp_path / "policy.toml"
    policy.write_text("""
[[allow]]
actors = ["*@example.com"]
operations = ["publish", "subscribe"]
topics = ["/#"]

[[deny]]
actors = ["alice@example.com"]
operations = ["subscribe"]
topics = ["/weather/secret/#"]
""")
    comp = component("--heartbeat", "0.2", *serve_args(tmp_path, "alice@example.com",
                                                       "bob@example.com"),
                     "--policy", str(policy), "--grant", "alice@example.com=gold",
                     "--grant", "bob@example.com=*")
    journal = Journal.from_url(redis_url)
    with Publisher(comp.url, "feed.b", journal=journal,
                   security=client_security("bob@example.com")) as publisher:
        publisher.publish_many([
            ("/weather/wind/LEMD", {"speed": 1, "dir": 2}, "image"),
            ("/weather/secret/X", {"code": "bob's"}, "image"),
            ("/elsewhere/Y", {"v": 1}, "image"),
            ("/weather/wind/LEMD", {"speed": 3}, "update"),
        ])
        publisher.publish("/weather/wind/LEMD", {"dir": 99}, "correction", permtoken="platinum")
        publisher.publish("/weather/temp/LEMD", {"c": 20}, "image", permtoken="gold")
        publisher.publish("/weather/rain/LEMD", {"mm": 5}, "image", permtoken="platinum")
        assert publisher.flush(30)
    app = App()
    with Subscriber(comp.url, "/weather/#", on_publication=app.publication, on_image=app.image,
                    on_event=app.events.append, heartbeat_interval=0.2,
                    security=client_security("alice@example.com")) as sub:
        assert sub.connected.wait(10)
        sub.request_image(patterns=["/#"])
        assert wait_for(lambda: app.resyncs(), 30), app.events
    images = {p.topic: dict(p.fields) for p in app.images}
    assert images == {"/weather/wind/LEMD": {"speed": 3, "dir": 2},
                      "/weather/temp/LEMD": {"c": 20}}
    [resync] = app.resyncs()
    assert dict(resync.as_of) == {"feed.b": 7}
    assert resync.partial == ()
    journal.close()


def _request(url: str, link: str, message: Message, **identity: Any) -> Any:
    """Send ``message`` to ``$seqrepair`` as a request about ``link``; the outcome."""
    conn = BlockingConnection(url, timeout=10, **identity)
    try:
        conn.create_receiver("/weather/#", name=link, credit=10)
        sender = conn.create_sender("$seqrepair")
        message.reply_to = f"$link/{link}"
        message.properties = {**(message.properties or {}), "link": link}
        delivery = sender.send(message, error_states=[])
        return delivery.remote_state, delivery.remote.condition
    finally:
        conn.close()


@pytest.mark.parametrize(("body", "condition"), [
    (None, "amqp:decode-error"),  # no body
    ("topics", "amqp:decode-error"),  # not a map
    ({}, "amqp:decode-error"),  # names nothing
    ({"topics": "/a"}, "amqp:decode-error"),  # a string, not a list
    ({"topics": ["not a topic"]}, "amqp:decode-error"),
    ({"patterns": ["/wi*d"]}, "amqp:decode-error"),
    ({"topics": [f"/t/{i}" for i in range(257)]}, "amqp:decode-error"),  # too many
    ({"patterns": ["/#"], "sources": [7]}, "amqp:decode-error"),
])
def test_malformed_snapshot_requests_get_a_typed_error(
    component: Callable[..., ComponentProcess], body: Any, condition: str
) -> None:
    comp = component("--heartbeat", "0.2")
    state, cond = _request(comp.url, uuid.uuid4().hex,
                           Message(body=body, properties={MESSAGE_TYPE: "SNAPSHOT"}),
                           **amqp_identity("anonymous"))
    assert cond is not None, state
    assert cond.name == condition


def test_a_snapshot_about_another_connections_link_is_refused(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    with Subscriber(comp.url, "/weather/#", link_name="theirs") as sub:
        assert sub.connected.wait(10)
        conn = BlockingConnection(comp.url, timeout=10, **amqp_identity("anonymous"))
        try:
            sender = conn.create_sender("$seqrepair")
            delivery = sender.send(error_states=[], msg=Message(body={"patterns": ["/#"]},
                                           properties={MESSAGE_TYPE: "SNAPSHOT",
                                                       "link": "theirs"}))
            assert delivery.remote.condition is not None
            assert delivery.remote.condition.name == "amqp:not-found"
        finally:
            conn.close()
        assert sub.connected.is_set()  # the owner's link goes on


def test_request_image_mid_stream_covers_exactly_what_it_holds(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    """A publisher keeps publishing while the subscriber asks for every item's image: what
    the link carried before the images is at or below their number, what comes after them is
    delivered exactly from the number after it, and the application's cache ends equal to the
    whole stream's."""
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    app = App()
    published: list[Publication] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(Subscriber(
            comp.url, "/weather/#", on_publication=app.publication, on_image=app.image,
            on_event=app.events.append, heartbeat_interval=0.2, credit=20))
        assert sub.connected.wait(10)
        publisher = running.enter_context(Publisher(comp.url, "feed.m", journal=journal))
        asked = False
        for first in range(1, 2001, 50):
            published += publisher.publish_many(items(first, 50))
            if not asked and len(app.delivered) >= 200:
                sub.request_image(patterns=["/weather/#"])
                asked = True
            publisher.flush(30)
        assert asked
        assert wait_for(lambda: app.resyncs() and app.delivered
                        and app.delivered[-1].source_seq == 2000, 60), sub.stats().as_dict()
    [resync] = app.resyncs()
    as_of = resync.as_of["feed.m"]
    first_image = min(i for i, (kind, _) in enumerate(app.order) if kind == "image")
    before = [p.source_seq for kind, p in app.order[:first_image] if kind == "pub"]
    assert before == list(range(1, len(before) + 1))
    assert before[-1] <= as_of
    assert after_last_image(app) == list(range(as_of + 1, 2001))
    assert sub.stats().image_covered == as_of - len(before)
    assert app.cache.snapshot() == image_of(published)
    journal.close()


@pytest.mark.parametrize("mode", [("--rewrite",), ()], ids=["rewrite", "annotations"])
def test_an_image_request_through_a_gateway(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path,
    mode: tuple[str, ...],
) -> None:
    """Behind a gateway the request names the relayed data link (a gateway that routes other
    answers by response annotations rewrites a SNAPSHOT), so the images come on it, in order
    with the stream, and the subscriber takes them."""
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    app = App()
    with gateway_process(comp.url, tmp_path, ("--allow-anonymous", *mode)) as listen:
        with Publisher(comp.url, "feed.g", journal=journal) as publisher:
            published = publisher.publish_many(items(1, 40))
            assert publisher.flush(30)
        with Subscriber(listen, "/weather/#", on_publication=app.publication,
                        on_image=app.image, on_event=app.events.append,
                        heartbeat_interval=0.2) as sub:
            assert sub.connected.wait(10)
            sub.request_image(patterns=["/#"])
            assert wait_for(lambda: app.resyncs(), 30), app.events
    assert app.cache.snapshot() == image_of(published)
    assert {p.source_seq for p in app.images} == {40}
    journal.close()


def test_a_snapshot_routed_elsewhere_is_refused_and_the_link_goes_on(
    component: Callable[..., ComponentProcess],
) -> None:
    """Answers routed by response annotations could be overtaken by the link's live frames:
    the request is refused ``amqp:not-implemented``, and a plain one on the same connection is
    then answered."""
    comp = component("--heartbeat", "0.2")
    link = uuid.uuid4().hex
    conn = BlockingConnection(comp.url, timeout=10, **amqp_identity("anonymous"))
    try:
        receiver = conn.create_receiver("/weather/#", name=link, credit=50)
        sender = conn.create_sender("$seqrepair")
        routed = Message(body={"patterns": ["/#"]}, instructions={RESPONSE_TARGET: "elsewhere"},
                         properties={MESSAGE_TYPE: "SNAPSHOT", "link": link})
        delivery = sender.send(routed, error_states=[])
        assert delivery.remote.condition is not None
        assert delivery.remote.condition.name == "amqp:not-implemented"
        plain = Message(body={"patterns": ["/#"]}, id=1, reply_to=f"$link/{link}",
                        properties={MESSAGE_TYPE: "SNAPSHOT", "link": link, "request_id": 7})
        assert sender.send(plain, error_states=[]).remote.condition is None
        while True:  # heartbeats, then the answer: nothing journaled, so only IMAGE-COMPLETE
            message = receiver.receive(timeout=10)  # pre-settled: nothing to accept
            if message.properties.get(MESSAGE_TYPE) == "IMAGE-COMPLETE":
                break
        assert message.correlation_id == 1
        assert message.properties["request_id"] == 7
        assert message.body == {"as_of": {}}
    finally:
        conn.close()


def test_image_answers_in_progress_are_bounded_per_connection(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    """A peer that asks and never reads (no credit) holds at most four answers in progress:
    the fifth request is refused ``amqp:resource-limit-exceeded`` and nothing else changes."""
    comp = component("--heartbeat", "0.2")
    journal = Journal.from_url(redis_url)
    with Publisher(comp.url, "feed.l", journal=journal) as publisher:
        publisher.publish_many(items(1, 20))
        assert publisher.flush(30)
    link = uuid.uuid4().hex
    conn = BlockingConnection(comp.url, timeout=10, **amqp_identity("anonymous"))
    try:
        conn.create_receiver("/weather/#", name=link, credit=0)
        sender = conn.create_sender("$seqrepair")
        outcomes = []
        for i in range(5):
            asked = Message(body={"patterns": ["/#"]}, id=i, reply_to=f"$link/{link}",
                            properties={MESSAGE_TYPE: "SNAPSHOT", "link": link})
            condition = sender.send(asked, error_states=[]).remote.condition
            outcomes.append(None if condition is None else condition.name)
        assert outcomes == [None] * 4 + ["amqp:resource-limit-exceeded"]
    finally:
        conn.close()
    journal.close()
