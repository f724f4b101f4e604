"""Image requests at a relay (issue 27 audit). A request naming no source is answered
upstream: the relay's journal knows only the sources that sent it something since it
subscribed. An image a relay fetches from its upstream carries nothing of what the asking subscriber
may not see (issue 27 audit): the upstream answers the fetch link with the relay's own grant
less what the link narrowed, so its ``IMAGE-COMPLETE`` may name items and sources the asking
link's full entitlement (its deny exceptions) hides. Over real processes: ``seqrepair serve``
A granting every token and trimming, ``seqrepair relay`` B denying ``secret`` to its
subscribers; a subscriber of B asks for the image of ``/w/#``."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.journal import Journal

from .conftest import ComponentProcess, wait_for
from .test_images import App
from .test_relay import RelayProcess

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

FAST = ("--heartbeat", "0.2")
SECRET = "/w/s/1"


def test_a_fresh_relay_answers_an_image_of_a_pattern_with_what_upstream_holds(
    redis_pair: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis = redis_pair
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    try:
        with Publisher(a.url, "feed.a") as publisher:  # all before B subscribes
            publisher.publish_many([("/w/a/1", {"n": i}, "update", None) for i in range(5)])
            assert publisher.flush(30)
        b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", *FAST).start()
        app = App()
        sub = Subscriber(b.url, "/w/#", on_publication=app.publication, on_image=app.image,
                         on_event=app.events.append, link_name="fresh",
                         heartbeat_interval=0.2).start()
        try:
            assert sub.wait_connected(20)
            b.wait_upstream()
            sub.request_image(patterns=["/w/#"])
            assert wait_for(lambda: bool(app.resyncs()), 60), (app.events, b.log_text()[-3000:])
        finally:
            sub.stop()
            b.stop()
    finally:
        a.stop()
    [resync] = app.resyncs()
    # was: B's journal held no source, so the answer held nothing (every item "gone")
    assert resync.as_of == {"feed.a": 5}
    assert resync.topics == {"/w/a/1"}
    assert [(p.topic, dict(p.fields)) for p in app.images] == [("/w/a/1", {"n": 4})]


def test_a_fetched_image_names_no_item_or_source_the_link_may_not_see(
    redis_pair: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis = redis_pair
    a = ComponentProcess(a_redis, tmp_path, *FAST, "--default-grant", "*",
                         "--retain-count", "20", "--retention-interval", "0.2").start()
    try:
        with Publisher(a.url, "feed.a") as publisher:  # the item's base will be trimmed
            publisher.publish_many([("/w/a/1", {"n": i}, "update", None) for i in range(60)])
            publisher.publish_many([(SECRET, {"k": 1}, "update", "secret")])
            publisher.publish_many([("/w/a/1", {"n": 99}, "update", None)])
            assert publisher.flush(30)
        with Publisher(a.url, "feed.hidden") as publisher:  # a source B's links never see
            publisher.publish_many([("/w/h/1", {"k": i}, "update", "secret")
                                    for i in range(30)])
            assert publisher.flush(30)

        def trimmed() -> bool:
            with Journal.from_url(a_redis) as journal:
                return (journal.info("feed.a").trimmed_through > 0
                        and journal.info("feed.hidden").trimmed_through > 0)
        assert wait_for(trimmed, 30)
        b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#",
                         "--default-grant", "*;deny=secret", *FAST).start()
        app = App()
        sub = Subscriber(b.url, "/w/#", on_publication=app.publication, on_image=app.image,
                         on_event=app.events.append, link_name="nosecret",
                         heartbeat_interval=0.2).start()
        try:
            assert sub.wait_connected(20)
            b.wait_upstream()
            sub.request_image(patterns=["/w/#"])
            assert wait_for(lambda: bool(app.resyncs()), 60), (app.events, b.log_text()[-3000:])
        finally:
            sub.stop()
            b.stop()
    finally:
        a.stop()
    [resync] = app.resyncs()
    assert "image request answered from upstream" in b.log_text()
    assert [p.topic for p in app.images] == ["/w/a/1"]
    assert resync.topics == {"/w/a/1"}
    # nothing of the denied item: not as an image, not as a partial one
    assert SECRET not in resync.partial, resync
    assert "/w/h/1" not in resync.partial, resync
    # a source the link saw nothing of is not answered (nor its number told)
    assert set(resync.as_of) == {"feed.a"}, resync
