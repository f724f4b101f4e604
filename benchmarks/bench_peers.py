"""seqrepair against NATS JetStream and Redis Streams on the same machine, as same-run ratios.

    .venv/bin/python benchmarks/bench_peers.py [--n 100000] [--rounds 3]
        [--workloads throughput,latency,catchup] [--systems seqrepair,jetstream,streams]
        [--rate 1000] [--latency-seconds 10] [--out benchmarks/results/peers.json]

Every run starts its own servers on private ports and temporary folders and stops them after:
seqrepair is ``python -m seqrepair.cli serve --allow-anonymous`` with its journal on a private
redis-server (AOF, ``appendfsync everysec``), the library ``Publisher`` (journal first, then
sent) and a durable library ``Subscriber`` (link name ``peers-sub``); JetStream is Debian's
``nats-server -js`` (stream on file storage, the defaults) with nats-py, a durable push
consumer (``AckPolicy.ALL``, one ack per 256); Redis Streams is a private redis-server (AOF
everysec) used directly with redis-py, ``XADD`` and ``XREAD`` (the position is the client's).
One publisher process and one subscriber process per run (``benchmarks/peer_clients.py``).
Publications are ``{"n", "t", "pad"}`` of about 150 bytes.

Workloads, each run verified exact (1..N once each, in order, at the subscriber, plus every
publication acknowledged to the publisher; a run that is not is reported failed, not timed):

* ``throughput``: the publisher as fast as its batched API goes (seqrepair ``publish_many`` of
  256; JetStream ``publish_async``, its default window of 4000; Streams pipelines of 256
  ``XADD``); publications/s from the first publish call to the N-th delivery.
* ``latency``: ``--rate`` per second (1,000) for ``--latency-seconds`` (10), one publish call per
  record on a fixed schedule (``Publisher.publish``, ``await js.publish``, ``XADD``); latency
  is delivery time minus the time taken at the publish call (carried in the payload); p50, p99,
  max, and whether the publisher held the schedule.
* ``catchup``: the subscriber's durable position is made first (seqrepair: the durable link
  attaches once and leaves; JetStream: the durable consumer; Streams: "0-0"), N are published
  while no subscriber runs, then a new subscriber process starts and catches up (seqrepair: the
  durable link comes back into a new context and repairs by source from the journal, the real
  repair path); publications/s from its start (connect included) to the N-th delivery, and for
  seqrepair the duplicates its stub dropped (goal: under 1% of the replay).

CPU per publication: the servers' user+system seconds from ``/proc/PID/stat`` over the run's
window (component + redis-server; nats-server; redis-server) plus each client's own
``getrusage(RUSAGE_SELF)`` over its work (imports and connecting left out), divided by N. For
catch-up, the window is the catch-up only (the subscriber and the servers).

Rounds interleave the systems (A, B, C, then B, C, A, ...: the order rotates) on each workload;
the table gives the median per system, the ratios of medians seqrepair / JetStream and
seqrepair / Streams and in brackets the range of the same ratio within each round (the same
minutes of load), against the goals of issue 26. ``--table FILE`` prints the table of an earlier
run's JSON again. Installs what is missing and says so:
``apt-get install -y nats-server`` (as root) and ``pip install nats-py`` into this interpreter's
environment.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from procs import free_port, proc_cpu, stop  # noqa: E402

from seqrepair.journal.server import EmbeddedRedis  # noqa: E402

CLIENTS = Path(__file__).resolve().parent / "peer_clients.py"
SYSTEMS = ("seqrepair", "jetstream", "streams")
WORKLOADS = ("throughput", "latency", "catchup")
# issue 26's goals: (figure, bound, which way), seqrepair against JetStream or absolute
GOALS = {
    "throughput": "seqrepair/JetStream >= 1.0",
    "latency": "seqrepair p50 < 2 ms, p99 < 20 ms",
    "catchup": "seqrepair/JetStream >= 1.0, duplicates < 1% of the replay",
    "cpu": "(none; issue 26 table: ~155 vs ~106 us)",
}


# --- installing what is missing ----------------------------------------------------------

def ensure_installed() -> None:
    """nats-server (Debian) and nats-py (PyPI, into this interpreter's environment)."""
    if shutil.which("nats-server") is None:
        print("bench_peers: nats-server is missing: apt-get install -y nats-server", flush=True)
        if os.geteuid() != 0:
            raise SystemExit("bench_peers: not root: install nats-server (Debian package) first")
        subprocess.run(["apt-get", "install", "-y", "nats-server"], check=True,
                       stdout=subprocess.DEVNULL)
    if importlib.util.find_spec("nats") is None:
        print(f"bench_peers: nats-py is missing: pip install nats-py into {sys.prefix}",
              flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "nats-py"],
                       check=True)


