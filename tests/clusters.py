"""Redis Clusters of real redis-servers for tests: one node holding every slot, or three
masters sharing them as redis-cli would. Each yields a RedisCluster client; the servers stop
when the block ends."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import redis
from redis.cluster import RedisCluster

from seqrepair.journal import EmbeddedRedis

CLUSTER_ARGS = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
SLOTS = 16384


@contextlib.contextmanager
def redis_cluster(nodes: int) -> Iterator[RedisCluster]:
    """A cluster of ``nodes`` masters on loopback, the slots split evenly between them."""
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(EmbeddedRedis(extra_args=CLUSTER_ARGS))
                   for _ in range(nodes)]
        admins = [stack.enter_context(redis.Redis(port=s.port)) for s in servers]
        bounds = [SLOTS * i // nodes for i in range(nodes + 1)]
        for admin, first, end in zip(admins, bounds, bounds[1:], strict=False):
            admin.execute_command("CLUSTER", "ADDSLOTSRANGE", first, end - 1)
        for server in servers[1:]:
            admins[0].execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
        known = f"cluster_known_nodes:{nodes}".encode()
        deadline = time.monotonic() + 60  # generous: gossip on a loaded 2-core machine
        while not all(
            b"cluster_state:ok" in info and known in info
            for info in (a.execute_command("CLUSTER", "INFO") for a in admins)
        ):
            assert time.monotonic() < deadline, f"the {nodes}-node cluster did not come up"
            time.sleep(0.05)
        client = RedisCluster(host="127.0.0.1", port=servers[0].port)
        stack.callback(client.close)
        yield client


def cluster_url(client: RedisCluster) -> str:
    """The ``redis+cluster://`` URL of one of the cluster's nodes."""
    node = client.get_default_node()
    return f"redis+cluster://{node.host}:{node.port}"
