"""Publications per second through one relay hop vs direct, and a relay's catch-up, in one run.

    .venv/bin/python benchmarks/bench_relay.py [N] [ROUNDS] [--catch-up M]

Direct: ``seqrepair serve`` (A, journal on a private redis-server) and one subscriber (this
process, driving the SubscriberStub) on A. Relayed: the same A, a ``seqrepair relay`` (B, its
own redis-server, ``--subscribe /load/#``) subscribed to A, and the subscriber on B: every
publication is delivered to B, journaled in B's journal, fanned out by B. The publisher is
``seqrepair publish`` (journal first, batches of 256) into A. Direct and relayed rounds are
interleaved ROUNDS times (default 2), each with fresh processes and Redis: rate = deliveries /
(last - first delivery) at the subscriber. The figure is relayed / direct (goal >= 0.7), as
the ratio of the best rates and of the median rates (on a shared machine one lucky round can
make the best of either side).

Catch-up: with B attached once (its durable position kept at A) and then stopped (SIGTERM),
M publications (default 100,000) go into A; B is started again and the time until B's journal
holds all of them is measured (B replays by source from A after its position), as
publications per second, next to the direct rate of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from procs import free_port, stop  # noqa: E402

from seqrepair.amqp.client.subscriber import Subscriber  # noqa: E402
from seqrepair.journal.journal import Journal  # noqa: E402
from seqrepair.journal.server import EmbeddedRedis  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def start(args: list[str], name: str) -> tuple[subprocess.Popen[bytes], str]:
    """A ``seqrepair`` process listening on a free port (its ``--ready-file`` waited for)."""
    url = f"127.0.0.1:{free_port()}"
    ready = Path(f"/tmp/bench-relay-{os.getpid()}-{name}")
    ready.unlink(missing_ok=True)
    flag = "--url" if args[0] == "serve" else "--listen"
    proc = subprocess.Popen(
        [sys.executable, "-m", "seqrepair.cli", *args, flag, url, "--ready-file", str(ready),
         "--allow-anonymous"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"seqrepair {args[0]} exited with {proc.returncode}")
        time.sleep(0.05)
    ready.unlink()
    return proc, url


def publish(url: str, redis_url: str, n: int, source: str = "bench") -> None:
    subprocess.run(
        [sys.executable, "-m", "seqrepair.cli", "publish", "--url", url, "--redis-url",
         redis_url, "--source", source, "--count", str(n), "--batch", "256"],
        env=ENV, check=True, capture_output=True, timeout=1200,
    )


def rate(n: int, relayed: bool) -> dict[str, Any]:
    """One round: deliveries per second at a subscriber of A (direct) or of B (relayed)."""
    with EmbeddedRedis() as redis_a, EmbeddedRedis() as redis_b:
        comp, a_url = start(["serve", "--redis-url", redis_a.url, "--max-pending", "200000"],
                            "a")
        procs = [comp]
        try:
            url = a_url
            if relayed:
                relay, url = start(["relay", "--upstream", a_url, "--redis-url", redis_b.url,
                                    "--subscribe", "/load/#", "--name", "b"], "b")
                procs.append(relay)
            times: list[float] = []
            sub = Subscriber(url, "/load/#", on_publication=lambda _p: times.append(
                time.perf_counter()), credit=500).start()
            sub.wait_connected(20)
            time.sleep(1.0)  # the relay's upstream link is attached too
            publish(a_url, redis_a.url, n)
            deadline = time.monotonic() + 300
            while len(times) < n and time.monotonic() < deadline:
                time.sleep(0.05)
            sub.stop()
            stats = sub.stats().as_dict()
        finally:
            for proc in reversed(procs):
                stop(proc)
    return {"delivered": len(times), "rate": (len(times) - 1) / (times[-1] - times[0]),
            "repaired": stats["repaired"], "unrecoverable": stats["unrecoverable"]}


def catch_up(m: int) -> dict[str, Any]:
    """Seconds until a relay that was down for ``m`` publications journals all of them."""
    with EmbeddedRedis() as redis_a, EmbeddedRedis() as redis_b:
        comp, a_url = start(["serve", "--redis-url", redis_a.url], "a")
        relay_args = ["relay", "--upstream", a_url, "--redis-url", redis_b.url,
                      "--subscribe", "/load/#", "--name", "b"]
        try:
            relay, _ = start(relay_args, "b")
            time.sleep(1.0)
            publish(a_url, redis_a.url, 10, source="bench")  # B holds a position at A
            with Journal.from_url(redis_b.url) as journal_b:
                deadline = time.monotonic() + 30
                while journal_b.high_water("bench") < 10 and time.monotonic() < deadline:
                    time.sleep(0.05)
                stop(relay)
                publish(a_url, redis_a.url, m, source="bench")  # continues after 10
                with Journal.from_url(redis_a.url) as journal_a:
                    target = journal_a.high_water("bench")
                began = time.perf_counter()
                relay, _ = start(relay_args, "b")
                deadline = time.monotonic() + 1800
                while journal_b.high_water("bench") < target and time.monotonic() < deadline:
                    time.sleep(0.05)
                took = time.perf_counter() - began
                held = journal_b.high_water("bench")
            stop(relay)
        finally:
            stop(comp)
    return {"publications": m, "seconds": round(took, 2), "rate": round(m / took),
            "caught_up": held == target}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", nargs="?", type=int, default=20_000)
    parser.add_argument("rounds", nargs="?", type=int, default=2)
    parser.add_argument("--catch-up", type=int, default=100_000, metavar="M")
    args = parser.parse_args()
    direct: list[dict[str, Any]] = []
    relayed: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        direct.append(rate(args.n, relayed=False))
        relayed.append(rate(args.n, relayed=True))
    best_direct = max(r["rate"] for r in direct)
    best_relayed = max(r["rate"] for r in relayed)
    result: dict[str, Any] = {
        "n": args.n,
        "direct": [round(r["rate"]) for r in direct],
        "relayed": [round(r["rate"]) for r in relayed],
        "ratio": round(best_relayed / best_direct, 3),
        "ratio_of_medians": round(statistics.median(r["rate"] for r in relayed)
                                  / statistics.median(r["rate"] for r in direct), 3),
        "complete": all(r["delivered"] == args.n and r["unrecoverable"] == 0
                        for r in direct + relayed),
    }
    if args.catch_up:
        result["catch_up"] = catch_up(args.catch_up)
        result["catch_up"]["vs_direct"] = round(result["catch_up"]["rate"] / best_direct, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
