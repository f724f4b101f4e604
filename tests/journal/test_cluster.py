"""The journal, the publisher, gap fill and retention on Redis Cluster (one node holding every
slot, and three masters sharing them): the hash tag per source keeps a source's keys in one
slot, so the same code runs there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from clusters import cluster_url, redis_cluster
from redis.cluster import RedisCluster

from seqrepair.core.messages import GapError, Publication, ReplayComplete, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.journal import (
    GapFillService,
    Journal,
    JournalUnavailableError,
    Publisher,
    Replay,
)
from seqrepair.journal.format import stream_key
from seqrepair.journal.retention import RetentionPolicy, apply_retention

pytestmark = pytest.mark.redis


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    with redis_cluster(1) as client:
        yield client


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
    with redis_cluster(3) as client:
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


def test_a_cluster_url_names_the_cluster_through_any_node(three_nodes: RedisCluster) -> None:
    url = cluster_url(three_nodes)
    with Journal.from_url(url) as journal:
        for source in SOURCES:
            with Publisher(source, journal, bits=3) as publisher:
                publisher.publish("/weather/wind/LEMD", {"source": source, "gust": None})
    with Journal.from_url(url) as again:  # a new client learns where every source lives
        assert again.sources() == sorted(SOURCES)
        assert [p.fields for p in again.read_after("feed.e", 0)] == [
            {"source": "feed.e", "gust": None}
        ]


def test_a_cluster_url_nobody_answers_is_a_clear_error() -> None:
    with pytest.raises(JournalUnavailableError, match="cluster"):
        Journal.from_url("redis+cluster://127.0.0.1:1", socket_connect_timeout=1.0)


def test_who_brought_a_source_is_recorded_and_read_back_across_three_nodes(
    three_nodes: RedisCluster,
) -> None:
    # the append script writes brought_by in the source's meta hash (the slot of its hash
    # tag); a starting component reads it of every source, wherever its node
    from seqrepair.amqp.component.journalport import RedisJournalPort

    journal = Journal(three_nodes)
    nodes = {three_nodes.get_node_from_key(stream_key(s)).name for s in SOURCES}
    assert len(nodes) == 3
    for i, source in enumerate(SOURCES):
        journal.append([Publication("/t", source, 1, fields={"n": i})], 16,
                       brought_by="alice" if i % 2 else "b{ob}\x00\"'")
        journal.append([Publication("/t", source, 2, fields={"n": i})], 16, brought_by="mallory")
    expected = {s: "alice" if i % 2 else "b{ob}\x00\"'" for i, s in enumerate(SOURCES)}
    assert journal.brought_by(list(SOURCES)) == expected
    port = RedisJournalPort(journal)
    assert port.high_waters() == dict.fromkeys(SOURCES, 2)
    assert port.brought_by() == expected
    assert port.bits_of == dict.fromkeys(SOURCES, 16)
