"""A relay's upstream fetch links are shared fairly among the principals asking (issue 27;
relay/fetch.py): over real processes (``seqrepair serve`` A, ``seqrepair relay`` B with SCRAM
principals), one principal with many durable subscribers far below B's trim fills B's four
fetch links and queues more; another principal's fetch, asked after, starts at the first link
that frees, while the first's are still waiting, and every subscriber gets exactly its
selection."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import redis

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal import Journal
from seqrepair.journal.positions import create_position, link_durable

from .conftest import ComponentProcess, wait_for
from .principals import MISSING, client_security, serve_args
from .test_relay import RelayProcess, expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")]

FAST = ("--heartbeat", "0.2")


def _waiting(log: str) -> int:
    counts = re.findall(r"fetching from upstream what the journal lacks .*waiting=(\d+)", log)
    return max((int(n) for n in counts), default=0)


def test_a_second_principal_s_fetch_is_not_starved_behind_one_principal_s_many(
    redis_pair: list[str], tmp_path: Path
) -> None:
    a_redis, b_redis = redis_pair
    a = ComponentProcess(a_redis, tmp_path, *FAST).start()
    b = RelayProcess(b_redis, tmp_path, a.url, "B", "--subscribe", "/w/#", "--retain-count",
                     "20", "--retention-interval", "0.3",
                     *serve_args(tmp_path, "bulk", "other")[:-1], *FAST).start()
    many = 12
    got: list[list[Publication]] = [[] for _ in range(many + 1)]
    subs: list[Subscriber] = []
    stopped = False
    try:
        b.wait_upstream()
        publish(a.url, "feed.a", 3000)
        with Journal.from_url(b_redis) as journal:
            assert wait_for(lambda: journal.info("feed.a").trimmed_through > 2900, 60)
        client = redis.Redis.from_url(b_redis)
        for i in range(many + 1):  # a principal's durable names are its own
            who = "bulk" if i < many else "other"
            assert create_position(client, link_durable(f"{who}/fair{i}"), {"feed.a": i})
        client.close()
        # A stopped (SIGSTOP) while both principals ask: the fetches wait for it, so bulk holds
        # the four links and queues the rest before other asks, however fast A would answer
        # (from its recent entries a fetch ends before the next subscriber asks; issue 26)
        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)
        stopped = True
        for i in range(many):
            subs.append(Subscriber(b.url, "/w/#", on_publication=got[i].append,
                                   link_name=f"fair{i}", durable=True, heartbeat_interval=0.2,
                                   security=client_security("bulk")).start())
        # bulk holds the four links and queues the rest before other asks
        assert wait_for(lambda: _waiting(b.log_text()) >= 4, 60), b.log_text()[-3000:]
        subs.append(Subscriber(b.url, "/w/#", on_publication=got[many].append,
                               link_name=f"fair{many}", durable=True, heartbeat_interval=0.2,
                               security=client_security("other")).start())
        assert wait_for(lambda: re.search(
            r"fetching from upstream what the journal lacks .*principal=other",
            b.log_text()) is not None, 60), b.log_text()[-3000:]
        os.kill(a.proc.pid, signal.SIGCONT)
        stopped = False
        wants = [[w for w in expected(a_redis, "feed.a", "/w/#") if w[1] > i]
                 for i in range(many + 1)]
        assert wait_for(lambda: all(len(g) >= len(w) for g, w in zip(got, wants, strict=True)),
                        120), ([len(g) for g in got], b.log_text()[-3000:])
        time.sleep(0.5)
    finally:
        if stopped and a.proc is not None:
            os.kill(a.proc.pid, signal.SIGCONT)
        for sub in subs:
            sub.stop()
        b.stop()
        a.stop()
    for i, (pubs, want) in enumerate(zip(got, wants, strict=True)):
        assert [(p.topic, p.source_seq) for p in pubs] == want, i
        assert not subs[i].unrecoverable
    log = b.log_text()
    starts = re.findall(r"upstream fetch started .*others_waiting=(\d+) .*principal=(\w+)"
                        r"|upstream fetch started .*principal=(\w+) .*others_waiting=(\d+)",
                        log)
    started = [(p1 or p2, int(w1 or w2)) for w1, p1, p2, w2 in starts]
    assert [p for p, _w in started].count("bulk") >= many
    other = [w for p, w in started if p == "other"]
    assert other, started
    # first come, first served would start it after every bulk fetch: none of bulk's waiting
    assert other[0] >= 1, started
    assert max(int(n) for n in re.findall(r"upstream fetch started .*running=(\d+)", log)) <= 4
