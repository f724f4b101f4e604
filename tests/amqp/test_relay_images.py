"""Image requests a relay's journal cannot answer come from its upstream (issue 27;
relay/imagefetch.py): over real processes (``seqrepair serve`` A, ``seqrepair relay`` B, each
with its own redis-server), B narrowed to ``/w/a/*``, then a subscriber on ``/w/#`` asks B for
the image of an item B never selected: it gets A's current image, marked with A's ``as_of``,
and the stream goes on exactly after it; the fetch link asked with the subscriber's grant."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.snapshot import ImageOutdated, ImageResynced
from seqrepair.journal import Journal

from .conftest import ComponentProcess, wait_for
from .test_images import App, image_of
from .test_relay import RelayProcess, expected, publish, selections

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

FAST = ("--heartbeat", "0.2")
ITEM = "/w/b/2"  # publish() puts every fifth publication on it


def _resynced_with_images(events: list[object]) -> list[ImageResynced]:
    """The resyncs that delivered an image (an outdated answer's resync delivered none)."""
    return [e for e in events if isinstance(e, ImageResynced) and e.topics]


def test_an_image_of_an_item_the_relay_never_selected_comes_from_upstream(
    redis_pair: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis = redis_pair
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--aggregate", "--linger", "0.3",
                     "--context-retention", "0.3", *FAST).start()
    stays: list[object] = []
    app = App()
    keeper = Subscriber(b.url, "/w/a/*", on_publication=stays.append, link_name="stays",
                        heartbeat_interval=0.2).start()
    try:
        assert keeper.wait_connected(20)
        assert wait_for(lambda: selections(b.log_text())[-1:] == ["['/w/a/*'] []"], 20)
        b.wait_upstream()
        with Publisher(a.url, "feed.a") as publisher:  # a field set once, at number 1
            publisher.publish_many([(ITEM, {"early": "only here"}, "update", None)])
            assert publisher.flush(30)
        publish(a.url, "feed.a", 300, after=1)  # B journals /w/a/* of it; ITEM never
        assert wait_for(lambda: len(stays) >= len(expected(a_redis, "feed.a", "/w/a/*")), 30)
        with Journal.from_url(b_redis) as journal:
            assert not [p for p in journal.read_range("feed.a", 1, 301) if p.topic == ITEM]
        wide = Subscriber(b.url, "/w/#", on_publication=app.publication, on_image=app.image,
                          on_event=app.events.append, link_name="wide",
                          heartbeat_interval=0.2).start()  # B widens for it
        assert wide.wait_connected(30)
        more = threading.Thread(target=publish, args=(a.url, "feed.a", 300),
                                kwargs={"after": 301, "pace": 0.05})
        more.start()
        assert wait_for(lambda: bool(app.delivered), 30)
        wide.request_image(topics=[ITEM])  # while the stream goes on
        more.join()
        want = expected(a_redis, "feed.a", "/w/#")
        assert wait_for(lambda: bool(_resynced_with_images(app.events))
                        and app.delivered[-1].source_seq >= want[-1][1], 60), (
            app.events, b.log_text()[-3000:])
        time.sleep(0.5)
        wide.stop()
    finally:
        keeper.stop()
        b.stop()
        a.stop()
    [resync] = _resynced_with_images(app.events)
    # an answer the stream overtook (its as_of below a number of feed.a already delivered) is
    # not delivered: ImageOutdated, asked again (a loaded machine delays the fetch from A);
    # each such ask ends in a resync that delivered nothing
    outdated = [e for e in app.events if isinstance(e, ImageOutdated)]
    assert len([e for e in app.events if isinstance(e, ImageResynced)]) == 1 + len(outdated)
    as_of = resync.as_of["feed.a"]
    with Journal.from_url(a_redis) as journal:
        origin = [p for p in journal.read_range("feed.a", 1, as_of) if p.topic == ITEM]
    # A's image of the item as of as_of (B never held any of it)
    [image] = app.images
    assert image.topic == ITEM
    assert image.source_seq == as_of
    assert image_of([image]) == image_of(origin)
    assert image.fields["early"] == "only here"  # B's journal never held it
    assert resync.topics == {ITEM}
    # the stream: every /w/# publication from the first delivered on, once, in order, except
    # those of the item at or below as_of that came after the image (held by it)
    at = next(i for i, (kind, _p) in enumerate(app.order) if kind == "image")
    before = [p for kind, p in app.order[:at] if kind == "pub"]
    after = [p for kind, p in app.order[at + 1:] if kind == "pub"]
    assert all(p.source_seq <= as_of for p in before)
    seen_of_item = max((p.source_seq for p in before if p.topic == ITEM), default=0)
    start = app.delivered[0].source_seq
    assert [(p.topic, p.source_seq) for p in before + after] == [
        w for w in want if w[1] >= start
        and not (w[0] == ITEM and seen_of_item < w[1] <= as_of)]
    assert [p.source_seq for p in after if p.topic == ITEM] == [
        n for t, n in want if t == ITEM and n > as_of]
    assert "image request answered from upstream" in b.log_text()
    # the fetch link asked on the subscriber's selection, not the relay's own link
    assert any("link=relay.B.fetch." in line and "topic=/w/#" in line
               for line in a.log_text().splitlines() if "link attached" in line)
