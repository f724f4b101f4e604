"""A relay marks as published before its subscription only the numbers that were (issue 27;
journal/selection.py, component/journalport.py): over real processes (``seqrepair serve`` A,
``seqrepair relay`` B, each with its own redis-server), A publishes 1..300, B subscribes
(its upstream subscription starts after 300), then A publishes 301..303 outside B's
selection and more inside it. B's journal marks 1..300 before its subscription and 301..303
not selected (they were filtered out, not missed), so a durable subscriber whose position at
B is 301 is owed nothing B lacks: with A gone it gets everything after 301 from B, no
``Unrecoverable`` (it was told 302..303 were lost: a fetch A could not answer)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.core.messages import Publication
from seqrepair.journal import Journal
from seqrepair.journal.positions import create_position, link_durable
from seqrepair.journal.selection import BEFORE_SUBSCRIPTION, NotSelected

from .conftest import ComponentProcess, wait_for
from .test_relay import RelayProcess, expected, publish
from .test_relay_fetch import FAST, durable, until_through

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_numbers_filtered_after_the_relay_subscribed_are_not_before_its_subscription(
    redises: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis, _ = redises
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b: RelayProcess | None = None
    later: list[Publication] = []
    try:
        publish(a.url, "feed.a", 300)
        b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", *FAST).start()
        b.wait_upstream()
        with Publisher(a.url, "feed.a", start_after=300) as publisher:
            publisher.publish_many([("/x/c/3", {"n": i}, "update", None) for i in range(3)])
            assert publisher.flush(30)
        publish(a.url, "feed.a", 100, after=303)
        want = [w for w in expected(a_redis, "feed.a", "/w/#") if w[1] > 301]
        assert want[0][1] == 304
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.high_water("feed.a") >= want[-1][1], 30)
            markers = [e for e in journal.iter_entries("feed.a", 1, 304)
                       if isinstance(e, NotSelected)]
        assert markers == [NotSelected("feed.a", 1, 300, BEFORE_SUBSCRIPTION),
                           NotSelected("feed.a", 301, 303, "/w/#")], markers
        a.kill()
        client = redis.Redis.from_url(b_redis)
        assert create_position(client, link_durable("wide"), {"feed.a": 301})
        client.close()
        again = durable(b.url, "/w/#", later)
        until_through(later, want, b)
        again.stop()
    finally:
        if b is not None:
            b.stop()
        a.stop()
    assert [(p.topic, p.source_seq) for p in later] == want
    assert not again.unrecoverable
