"""The journal and the publisher on Redis Cluster (one node holding every slot): the hash tag
per source keeps a source's keys in one slot, so the same code runs there."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from seqrepair.journal import EmbeddedRedis, Journal, Publisher

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
