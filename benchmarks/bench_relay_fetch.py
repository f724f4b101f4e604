"""A durable subscriber's catch-up at a relay: from the relay's own journal vs fetched from
its upstream (issue 27, ``seqrepair/amqp/relay/fetch.py``), in the same run.

    .venv/bin/python benchmarks/bench_relay_fetch.py [M] [ROUNDS]

Each round (default 2) has fresh processes: A (``seqrepair serve``) and B (``seqrepair relay
--subscribe /load/#``), each with its own redis-server; M publications (default 20,000) go
into A (``seqrepair publish``) until B's journal holds them. *journal*: a durable subscriber
whose position at B is 0 (made with ``create_position``) attaches to B and replays all M from
B's journal. Then B's journal is trimmed through M - 1; *fetched*: a second durable subscriber
from 0 replays them, B fetching 1..M-1 from A for it. Rate = deliveries / (last delivery -
attach). The figure is fetched / journal, per round and as the ratio of the medians.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_relay import publish, start  # noqa: E402
from procs import stop  # noqa: E402

from seqrepair.amqp.client.subscriber import Subscriber  # noqa: E402
from seqrepair.journal.journal import Journal  # noqa: E402
from seqrepair.journal.positions import create_position, link_durable  # noqa: E402
from seqrepair.journal.server import EmbeddedRedis  # noqa: E402


def replay(url: str, redis_url: str, name: str, m: int) -> dict[str, Any]:
    """A durable subscriber from position 0 at ``url`` until it has ``m`` deliveries."""
    client = redis.Redis.from_url(redis_url)
    create_position(client, link_durable(name), {"bench": 0})
    client.close()
    times: list[float] = []
    began = time.perf_counter()
    sub = Subscriber(url, "/load/#", link_name=name, durable=True, credit=500,
                     on_publication=lambda _p: times.append(time.perf_counter())).start()
    deadline = time.monotonic() + 600
    while len(times) < m and time.monotonic() < deadline:
        time.sleep(0.05)
    sub.stop()
    stats = sub.stats().as_dict()
    took = (times[-1] - began) if times else float("inf")
    return {"delivered": len(times), "rate": len(times) / took,
            "unrecoverable": stats["unrecoverable"]}


def round_(m: int) -> tuple[dict[str, Any], dict[str, Any]]:
    with EmbeddedRedis() as redis_a, EmbeddedRedis() as redis_b:
        comp, a_url = start(["serve", "--redis-url", redis_a.url], "a")
        procs = [comp]
        try:
            relay, b_url = start(["relay", "--upstream", a_url, "--redis-url", redis_b.url,
                                  "--subscribe", "/load/#", "--name", "b"], "b")
            procs.append(relay)
            time.sleep(1.0)  # B's upstream link is attached
            publish(a_url, redis_a.url, m)
            with Journal.from_url(redis_b.url) as journal_b:
                deadline = time.monotonic() + 600
                while journal_b.high_water("bench") < m and time.monotonic() < deadline:
                    time.sleep(0.05)
                own = replay(b_url, redis_b.url, "from-journal", m)
                journal_b.trim_through("bench", m - 1, now=time.time())
            fetched = replay(b_url, redis_b.url, "fetched", m)
        finally:
            for proc in reversed(procs):
                stop(proc)
    return own, fetched


def main() -> None:
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    own: list[dict[str, Any]] = []
    fetched: list[dict[str, Any]] = []
    for _ in range(rounds):
        a, b = round_(m)
        own.append(a)
        fetched.append(b)
    print(json.dumps({
        "m": m,
        "journal": [round(r["rate"]) for r in own],
        "fetched": [round(r["rate"]) for r in fetched],
        "ratios": [round(b["rate"] / a["rate"], 3) for a, b in zip(own, fetched, strict=True)],
        "ratio_of_medians": round(statistics.median(r["rate"] for r in fetched)
                                  / statistics.median(r["rate"] for r in own), 3),
        "complete": all(r["delivered"] == m and r["unrecoverable"] == 0
                        for r in own + fetched),
    }))


if __name__ == "__main__":
    main()
