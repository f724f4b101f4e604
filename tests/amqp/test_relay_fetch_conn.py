"""A relay's fetches share one upstream connection (issue 27; relay/fetchconn.py): over real
processes (``seqrepair serve`` A, ``seqrepair relay`` B trimming its journal, each with its own
redis-server), durable subscribers far below B's trim come back one after another: each is
fetched what B lacks from A, exactly, and A sees one fetch connection (its container id
``relay.B.fetch.<tag>``) carrying all their fetch links; with A restarted between two fetches,
the same connection reconnects and the next fetch goes over it, exact again; a fetch whose
connection drops while its answer comes is asked again after what it got, exact."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import redis

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.relay.fetch import UpstreamFetch
from seqrepair.amqp.relay.fetchconn import FetchConnection
from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.journal import Journal
from seqrepair.journal.positions import create_position, link_durable

from .conftest import ComponentProcess, wait_for
from .test_relay import RelayProcess, expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

FAST = ("--heartbeat", "0.2")
FETCH_CONTAINER = re.compile(r"connection opened .*container=(relay\.B\.fetch\.[0-9a-f]+)")


def trimmed_relay(a_redis: str, b_redis: str, tmp_path: Path
                  ) -> tuple[ComponentProcess, RelayProcess]:
    """A with 1000 publications of feed.a, B on /w/# holding only the last ~20 of them."""
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--retain-count",
                     "20", "--retention-interval", "0.3", *FAST).start()
    b.wait_upstream()
    publish(a.url, "feed.a", 1000)
    with Journal.from_url(b_redis) as journal:
        assert wait_for(lambda: journal.info("feed.a").trimmed_through > 900, 30)
    return a, b


def catch_up(b: RelayProcess, b_redis: str, a_redis: str, name: str, after: int,
             pattern: str = "/w/#") -> None:
    """A durable subscriber of B at ``after`` (far below B's trim) gets exactly ``pattern``
    after it, once, in order, nothing Unrecoverable."""
    client = redis.Redis.from_url(b_redis)
    assert create_position(client, link_durable(name), {"feed.a": after})
    client.close()
    got: list[Publication] = []
    want = [w for w in expected(a_redis, "feed.a", pattern) if w[1] > after]
    sub = Subscriber(b.url, pattern, on_publication=got.append, link_name=name, durable=True,
                     heartbeat_interval=0.2, max_reconnect_delay=0.5).start()
    try:
        assert wait_for(lambda: len(got) >= len(want), 60), (len(got), len(want),
                                                              b.log_text()[-3000:])
        time.sleep(0.5)  # nothing more may come
    finally:
        sub.stop()
    assert [(p.topic, p.source_seq) for p in got] == want
    assert not sub.unrecoverable


def fetch_links(log: str) -> list[str]:
    return re.findall(r"link attached .*link=(relay\.B\.fetch\.\S+)", log)


