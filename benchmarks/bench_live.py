"""The live path, one ``publish()`` per record: latency at a fixed rate and throughput, this
tree against another (main) in the same run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_live.py [--base DIR] [--rounds R]
        [--rate 1000] [--count 5000] [--throughput N]

Each round starts, for each code tree (``--base DIR``, e.g. a ``git worktree`` of main, and
this tree; which goes first alternates per round), a private redis-server, ``seqrepair serve``
(no forced loss) and two processes of that tree: one library ``Subscriber`` and one library
``Publisher`` with a journal (``journal=Journal``: each publication is journaled before it is
sent, as the CLI's ``--redis-url``). The publisher calls ``publish()`` once per record,
``--count`` records at ``--rate`` per second, each record carrying the wall-clock time just
before its ``publish()`` call; the subscriber records delivery time - that time. Reported:
p50/p99/max of publish-call -> delivery. With ``--throughput N`` a second run per tree
publishes N records unpaced, still one ``publish()`` per record, and reports delivered
publications/s (first to last delivery) and CPU seconds per publication of every process
(component, redis-server, publisher, subscriber), publications per transfer from the
publisher, and the CPU of the ``publish()`` calls alone.

``--hogs N`` keeps N CPU-bound processes running (a loaded machine, the same for both trees);
``--profile DIR`` runs every process under py-spy (collapsed stacks; py-spy on PATH);
``BENCH_COMPONENT_RUN="script.py"`` runs ``seqrepair serve`` through another entry point (a
cProfile wrapper, say).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from procs import free_port, proc_cpu

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
TOPIC = "/load/a"


# --- the two worker processes (run with PYTHONPATH set to the tree under test) -------------

def subscriber_main(url: str, count: int, ready: str) -> None:
    from livetrace import install

    install("subscriber")
    from seqrepair.amqp.client.subscriber import Subscriber

    lat: list[float] = []
    times: list[float] = []

    def on_pub(pub: Any) -> None:
        now = time.time()
        times.append(time.perf_counter())
        lat.append(now - pub.fields["t"])

    sub = Subscriber(url, "/load/#", on_publication=on_pub, credit=500).start()
    sub.connected.wait(20)
    Path(ready).touch()
    deadline = time.monotonic() + 600
    cpu0: float | None = None
    while len(lat) < count and time.monotonic() < deadline:
        if cpu0 is None and lat:
            cpu0 = time.process_time()
        time.sleep(0.01)
    cpu = time.process_time() - (cpu0 or 0.0)
    sub.stop()
    print(json.dumps({"lat": lat, "span": times[-1] - times[0] if len(times) > 1 else 0.0,
                      "cpu": cpu}))


def publisher_main(url: str, redis_url: str, count: int, rate: float) -> None:
    from livetrace import install

    install("publisher")
    from seqrepair.amqp.client.subscriber import Publisher
    from seqrepair.journal.journal import Journal

    transfers = [0]

    def on_sent(batch: Any) -> None:
        transfers[0] += 1

    pub = Publisher(url, "bench", address="/#", journal=Journal.from_url(redis_url),
                    on_sent=on_sent).start()
    pub.publish("/warm/a", {"t": time.time()})  # connects; not counted
    if not pub.flush(30):
        raise SystemExit("warm-up not accepted")
    cpu0, thread0 = time.process_time(), time.thread_time()
    transfers[0] = 0
    start = time.monotonic()
    for i in range(count):
        if rate > 0:
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        pub.publish(TOPIC, {"n": i, "t": time.time()})
    app_cpu = time.thread_time() - thread0  # the application's thread: publish() calls
    ok = pub.close(60)
    print(json.dumps({"flushed": ok, "cpu": time.process_time() - cpu0, "app_cpu": app_cpu,
                      "elapsed": time.monotonic() - start, "transfers": transfers[0]}))


# --- the driver ------------------------------------------------------------------------------

PROFILE: Path | None = None  # --profile DIR: each process under py-spy (collapsed stacks)


def _cmd(name: str, argv: list[str]) -> list[str]:
    if PROFILE is None:
        return argv
    PROFILE.mkdir(parents=True, exist_ok=True)
    return ["py-spy", "record", "--format", "raw", "--rate", "1000", "--nonblocking",
            "-o", str(PROFILE / f"{name}.txt"), "--", *argv]


def _last_json(text: str | bytes) -> str:
    """The last line of a worker's output that is its JSON record (py-spy writes too)."""
    if isinstance(text, bytes):
        text = text.decode()
    return [line for line in text.splitlines() if line.startswith("{")][-1]


