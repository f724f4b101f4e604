"""Small fetches one after another, as a relay makes them for what its journal lacks: over
one kept upstream connection (``relay/fetchconn.py``) against a new connection per fetch
(the relay of another checkout, which opened one ``Subscriber`` per fetch), in one run.

    .venv/bin/python benchmarks/bench_relay_fetchconn.py [FETCHES] [SIZE] [ROUNDS]
        [--baseline TREE]

One ``seqrepair serve`` (A, private redis-server) holds FETCHES x SIZE publications of one
source on ``/load/#``; each round fetches them as FETCHES ranges of SIZE numbers, one after
another (each waited for: a replay waits for its fetch; its link stopped in another thread,
as the relay does), first over one connection (this
tree), then, with ``--baseline``, with a connection per fetch (TREE's ``FetchSubscriber``, in
a child process running TREE's code), interleaved ROUNDS times. Figure: fetches per second
and the ratio kept / per-fetch connection; every round checks each range came whole, once,
in order.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def fetch_all(url: str, fetches: int, size: int) -> dict[str, Any]:
    """FETCHES ranges of SIZE, one after another, with the code on ``sys.path``."""
    from seqrepair.amqp.relay import fetch as fetchmod
    from seqrepair.core.permissions import Entitlement

    entitlement = Entitlement(topics=["/load/#"])
    conn = None
    if hasattr(fetchmod, "FetchSubscriber"):  # a connection (and a thread) per fetch
        def link(fetch: Any, n: int) -> Any:
            return fetchmod.FetchSubscriber(url, fetch, link_name=f"bench.fetch.{n}")
    else:
        from seqrepair.amqp.relay.fetchconn import FetchConnection

        conn = FetchConnection(url, name="bench.fetch.conn").start()

        def link(fetch: Any, n: int) -> Any:
            return conn.attach(fetch, f"bench.fetch.{n}", "/load/#", {})
    exact = True
    began = time.perf_counter()
    for n in range(fetches):
        first = n * size + 1
        fetch = fetchmod.UpstreamFetch(entitlement, "feed", first, first + size - 1,
                                       held=size)
        sub = link(fetch, n).start()
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while not fetch.done and time.monotonic() < deadline:
            got.extend(fetch.arrived())
            time.sleep(0.001)
        got.extend(fetch.arrived())
        # stopped off the critical path, as the relay does (UpstreamFetches.poll)
        threading.Thread(target=sub.stop, daemon=True).start()
        exact = exact and [p.source_seq for p in got] == list(range(first, first + size))
    took = time.perf_counter() - began
    if conn is not None:
        conn.stop()
    return {"seconds": round(took, 3), "fetches_per_s": round(fetches / took, 1),
            "exact": exact}


def child(tree: Path, url: str, fetches: int, size: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", url, str(fetches),
         str(size)], env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree,
        capture_output=True, check=True, timeout=600)
    result: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return result


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        sys.path.insert(0, os.environ["PYTHONPATH"])
        print(json.dumps(fetch_all(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fetches", nargs="?", type=int, default=50)
    parser.add_argument("size", nargs="?", type=int, default=100)
    parser.add_argument("rounds", nargs="?", type=int, default=3)
    parser.add_argument("--baseline", type=Path, metavar="TREE")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_relay import publish, start
    from procs import stop

    from seqrepair.journal.server import EmbeddedRedis

    kept: list[dict[str, Any]] = []
    per_fetch: list[dict[str, Any]] = []
    with EmbeddedRedis() as redis_a:
        comp, url = start(["serve", "--redis-url", redis_a.url], "fetchconn-a")
        try:
            publish(url, redis_a.url, args.fetches * args.size, source="feed")
            for _ in range(args.rounds):
                kept.append(child(ROOT, url, args.fetches, args.size))
                if args.baseline is not None:
                    per_fetch.append(child(args.baseline, url, args.fetches, args.size))
        finally:
            stop(comp)
    result: dict[str, Any] = {
        "fetches": args.fetches, "size": args.size,
        "kept_connection": [r["fetches_per_s"] for r in kept],
        "exact": all(r["exact"] for r in kept + per_fetch),
        "load": round(os.getloadavg()[0], 1),
    }
    if per_fetch:
        result["connection_per_fetch"] = [r["fetches_per_s"] for r in per_fetch]
        result["ratio_of_medians"] = round(
            statistics.median(r["fetches_per_s"] for r in kept)
            / statistics.median(r["fetches_per_s"] for r in per_fetch), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