def test_several_fetches_go_over_one_upstream_connection(
    redis_pair: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis = redis_pair
    a, b = trimmed_relay(a_redis, b_redis, tmp_path)
    try:
        for i, (after, pattern) in enumerate([(10, "/w/#"), (200, "/w/a/*"), (500, "/w/#")]):
            catch_up(b, b_redis, a_redis, f"one{i}", after, pattern)
        a_log, b_log = a.log_text(), b.log_text()
    finally:
        b.stop()
        a.stop()
    assert len(set(fetch_links(a_log))) >= 3, a_log[-3000:]  # three fetches at least...
    assert len(FETCH_CONTAINER.findall(a_log)) == 1, a_log[-3000:]  # ...over one connection
    assert len(re.findall(r"fetch connection opened", b_log)) == 1


def test_a_restarted_upstream_is_reconnected_and_the_next_fetch_goes_over_it(
    redis_pair: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis = redis_pair
    a, b = trimmed_relay(a_redis, b_redis, tmp_path)
    try:
        catch_up(b, b_redis, a_redis, "before", 10)
        first = FETCH_CONTAINER.findall(a.log_text())
        a.stop()
        a.start()  # same port, same journal
        catch_up(b, b_redis, a_redis, "after", 300)
        second_log, b_log = a.log_text(), b.log_text()
    finally:
        b.stop()
        a.stop()
    assert len(first) == 1
    assert FETCH_CONTAINER.findall(second_log) == first  # the same connection, reconnected
    assert fetch_links(second_log), second_log[-3000:]  # and the second fetch went over it
    assert re.findall(r"fetch connection opened .*connections=(\d+)", b_log)[-1] == "2"


def test_a_fetch_in_progress_when_the_connection_drops_is_asked_again_after_what_it_got(
    redis_url: str, tmp_path: Path
) -> None:
    """The fetch connection itself against A (``serve``), one fetch of 30,000 numbers: its
    connection is torn down while the answer comes; it reconnects, the link attaches again
    and asks after the last number it took: every number once, in order, no error."""
    a = ComponentProcess(redis_url, tmp_path, *FAST).start()
    conn = FetchConnection(a.url, name="relay.T.fetch.test", max_reconnect_delay=0.5).start()
    try:
        publish(a.url, "feed.a", 30_000)
        fetch = UpstreamFetch(Entitlement(topics=["/w/#"]), "feed.a", 1, 30_000, held=30_000)
        taken: list[Publication] = []
        link = conn.attach(fetch, "relay.T.fetch.test.1", "/w/#", {}).start()
        assert wait_for(lambda: fetch.count > 0 or fetch.done, 30)
        assert not fetch.done  # in progress
        conn.drop_connection()
        assert wait_for(lambda: bool(taken.extend(fetch.arrived())) or fetch.done, 60)
        taken.extend(fetch.arrived())
        link.stop()
    finally:
        conn.stop()
        a.stop()
    assert fetch.error is None
    assert fetch.lost is None
    assert conn.stats["fetch_connections"] == 2  # dropped, reconnected
    assert [(p.topic, p.source_seq) for p in taken] == expected(redis_url, "feed.a", "/w/#")


def test_a_fetch_request_rejected_for_the_replay_room_is_asked_again(
    redis_url: str, tmp_path: Path
) -> None:
    """The fetch connection against A (``serve --max-replays-per-principal 1``) while another
    connection of the same (anonymous) principal holds the only replay room: A rejects the
    fetch's request ``amqp:resource-limit-exceeded``. Its requests went pre-settled, so the
    rejection went unheard and nothing asked again (the fetch waited for its idle timeout,
    then named the range lost); now it is asked again with backoff, and once the room frees
    every number comes, once, in order, no error."""
    from .test_rejected_resume_real import Hog

    a = ComponentProcess(redis_url, tmp_path, *FAST, "--max-replays-per-principal", "1").start()
    conn = FetchConnection(a.url, name="relay.T.fetch.test", reconnect_delay=0.1,
                           max_reconnect_delay=0.3).start()
    hog: Hog | None = None
    try:
        publish(a.url, "feed.c", 20)
        publish(a.url, "feed.a", 50)
        hog = Hog(a.url)
        time.sleep(0.3)  # its replay runs (and cannot send: no credit)
        fetch = UpstreamFetch(Entitlement(topics=["/w/#"]), "feed.a", 1, 50)
        taken: list[Publication] = []
        link = conn.attach(fetch, "relay.T.fetch.test.1", "/w/#", {}).start()
        assert wait_for(lambda: conn.stats.get("fetch_requests_rejected", 0) >= 1, 10), (
            conn.stats)  # before: never heard
        assert not fetch.done
        hog.close()  # the room frees
        hog = None
        assert wait_for(lambda: bool(taken.extend(fetch.arrived())) or fetch.done, 15)
        taken.extend(fetch.arrived())
        link.stop()
    finally:
        if hog is not None:
            hog.close()
        conn.stop()
        a.stop()
    assert fetch.error is None
    assert fetch.lost is None
    assert [(p.topic, p.source_seq) for p in taken] == expected(redis_url, "feed.a", "/w/#")