def one_run(tree: Path, count: int, rate: float) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from seqrepair.journal.server import EmbeddedRedis

    env = dict(os.environ, PYTHONPATH=str(tree))
    with EmbeddedRedis() as redis:
        url = f"127.0.0.1:{free_port()}"
        ready = Path(f"/tmp/bench-live-{os.getpid()}")
        sub_ready = Path(f"/tmp/bench-live-sub-{os.getpid()}")
        ready.unlink(missing_ok=True)
        sub_ready.unlink(missing_ok=True)
        comp = subprocess.Popen(_cmd("component", [
            sys.executable, *os.environ.get("BENCH_COMPONENT_RUN", "-m seqrepair.cli").split(),
            "serve", "--url", url, "--redis-url",
            redis.url, "--ready-file", str(ready), "--max-pending", "200000",
            "--allow-anonymous"]), env=env, cwd=tree, stderr=subprocess.DEVNULL)
        sub = None
        try:
            while not ready.exists():
                if comp.poll() is not None:
                    raise RuntimeError(f"seqrepair serve exited with {comp.returncode}")
                time.sleep(0.05)
            sub = subprocess.Popen(_cmd("subscriber", [
                sys.executable, str(HERE), "--_subscriber", url, str(count), str(sub_ready)]),
                env=env, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            while not sub_ready.exists():
                if sub.poll() is not None:
                    raise RuntimeError("the subscriber exited")
                time.sleep(0.05)
            comp0, redis0 = proc_cpu(comp.pid), proc_cpu(redis.pid)
            out = subprocess.run(_cmd("publisher", [
                sys.executable, str(HERE), "--_publisher", url, redis.url, str(count),
                str(rate)]), env=env, cwd=tree, check=True, capture_output=True, text=True,
                timeout=900)
            published = json.loads(_last_json(out.stdout))
            received = json.loads(_last_json(sub.communicate(timeout=900)[0]))
            comp_cpu, redis_cpu = proc_cpu(comp.pid) - comp0, proc_cpu(redis.pid) - redis0
        finally:
            if sub is not None and sub.poll() is None:
                sub.kill()
            if PROFILE is None:
                comp.terminate()
            else:  # py-spy writes its profile on ^C and ends the component
                comp.send_signal(signal.SIGINT)
            comp.wait(30)
            ready.unlink(missing_ok=True)
            sub_ready.unlink(missing_ok=True)
    lat = sorted(received["lat"])
    n = len(lat)
    cpu = {"component": comp_cpu, "redis": redis_cpu, "publisher": published["cpu"],
           "subscriber": received["cpu"]}
    return {
        "delivered": n,
        "p50_ms": 1000 * statistics.median(lat) if lat else None,
        "p99_ms": 1000 * lat[int(0.99 * (n - 1))] if lat else None,
        "max_ms": 1000 * lat[-1] if lat else None,
        "rate": (n - 1) / received["span"] if received["span"] else None,
        "publish_elapsed_s": published["elapsed"],
        "pubs_per_transfer": round(count / max(1, published["transfers"]), 1),
        "publish_call_cpu_us": round(1e6 * published.get("app_cpu", 0.0) / max(1, count), 1),
        "cpu_us_per_pub": {k: round(1e6 * v / max(1, n), 1) for k, v in cpu.items()},
        "cpu_us_per_pub_total": round(1e6 * sum(cpu.values()) / max(1, n), 1),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_subscriber":
        subscriber_main(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--_publisher":
        publisher_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, help="the baseline tree (e.g. main's worktree)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--throughput", type=int, default=0,
                        help="also publish this many unpaced per tree and round")
    parser.add_argument("--hogs", type=int, default=0,
                        help="CPU-bound processes kept running throughout (a loaded machine)")
    parser.add_argument("--profile", type=Path,
                        help="run every process under py-spy, collapsed stacks into DIR")
    parser.add_argument("--trace", type=Path,
                        help="one paced run of this tree with the probes of livetrace.py: "
                             "where the milliseconds go, per step, into DIR")
    parser.add_argument("--cprofile", action="store_true",
                        help="with --trace: cProfile every thread of every process too")
    args = parser.parse_args()
    if args.trace is not None:
        trace(args)
        return
    global PROFILE
    PROFILE = args.profile
    trees = {"this": ROOT} if args.base is None else {"base": args.base.resolve(), "this": ROOT}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.hogs)]
    try:
        summary = measure(args, trees)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(json.dumps(summary, indent=1))