# --- servers -----------------------------------------------------------------------------

class Servers:
    """A system's servers for one run: ``pids`` to read CPU from, addresses for the clients."""

    def __init__(self, pids: dict[str, int], url: str = "", redis_url: str = "") -> None:
        self.pids, self.url, self.redis_url = pids, url, redis_url

    def cpu(self) -> dict[str, float]:
        return {name: proc_cpu(pid) for name, pid in self.pids.items()}


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} not listening on {port} after 20 s")


@contextlib.contextmanager
def servers(system: str, tmp: Path) -> Iterator[Servers]:
    if system == "jetstream":
        port = free_port()
        store = tmp / "nats"
        log = tmp / "nats.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store)],
                stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_port(port, proc, "nats-server", log)
            yield Servers({"nats-server": proc.pid}, url=f"nats://127.0.0.1:{port}")
        finally:
            stop(proc)
        return
    with EmbeddedRedis(appendfsync="everysec") as redis:
        assert redis.pid is not None
        if system == "streams":
            yield Servers({"redis-server": redis.pid}, redis_url=redis.url)
            return
        url = f"127.0.0.1:{free_port()}"
        ready = tmp / "serve-ready"
        log = tmp / "serve.log"
        with open(log, "wb") as out:
            comp = subprocess.Popen(
                [sys.executable, "-m", "seqrepair.cli", "serve", "--url", url, "--redis-url",
                 redis.url, "--ready-file", str(ready), "--allow-anonymous"],
                env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=out,
                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not ready.exists():
                if comp.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"seqrepair serve did not start: "
                                       f"{log.read_text()[-2000:]}")
                time.sleep(0.05)
            yield Servers({"component": comp.pid, "redis-server": redis.pid}, url=url,
                          redis_url=redis.url)
        finally:
            stop(comp)


# --- clients -----------------------------------------------------------------------------

class Client:
    """One ``peer_clients.py`` process: JSON lines out, a go line in."""

    def __init__(self, role: str, system: str, mode: str, srv: Servers, n: int,
                 args: argparse.Namespace, tmp: Path) -> None:
        self.name = f"{role}-{system}-{mode}"
        self.log = tmp / f"{self.name}.log"
        self.timeout = args.timeout
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(CLIENTS), role, system, mode, "--url", srv.url,
                 "--redis-url", srv.redis_url, "--n", str(n), "--rate", str(args.rate),
                 "--timeout", str(args.timeout)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                env=dict(os.environ, PYTHONPATH=str(ROOT)))

    def read(self, key: str, timeout: float) -> Any:
        """The next JSON line's ``key`` (ready, result)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise RuntimeError(f"{self.name}: no {key} in {timeout:g} s; "
                                   f"{self.log.read_text()[-2000:]}")
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(5)
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before "
                                   f"its {key}: {self.log.read_text()[-2000:]}")
            record = json.loads(line)
            if key in record:
                return record[key]

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = self.read("result", self.timeout + 60)
        self.proc.wait(30)
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def run_one(system: str, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run of one workload against one system on fresh servers: its figures, or
    ``failed`` saying why."""
    n = args.n if workload != "latency" else int(args.rate * args.latency_seconds)
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmpname:
        tmp = Path(tmpname)
        clients: list[Client] = []
        try:
            with servers(system, tmp) as srv:
                return _workload(system, workload, n, srv, args, tmp, clients)
        except RuntimeError as exc:
            return {"system": system, "workload": workload, "n": n, "failed": str(exc)}
        finally:
            for client in clients:
                client.kill()


