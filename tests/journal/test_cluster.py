"""The journal, the publisher, gap fill and retention on Redis Cluster (one node holding every
slot, and three masters sharing them): the hash tag per source keeps a source's keys in one
slot, so the same code runs there."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import redis
from redis.cluster import RedisCluster

from seqrepair.core.messages import GapError, Publication, ReplayComplete, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.journal import EmbeddedRedis, GapFillService, Journal, Publisher, Replay
from seqrepair.journal.format import stream_key
from seqrepair.journal.retention import RetentionPolicy, apply_retention

pytestmark = pytest.mark.redis


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    with EmbeddedRedis(extra_args=args) as server:
        with redis.Redis(port=server.port) as admin:
            admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            deadline = time.monotonic() + 30  # generous: CI runs on a loaded 2-core machine
            while b"cluster_state:ok" not in admin.execute_command("CLUSTER", "INFO"):
                assert time.monotonic() < deadline, "the one-node cluster did not come up"
                time.sleep(0.05)
        client = RedisCluster(host="127.0.0.1", port=server.port)
        yield client
        client.close()


def test_a_publisher_journals_and_resumes_on_redis_cluster(cluster: RedisCluster) -> None:
    journal = Journal(cluster)
    with Publisher("feed.a", journal, bits=8, batch_size=10) as publisher:
        for i in range(25):
            publisher.publish("/weather/wind/LEMD", {"n": i})
    assert journal.high_water("feed.a") == 25
    with Publisher("feed.a", journal, bits=8) as again:  # a restart continues after 25
        assert again.publish("/weather/wind/LEMD", {"n": 25}).source_seq == 26
    assert [p.fields["n"] for p in journal.read_after("feed.a", 20)] == [20, 21, 22, 23, 24, 25]


@pytest.fixture
def three_nodes() -> Iterator[RedisCluster]:
    """A cluster of three masters, the slots split between them as redis-cli would."""
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(EmbeddedRedis(extra_args=args)) for _ in range(3)]
        admins = [stack.enter_context(redis.Redis(port=s.port)) for s in servers]
        for admin, (first, last) in zip(admins, ((0, 5460), (5461, 10922), (10923, 16383)),
                                        strict=True):
            admin.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        for server in servers[1:]:
            admins[0].execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
        deadline = time.monotonic() + 60  # gossip takes a few seconds on a loaded machine
        while not all(
            b"cluster_state:ok" in info and b"cluster_known_nodes:3" in info
            for info in (a.execute_command("CLUSTER", "INFO") for a in admins)
        ):
            assert time.monotonic() < deadline, "the three-node cluster did not come up"
            time.sleep(0.1)
        client = RedisCluster(host="127.0.0.1", port=servers[0].port)
        stack.callback(client.close)
        yield client


SOURCES = ("feed.a", "feed.b", "feed.c", "feed.d", "feed.e", "feed.f")


def test_sources_spread_over_three_nodes_journal_repair_and_trim_as_on_one_server(
    three_nodes: RedisCluster, tmp_path: Path
) -> None:
    nodes = {three_nodes.get_node_from_key(stream_key(s)).name for s in SOURCES}
    assert len(nodes) == 3  # the test means something only if the sources are spread out
    journal = Journal(three_nodes, page_size=7)
    published: dict[str, list[Publication]] = {}
    for n, source in enumerate(SOURCES):
        with Publisher(source, journal, bits=4, batch_size=5) as publisher:  # wraps often
            published[source] = [
                publisher.publish(f"/weather/{'wind' if i % 2 else 'rain'}/{n}", {"i": i})
                for i in range(40)
            ]
    assert journal.sources() == sorted(SOURCES)
    assert journal.high_waters(SOURCES) == {s: (40, 0) for s in SOURCES}

    # repair by source from the journal: every source, in order, filtered by topic
    service = GapFillService(journal)
    service.attach("L1", Entitlement(topics=("/weather/wind/#",)))
    replay = service.answer_source_gap("L1", SourceGapRequest({s: 10 for s in SOURCES}), now=0.0)
    assert isinstance(replay, Replay)
    frames = list(replay)
    assert isinstance(frames[-1], ReplayComplete)
    replayed = [f for f in frames if isinstance(f, Publication)]
    for source in SOURCES:
        assert [p for p in replayed if p.source == source] == [
            attrs.evolve(p, retransmit=True) for p in published[source][10:] if "/wind/" in p.topic
        ]

    # retention archives, trims and remembers, on whichever node holds the source
    policy = RetentionPolicy(max_count=15, archive_root=tmp_path)
    for source in SOURCES:
        assert apply_retention(journal, source, policy, now=1.0).trimmed_through == 25
    error = service.answer_source_gap("L1", SourceGapRequest({"feed.c": 5}), now=0.0)
    assert isinstance(error, GapError)
    assert error.reason == "trimmed"
    assert error.trimmed_through == {"feed.c": 25}