def trace(args: argparse.Namespace) -> None:
    """One paced run (and one unpaced with ``--throughput``) with the probes of
    :mod:`livetrace`; prints the breakdown of each."""
    from livetrace import breakdown

    runs = [("paced", args.count, args.rate)]
    if args.throughput:
        runs.append(("saturated", args.throughput, 0.0))
    for label, count, rate in runs:
        folder = (args.trace / label).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        os.environ["BENCH_TRACE"] = str(folder)
        if args.cprofile:
            os.environ["BENCH_CPROFILE"] = "1"
        os.environ["BENCH_COMPONENT_RUN"] = str(HERE.parent / "livetrace.py")
        result = one_run(ROOT, count, rate)
        summary = {"run": label, "load_avg": os.getloadavg()[0], **breakdown(folder),
                   "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
                   "pubs_per_transfer": result["pubs_per_transfer"], "rate": result["rate"],
                   "cpu_us_per_pub": result["cpu_us_per_pub"]}
        (folder / "breakdown.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary, indent=1))


def measure(args: argparse.Namespace, trees: dict[str, Path]) -> dict[str, Any]:
    """Interleaved rounds over ``trees``; the summary with the ratios."""
    load = [os.getloadavg()[0]]
    runs: dict[str, dict[str, list[Any]]] = {k: {"paced": [], "saturated": []} for k in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            runs[name]["paced"].append(one_run(trees[name], args.count, args.rate))
            if args.throughput:
                runs[name]["saturated"].append(one_run(trees[name], args.throughput, 0.0))
        load.append(os.getloadavg()[0])
    summary: dict[str, Any] = {"rate": args.rate, "count": args.count, "rounds": args.rounds,
                               "throughput_n": args.throughput, "hogs": args.hogs,
                               "load_avg": load}
    for name in trees:
        paced, sat = runs[name]["paced"], runs[name]["saturated"]
        summary[name] = {
            "p50_ms": [round(p["p50_ms"], 2) for p in paced],
            "p99_ms": [round(p["p99_ms"], 2) for p in paced],
            "max_ms": [round(p["max_ms"], 1) for p in paced],
            "delivered": [p["delivered"] for p in paced],
            "paced_cpu_us_per_pub": [p["cpu_us_per_pub"] for p in paced],
            "paced_pubs_per_transfer": [p["pubs_per_transfer"] for p in paced],
        }
        if sat:
            summary[name].update({
                "pubs_per_s": [round(s["rate"]) for s in sat],
                "sat_pubs_per_transfer": [s["pubs_per_transfer"] for s in sat],
                "sat_publish_call_cpu_us": [s["publish_call_cpu_us"] for s in sat],
                "sat_delivered": [s["delivered"] for s in sat],
                "sat_cpu_us_per_pub": [s["cpu_us_per_pub"] for s in sat],
                "sat_cpu_us_per_pub_total": [s["cpu_us_per_pub_total"] for s in sat],
            })
    if "base" in trees:
        b, t = summary["base"], summary["this"]
        summary["ratio_p50_this_over_base"] = round(
            statistics.median(t["p50_ms"]) / statistics.median(b["p50_ms"]), 3)
        summary["ratio_p99_this_over_base"] = round(
            statistics.median(t["p99_ms"]) / statistics.median(b["p99_ms"]), 3)
        if args.throughput:
            summary["ratio_throughput_this_over_base"] = round(
                statistics.median(t["pubs_per_s"]) / statistics.median(b["pubs_per_s"]), 3)
            summary["ratio_cpu_total_this_over_base"] = round(
                statistics.median(t["sat_cpu_us_per_pub_total"])
                / statistics.median(b["sat_cpu_us_per_pub_total"]), 3)
    return summary


if __name__ == "__main__":
    main()
