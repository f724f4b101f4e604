"""A relay's journal appends run off its event loop (issue 27; relay/journaler.py): over real
processes (``seqrepair serve`` A, ``seqrepair relay`` B, each with its own redis-server), B's
redis-server goes away while publications come: B tries the append again until its Redis is
back, fans out nothing it has not journaled, and its subscriber gets every publication of its
selection once, in order; B's journal then holds exactly A's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal import EmbeddedRedis, Journal

from .conftest import ComponentProcess, wait_for
from .test_relay import RelayProcess, expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_a_relay_whose_redis_goes_away_journals_in_order_once_it_is_back(
    tmp_path: Path
) -> None:
    a_redis = EmbeddedRedis(appendfsync="always").start()
    b_redis = EmbeddedRedis(tmp_path / "b-redis", appendfsync="always").start()
    a = ComponentProcess(a_redis.url, tmp_path, "--heartbeat", "0.2").start()
    b = RelayProcess(b_redis.url, tmp_path, a.url, "B", "--subscribe", "/w/#",
                     "--heartbeat", "0.2").start()
    got: list[Publication] = []
    sub = Subscriber(b.url, "/w/#", on_publication=got.append, heartbeat_interval=0.2,
                     max_reconnect_delay=0.5).start()
    try:
        assert sub.wait_connected(20)
        b.wait_upstream()
        publish(a.url, "feed.a", 200)
        assert wait_for(lambda: len(got) >= len(expected(a_redis.url, "feed.a", "/w/#")), 30)
        b_redis.stop()  # its data dir is kept: the same journal when it is back
        publish(a.url, "feed.a", 200, after=200)  # B receives them, cannot journal them
        assert wait_for(lambda: "not journaled yet: tried again" in b.log_text(), 30), (
            b.log_text()[-3000:])
        held = len(got)
        time.sleep(1.0)
        assert len(got) == held  # nothing fanned out that no journal holds
        b_redis.start()
        publish(a.url, "feed.a", 100, after=400)
        want = expected(a_redis.url, "feed.a", "/w/#")
        assert wait_for(lambda: len(got) >= len(want), 60), (len(got), len(want),
                                                             b.log_text()[-3000:])
        time.sleep(0.5)  # nothing more may come
    finally:
        sub.stop()
        b.stop()
        a.stop()
    try:
        assert [(p.topic, p.source_seq) for p in got] == want
        assert not sub.unrecoverable
        assert "journaled after all" in b.log_text()
        with Journal.from_url(b_redis.url) as journal:
            assert [(p.topic, p.source_seq) for p in journal.read_range("feed.a", 1, 500)] \
                == want
    finally:
        b_redis.stop()
        a_redis.stop()
