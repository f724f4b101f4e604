"""A trimmed range names the items it held (issue 27; journal/trimsummary.py): over real
processes (a private redis-server, ``seqrepair serve --retain-count``, library clients), a
durable subscriber away while retention trims comes back: its ``Unrecoverable`` names exactly
the items of the trimmed numbers it may see (its pattern, its grant), and with
``resync_on_unrecoverable`` it gets just those images, then the stream goes on exactly after
them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.events import Unrecoverable
from seqrepair.core.snapshot import ImageResynced
from seqrepair.journal.journal import Journal
from seqrepair.journal.trimsummary import trimmed_items

from .conftest import ComponentProcess, wait_for
from .test_images import App

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SEEN = ["/weather/wind/LEMD", "/weather/wind/EGLL", "/weather/temp/LEMD"]
HIDDEN_TOKEN = "/weather/rain/LFPG"  # published under a token the subscriber lacks
OUTSIDE = "/news/x"  # outside its pattern
LATER = "/weather/snow/KJFK"  # first published after the subscriber left


def batch(first: int, n: int, topics: list[str]) -> list[tuple[str, dict[str, Any], str,
                                                              str | None]]:
    return [(topic, {"n": i}, "update", "t2" if topic == HIDDEN_TOKEN else None)
            for i in range(first, first + n) for topic in [topics[i % len(topics)]]]


def test_a_trimmed_range_names_the_items_the_subscriber_may_see_and_resyncs_just_those(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    comp = component("--heartbeat", "0.2", "--retain-count", "30",
                     "--retention-interval", "0.3")
    app = App()

    def subscriber() -> Subscriber:
        return Subscriber(comp.url, "/weather/#", on_publication=app.publication,
                          on_image=app.image, on_event=app.events.append, link_name="away",
                          durable=True, heartbeat_interval=0.2,
                          resync_on_unrecoverable=True).start()

    with Journal.from_url(redis_url) as journal:
        sub = subscriber()
        assert sub.wait_connected(20)
        with Publisher(comp.url, "feed.a") as publisher:
            publisher.publish_many(batch(1, 10, SEEN))
            assert publisher.flush(30)
        assert wait_for(lambda: len(app.delivered) == 10, 30)
        time.sleep(1.0)  # its ACKs reach the component: its position is 10
        sub.stop()
        with Publisher(comp.url, "feed.a", start_after=10) as publisher:
            publisher.publish_many(batch(11, 90, [*SEEN, HIDDEN_TOKEN, OUTSIDE]))
            publisher.publish_many(batch(101, 40, [LATER, *SEEN]))
            assert publisher.flush(30)
        assert wait_for(lambda: journal.info("feed.a").trimmed_through >= 110, 30), (
            journal.info("feed.a"), comp.log_text()[-2000:])
        trimmed = journal.info("feed.a").trimmed_through
        # the summary knows every item of 11..trimmed (the hidden and outside ones too)
        assert {t for t, _ in trimmed_items(journal, "feed.a", 11, trimmed) or ()} == {
            *SEEN, HIDDEN_TOKEN, OUTSIDE, LATER}
        again = subscriber()
        assert wait_for(lambda: any(isinstance(e, ImageResynced) for e in app.events), 30), (
            app.events, comp.log_text()[-3000:])
        with Publisher(comp.url, "feed.a", start_after=140) as publisher:
            publisher.publish_many(batch(141, 5, SEEN))
            assert publisher.flush(30)
        assert wait_for(lambda: app.delivered[-1].source_seq == 145, 30), (
            [p.source_seq for p in app.delivered], app.events)
        again.stop()
    lost = [e for e in app.events if isinstance(e, Unrecoverable)]
    assert len(lost) == 1, lost
    assert lost[0].source == "feed.a"
    assert lost[0].reason == "trimmed"
    # exactly the trimmed items it may see: not the token it lacks, not outside its pattern
    assert lost[0].items == tuple(sorted({*SEEN, LATER}))
    [resync] = [e for e in app.events if isinstance(e, ImageResynced)]
    assert resync.request.topics == tuple(sorted({*SEEN, LATER}))
    assert resync.request.patterns == ()
    as_of = resync.as_of["feed.a"]
    assert as_of >= 140
    assert {p.topic for p in app.images} == {*SEEN, LATER}
    assert all(p.source_seq <= as_of for p in app.images)
    # after the images: exactly what followed as_of, once, in order
    last_image = max(i for i, (kind, _p) in enumerate(app.order) if kind == "image")
    after = [p.source_seq for kind, p in app.order[last_image + 1:] if kind == "pub"]
    assert after == list(range(as_of + 1, 146))
    assert all(p.topic not in (HIDDEN_TOKEN, OUTSIDE) for p in app.delivered + app.images)