def _workload(system: str, workload: str, n: int, srv: Servers, args: argparse.Namespace,
              tmp: Path, clients: list[Client]) -> dict[str, Any]:
    def start(role: str, mode: str) -> Client:
        clients.append(Client(role, system, mode, srv, n, args, tmp))
        return clients[-1]

    out: dict[str, Any] = {"system": system, "workload": workload, "n": n}
    if workload == "catchup":
        prepared = start("sub", "prepare").result()
        pub = start("pub", "throughput")
        pub.read("ready", 60)
        pub.go()
        published = pub.result()
        sub = start("sub", "catchup")
        sub.read("ready", 60)
        before = srv.cpu()
        sub.go()
        got = sub.result()
        after = srv.cpu()
        if not prepared.get("prepared"):
            return {**out, "failed": f"the durable position was not made: {prepared}"}
        elapsed = got["last"] - got["go"]
        client_cpu = {"subscriber": got["cpu_s"]}
    else:
        sub = start("sub", workload)
        sub.read("ready", 60)
        pub = start("pub", workload)
        pub.read("ready", 60)
        before = srv.cpu()
        sub.go()
        pub.go()
        published = pub.result()
        got = sub.result()
        after = srv.cpu()
        elapsed = got["last"] - published["first"]
        client_cpu = {"publisher": published["cpu_s"], "subscriber": got["cpu_s"]}
    cpu = {name: after[name] - before[name] for name in before} | client_cpu
    out["cpu_s"] = {k: round(v, 3) for k, v in cpu.items()}
    out["cpu_us_per_pub"] = round(1e6 * sum(cpu.values()) / n, 1)
    out["exactness"] = {k: got[k] for k in ("exact", "seen", "through", "duplicates",
                                            "skipped", "first_wrong")}
    if "stats" in got:
        out["stub"] = got["stats"]
    if not got["exact"] or not published["flushed"] or published["accepted"] != n:
        out["failed"] = (f"not exact: {out['exactness']}, publisher flushed "
                         f"{published['flushed']}, accepted {published['accepted']} of {n}")
        return out
    out["rate"] = round(n / elapsed, 1)
    if workload == "latency":
        lat = sorted(got["latencies"])
        out.update(p50_ms=round(1000 * lat[len(lat) // 2], 3),
                   p99_ms=round(1000 * lat[int(0.99 * (len(lat) - 1))], 3),
                   max_ms=round(1000 * lat[-1], 3),
                   publisher_rate=round(n / published["paced_s"], 1),
                   publisher_max_behind_ms=round(1000 * published["max_behind_s"], 1))
    if workload == "catchup" and "stats" in got:
        out["duplicates_dropped"] = got["stats"]["duplicates"]
        out["duplicates_pct"] = round(100 * got["stats"]["duplicates"] / n, 3)
        out["source_requests"] = got["stats"]["source_requests_sent"]
    return out


# --- the table ---------------------------------------------------------------------------

def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if "failed" not in r and key in r]
    return statistics.median(values) if values else None


def per_round(runs: list[dict[str, Any]], workload: str, peer: str,
              key: str) -> list[float]:
    """seqrepair / ``peer`` of ``key`` in each round both ran (the same minutes of load)."""
    def figure(system: str, rnd: int) -> float | None:
        for r in runs:
            if (r["system"], r["workload"], r["round"]) == (system, workload, rnd):
                return r.get(key) if "failed" not in r else None
        return None

    out = []
    for rnd in sorted({r["round"] for r in runs}):
        mine, theirs = figure("seqrepair", rnd), figure(peer, rnd)
        if mine and theirs:
            out.append(round(mine / theirs, 3))
    return out


def summarize(runs: list[dict[str, Any]], systems: list[str],
              workloads: list[str]) -> dict[str, Any]:
    """Per workload and system: medians of the figures; ratios seqrepair / each peer."""
    figures = {"throughput": ["rate", "cpu_us_per_pub"],
               "latency": ["p50_ms", "p99_ms", "max_ms", "publisher_rate", "cpu_us_per_pub"],
               "catchup": ["rate", "duplicates_pct", "cpu_us_per_pub"]}
    summary: dict[str, Any] = {}
    for workload in workloads:
        per: dict[str, Any] = {}
        for system in systems:
            mine = [r for r in runs if r["system"] == system and r["workload"] == workload]
            per[system] = {key: median_of(mine, key) for key in figures[workload]}
            per[system]["runs"] = len(mine)
            per[system]["failed"] = sum("failed" in r for r in mine)
            if workload == "catchup" and system == "seqrepair":  # the goal holds per run
                done = [r for r in mine if "failed" not in r]
                per[system]["duplicates_pct_max"] = max(
                    (r["duplicates_pct"] for r in done), default=None)
                per[system]["source_requests"] = [r["source_requests"] for r in done]
        ratios: dict[str, Any] = {}
        if "seqrepair" in per:
            for peer in (s for s in systems if s != "seqrepair"):
                ratios[peer] = {
                    key: (round(per["seqrepair"][key] / per[peer][key], 3)
                          if per["seqrepair"][key] and per[peer][key] else None)
                    for key in figures[workload] if key != "duplicates_pct"}
                ratios[peer]["per_round"] = {
                    key: per_round(runs, workload, peer, key)
                    for key in figures[workload] if key != "duplicates_pct"}
        summary[workload] = {"median": per, "seqrepair_over": ratios,
                             "goal": GOALS[workload], "met": goal_met(workload, per)}
    return summary


def goal_met(workload: str, per: dict[str, Any]) -> bool | None:
    mine = per.get("seqrepair")
    if mine is None or mine.get("failed"):
        return None if mine is None else False
    jet = per.get("jetstream")
    if workload == "latency":
        return (mine["p50_ms"] is not None and mine["p50_ms"] < 2.0
                and mine["p99_ms"] < 20.0)
    if jet is None or not jet["rate"] or not mine["rate"]:
        return None
    met = bool(mine["rate"] >= jet["rate"])
    if workload == "catchup":
        met = met and mine["duplicates_pct_max"] is not None and mine["duplicates_pct_max"] < 1.0
    return met


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "/s":
        return f"{value / 1000:.1f}k/s"
    return f"{value:.2f}{unit}" if value < 100 else f"{value:.0f}{unit}"


def print_table(summary: dict[str, Any], systems: list[str]) -> None:
    peers = [s for s in systems if s != "seqrepair"] if "seqrepair" in systems else []
    head = ["figure (median of the rounds)", *systems,
            *(f"seqrepair/{p} (per round)" for p in peers), "goal", "met"]
    rows: list[list[str]] = []

    def row(label: str, workload: str, key: str, unit: str) -> None:
        if workload not in summary:
            return
        med, ratio = summary[workload]["median"], summary[workload]["seqrepair_over"]
        cells = []
        for s in systems:
            failed = f" ({med[s]['failed']} failed)" if med[s]["failed"] else ""
            cells.append(fmt(med[s].get(key), unit) + failed)
        ratios = []
        for p in peers:
            rounds = ratio.get(p, {}).get("per_round", {}).get(key, [])
            spread = f" ({min(rounds):.2f}-{max(rounds):.2f})" if len(rounds) > 1 else ""
            ratios.append(fmt(ratio.get(p, {}).get(key), "x") + spread)
        goal = summary[workload]["goal"] if key in ("rate", "p50_ms") else ""
        met = summary[workload]["met"] if key in ("rate", "p50_ms") else ""
        rows.append([label, *cells, *ratios, goal, str(met)])

    row("end-to-end throughput", "throughput", "rate", "/s")
    row("CPU per publication, throughput run", "throughput", "cpu_us_per_pub", " us")
    row("p50 at the fixed rate", "latency", "p50_ms", " ms")
    row("p99 at the fixed rate", "latency", "p99_ms", " ms")
    row("max at the fixed rate", "latency", "max_ms", " ms")
    row("publisher's achieved rate", "latency", "publisher_rate", "/s")
    row("CPU per publication, latency run", "latency", "cpu_us_per_pub", " us")
    row("catch-up of N missed", "catchup", "rate", "/s")
    row("duplicates dropped, % of N", "catchup", "duplicates_pct", "%")
    row("duplicates dropped, % of N, worst run", "catchup", "duplicates_pct_max", "%")
    row("CPU per publication, catch-up", "catchup", "cpu_us_per_pub", " us")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, ["-" * w for w in widths], *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=100_000,
                        help="publications per throughput and catch-up run (default 100,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--rate", type=float, default=1000.0,
                        help="publications/s of the latency workload (default 1,000)")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="seconds a client waits for its run (0: 60 + N/500)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/peers.json")
    parser.add_argument("--table", type=Path, metavar="JSON",
                        help="only print the table of an earlier run's JSON (summarized again)")
    args = parser.parse_args()
    if args.table is not None:
        earlier = json.loads(args.table.read_text())
        runs = earlier["runs"]
        names = list(dict.fromkeys(r["system"] for r in runs))
        systems = [s for s in SYSTEMS if s in names]
        print(earlier["command"])
        print_table(summarize(runs, systems, list(dict.fromkeys(r["workload"] for r in runs))),
                    systems)
        return
    systems = [s for s in args.systems.split(",") if s]
    workloads = [w for w in args.workloads.split(",") if w]
    if bad := set(systems) - set(SYSTEMS) | set(workloads) - set(WORKLOADS):
        parser.error(f"unknown system or workload: {sorted(bad)}")
    if args.timeout <= 0:
        args.timeout = 60 + max(args.n, args.rate * args.latency_seconds) / 500
    if "jetstream" in systems:
        ensure_installed()
    load_before = os.getloadavg()
    started = time.time()
    runs: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        order = systems[rnd % len(systems):] + systems[:rnd % len(systems)]
        for workload in workloads:
            for system in order:
                run = run_one(system, workload, args)
                run["round"] = rnd + 1
                runs.append(run)
                shown = {k: v for k, v in run.items() if k not in ("exactness", "stub")}
                print(json.dumps(shown), flush=True)
    summary = summarize(runs, systems, workloads)
    record = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "n": args.n, "rounds": args.rounds, "rate": args.rate,
        "latency_seconds": args.latency_seconds,
        "load_avg_before_after": [load_before, os.getloadavg()],
        "seconds": round(time.time() - started, 1),
        "summary": summary, "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print()
    print(f"N={args.n}, {args.rounds} round(s), latency at {args.rate:g}/s for "
          f"{args.latency_seconds:g} s; load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}; "
          f"{record['seconds']:.0f} s; JSON in {args.out}")
    print_table(summary, systems)


if __name__ == "__main__":
    main()
