"""Publications per second through one relay hop vs direct, and a relay's catch-up, in one run.

    .venv/bin/python benchmarks/bench_relay.py [N] [ROUNDS] [--catch-up M]
        [--baseline-relay TREE] [--profile DIR] [--trace DIR] [--sites]

Direct: ``seqrepair serve`` (A, journal on a private redis-server) and one subscriber (this
process, driving the SubscriberStub) on A. Relayed: the same A, a ``seqrepair relay`` (B, its
own redis-server, ``--subscribe /load/#``) subscribed to A, and the subscriber on B: every
publication is delivered to B, journaled in B's journal, fanned out by B. The publisher is
``seqrepair publish`` (journal first, batches of 256) into A. Direct and relayed rounds are
interleaved ROUNDS times (default 2), each with fresh processes and Redis: rate = deliveries /
(last - first delivery) at the subscriber. The figure is relayed / direct (goal >= 0.7), as
the ratio of the best rates and of the median rates (on a shared machine one lucky round can
make the best of either side). Every round checks that the subscriber got exactly the
numbers 1..N, once each and in order (``exact``), and measures the CPU per publication of
every process (origin, relay with its event loop and its upstream thread apart, both
redis-servers, publisher, the subscriber in this process): on two shared cores the ratio
follows the CPU the relayed path needs over all its processes. ``--baseline-relay TREE``
adds relayed rounds whose relay alone runs the code of TREE (another checkout), interleaved:
the relay's before/after in the same run. ``--profile DIR``: serve and relay under
``profproc.py`` (cProfile per thread). ``--trace DIR``: the relay under ``relaytrace.py``
(per-stage times of each batch, each thread's CPU), the subscriber's delivery times kept, and
the cores busy over each delivery window printed (stderr); see ``notes/relay-bound.md``.

Each round also measures the publisher's start-up (one publication no subscriber selects):
``publisher_startup`` and ``total_net`` (the CPU per publication net of it, spent before the
first delivery), and ``cpu_ratio_net``, direct over relayed ``total_net``: the ratio the CPU
alone predicts (on two shared cores the rate ratio follows it: ``notes/relay-bound.md``).

``--sites`` (opt-in; ``sites.py``): one core per site, a model of sites on separate hosts
instead of the shared-cores figure above. Core 0 is the origin's site (publisher, serve, A's
redis-server) in every round; core 1 the subscriber's site (this process, every thread of it)
and, in relayed rounds, also B and its redis-server (the relay shares its core with the
subscriber: conservative). Children run under ``taskset -c``, the redis-servers and this
process are pinned thread by thread; each process's ``Cpus_allowed_list`` (every thread) is
read back each round, printed once per round kind (stderr), and a round whose pinning did not
hold stops the run. Each round adds ``core_busy`` (each core's busy share from ``/proc/stat``
between the first and the N-th delivery: the core near 1.0 is the site that bound the round)
and ``site_cpu_us_per_pub`` (the CPU per publication of each core's processes, the publisher
net of its start-up); the JSON names the mode (``"sites": true``, ``model``) and the
assignment (``site_assignment``), and a summary on stderr says it is the one-core-per-site
model. Catch-up is pinned the same way (B and its redis on core 1). Without ``--sites``
nothing of this runs: output and behaviour are the default mode's.

Catch-up: with B attached once (its durable position kept at A) and then stopped (SIGTERM),
M publications (default 100,000) go into A; B is started again and the time until B's journal
holds all of them is measured (B replays by source from A after its position), as
publications per second, next to the direct rate of the same run, with the relay's CPU
per publication, and B's journal compared entry by entry with A's (``exact``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sites  # noqa: E402
from procs import free_port, proc_cpu, stop  # noqa: E402

from seqrepair.amqp.client.subscriber import Subscriber  # noqa: E402
from seqrepair.journal.journal import Journal  # noqa: E402
from seqrepair.journal.server import EmbeddedRedis  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
SERVE_ARGS: list[str] = []  # --serve-arg: more arguments of the origin's serve, every round
PROFILE: Path | None = None  # --profile DIR: serve and relay under profproc.py (cProfile)
TRACE: Path | None = None  # --trace DIR: relay under relaytrace.py, subscriber times kept
SITES = False  # --sites: one core per site (sites.py)
SITE_CORE = {"serve": sites.ORIGIN, "relay": sites.SUBSCRIBER}
_shown: set[str] = set()  # round kinds whose pinning was printed (--sites)
_runs = itertools.count()


def start(args: list[str], name: str, tree: Path = ROOT) -> tuple[subprocess.Popen[bytes], str]:
    """A ``seqrepair`` process listening on a free port (its ``--ready-file`` waited for),
    running the code of ``tree``."""
    url = f"127.0.0.1:{free_port()}"
    ready = Path(f"/tmp/bench-relay-{os.getpid()}-{name}")
    ready.unlink(missing_ok=True)
    flag = "--url" if args[0] == "serve" else "--listen"
    command = [sys.executable, "-m", "seqrepair.cli"]
    if PROFILE is not None:
        PROFILE.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, str(ROOT / "benchmarks" / "profproc.py"),
                   str(PROFILE / f"{next(_runs):02d}-{args[0]}")]
    elif TRACE is not None and args[0] == "relay":
        TRACE.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, str(ROOT / "benchmarks" / "relaytrace.py"),
                   str(TRACE / f"{next(_runs):02d}-relay.json")]
    if SITES:
        command = [*sites.taskset(SITE_CORE[args[0]]), *command]
    proc = subprocess.Popen(
        [*command, *args, flag, url, "--ready-file", str(ready), "--allow-anonymous"],
        env=dict(ENV, PYTHONPATH=str(tree)), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, cwd=tree,  # ``-m`` puts the working directory first
    )
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"seqrepair {args[0]} exited with {proc.returncode}")
        time.sleep(0.05)
    ready.unlink()
    return proc, url


def publish(url: str, redis_url: str, n: int, source: str = "bench",
            topics: str = "/load/a,/load/b",
            pinned: dict[str, tuple[list[str], int]] | None = None,
            started: Callable[[int], None] | None = None) -> float:
    """``seqrepair publish`` of ``n`` into ``url``; the CPU seconds it used. With ``--sites``
    it runs on the origin's core, its threads' affinity put in ``pinned``, ``started`` told
    its pid."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [sys.executable, "-m", "seqrepair.cli", "publish", "--url", url, "--redis-url",
               redis_url, "--source", source, "--count", str(n), "--batch", "256",
               "--topics", topics]
    if SITES:
        seen = sites.run_pinned(command, sites.ORIGIN, ENV, timeout=1200, started=started)
        if pinned is not None:
            pinned["publisher"] = (seen, sites.ORIGIN)
    else:
        subprocess.run(command, env=ENV, check=True, capture_output=True, timeout=1200)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # only this child was reaped since
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def threads_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of ``pid``'s main thread and of its other threads together (a relay's
    upstream subscriber runs in its own thread)."""
    main = other = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        if task.name == str(pid):
            main += used
        else:
            other += used
    return main, other


class IdleSampler:
    """The machine's busy jiffies (``/proc/stat``) every 5 ms, in a thread (``--trace``): how
    many cores were busy over a delivery window."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> IdleSampler:
        self._thread.start()
        return self

    def stop(self) -> IdleSampler:
        self._stop.set()
        self._thread.join()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
            self.samples.append((time.perf_counter(), sum(fields) - fields[3] - fields[4]))
            time.sleep(0.005)

    def busy(self, first: float, last: float) -> float:
        """Cores busy on average between ``first`` and ``last`` (perf_counter times)."""
        inside = [s for s in self.samples if first <= s[0] <= last]
        if len(inside) < 2:
            return float("nan")
        jiffies = inside[-1][1] - inside[0][1]
        return jiffies / os.sysconf("SC_CLK_TCK") / (inside[-1][0] - inside[0][0])


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def rate(n: int, relayed: bool, relay_tree: Path = ROOT) -> dict[str, Any]:
    """One round: deliveries per second at a subscriber of A (direct) or of B (relayed, B
    running the code of ``relay_tree``)."""
    kind = "relayed" if relayed else "direct"
    pinned: dict[str, tuple[list[str], int]] = {}
    window = sites.Window()  # --sites: cores' and processes' CPU at the 1st and n-th delivery
    with EmbeddedRedis() as redis_a, EmbeddedRedis() as redis_b:
        if SITES:
            sites.pin(pid_of(redis_a), sites.ORIGIN)
            sites.pin(pid_of(redis_b), sites.SUBSCRIBER)
        comp, a_url = start(["serve", "--redis-url", redis_a.url, "--max-pending", "200000",
                             *SERVE_ARGS], "a")
        procs = [comp]
        window.pids.update(origin=comp.pid, redis_origin=pid_of(redis_a),
                           subscriber=os.getpid())
        try:
            url = a_url
            if relayed:
                relay, url = start(["relay", "--upstream", a_url, "--redis-url", redis_b.url,
                                    "--subscribe", "/load/#", "--name", "b"], "b",
                                   relay_tree)
                procs.append(relay)
                window.pids.update(relay=relay.pid, redis_relay=pid_of(redis_b))
            times: list[float] = []
            numbers: list[int] = []

            def delivered(pub: Any) -> None:
                times.append(time.perf_counter())
                numbers.append(pub.source_seq)

            def delivered_marked(pub: Any) -> None:  # --sites
                times.append(time.perf_counter())
                numbers.append(pub.source_seq)
                if len(times) == 1 or len(times) == n:
                    window.mark(times[-1])

            sub = Subscriber(url, "/load/#", on_publication=delivered_marked if SITES
                             else delivered, credit=500).start()
            sub.wait_connected(20)
            time.sleep(1.0)  # the relay's upstream link is attached too
            # the publisher's start-up (interpreter, imports, connecting): one publication
            # no subscriber here selects, so the CPU per publication can be told net of it
            startup_cpu = publish(a_url, redis_a.url, 1, source="startup",
                                  topics="/startup/x", pinned=pinned)
            if SITES:
                pinned["publisher_startup"] = pinned.pop("publisher")
            pids = [p.pid for p in procs] + [redis_a.pid] + ([redis_b.pid] if relayed else [])
            cpu_before = [proc_cpu(pid) for pid in pids] + [own_cpu()]
            threads_before = threads_cpu(procs[-1].pid)
            sampler = IdleSampler().start() if TRACE is not None else None
            publisher_cpu = publish(a_url, redis_a.url, n, pinned=pinned,
                                    started=lambda pid: window.pids.update(publisher=pid))
            deadline = time.monotonic() + 300
            while len(times) < n and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # anything past n (a duplicate) would come now
            cpu = [after - before for before, after in zip(
                cpu_before, [proc_cpu(pid) for pid in pids] + [own_cpu()], strict=True)]
            threads = [after - before for before, after in zip(
                threads_before, threads_cpu(procs[-1].pid), strict=True)]
            if SITES:  # every thread of every process, as the kernel holds it now
                pinned.update(origin=(sites.allowed(comp.pid), sites.ORIGIN),
                              redis_origin=(sites.allowed(pid_of(redis_a)), sites.ORIGIN),
                              subscriber=(sites.allowed(os.getpid()), sites.SUBSCRIBER))
                if relayed:
                    pinned.update(relay=(sites.allowed(procs[1].pid), sites.SUBSCRIBER),
                                  redis_relay=(sites.allowed(pid_of(redis_b)),
                                               sites.SUBSCRIBER))
                show_pinning(kind, pinned)
            sub.stop()
            stats = sub.stats().as_dict()
            if TRACE is not None:
                TRACE.mkdir(parents=True, exist_ok=True)
                (TRACE / f"{next(_runs):02d}-sub-{kind}.json").write_text(
                    json.dumps([time.time() - time.perf_counter(), times, numbers]))
            if sampler is not None:
                busy = sampler.stop().busy(times[0], times[-1])
                print(f"{kind}: cores busy over the delivery window {busy:.2f} of "
                      f"{os.cpu_count()}", file=sys.stderr)
        finally:
            for proc in reversed(procs):
                stop(proc)
    per_pub = {"origin": cpu[0] / n * 1e6, "publisher": publisher_cpu / n * 1e6,
               "subscriber": cpu[-1] / n * 1e6, "redis_origin": cpu[len(procs)] / n * 1e6}
    if relayed:
        per_pub["relay"] = cpu[1] / n * 1e6
        per_pub["redis_relay"] = cpu[len(procs) + 1] / n * 1e6
        per_pub["relay_main"] = threads[0] / n * 1e6  # journal, fan-out
        per_pub["relay_upstream"] = threads[1] / n * 1e6  # decoding, upstream stub
    per_pub["total"] = sum(v for k, v in per_pub.items() if k not in ("relay_main",
                                                                     "relay_upstream"))
    # net of the publisher's start-up, which is spent before the first delivery: on two
    # shared cores the rate follows this total (benchmarks/notes/relay-bound.md)
    per_pub["publisher_startup"] = startup_cpu / n * 1e6
    per_pub["total_net"] = per_pub["total"] - per_pub["publisher_startup"]
    result = {"delivered": len(times), "rate": (len(times) - 1) / (times[-1] - times[0]),
              "exact": numbers == list(range(1, n + 1)),  # every number once, in order
              "cpu_us_per_pub": {k: round(v, 1) for k, v in per_pub.items()},
              "repaired": stats["repaired"], "unrecoverable": stats["unrecoverable"]}
    if SITES:
        # the window's busy share of each core: the site whose core is near 1.0 bound it
        cores = {name: core for core, names in sites.ASSIGNMENT[kind].items()
                 for name in names}
        busy = window.busy({name: int(core) for name, core in cores.items()},
                           ended={"publisher": publisher_cpu})
        result["core_busy"] = busy[0] if busy is not None else None
        # of it, this round's processes (the rest: anything else running on the machine)
        result["core_busy_own"] = busy[1] if busy is not None else None
        result["site_cpu_us_per_pub"] = site_cpu(per_pub)
        result["pinned"] = {name: seen for name, (seen, _) in pinned.items()}
    return result


def pid_of(server: EmbeddedRedis) -> int:
    """The running redis-server's process id."""
    if server.pid is None:
        raise RuntimeError("the redis-server is not running")
    return server.pid


def show_pinning(kind: str, pinned: dict[str, tuple[list[str], int]]) -> None:
    """Stop unless every process was held to its site's core; print it once per kind."""
    sites.verify(pinned)
    if kind not in _shown:
        _shown.add(kind)
        held = ", ".join(f"{name} {','.join(seen)}" for name, (seen, _) in pinned.items())
        print(f"--sites {kind}: Cpus_allowed_list (every thread): {held}", file=sys.stderr)


def site_cpu(per_pub: dict[str, float]) -> dict[str, float]:
    """CPU microseconds per publication of each core's processes (--sites), the publisher net
    of its start-up (spent before the first delivery)."""
    on_origin = (per_pub["origin"] + per_pub["redis_origin"] + per_pub["publisher"]
                 - per_pub["publisher_startup"])
    on_subscriber = per_pub["subscriber"] + per_pub.get("relay", 0.0) + per_pub.get(
        "redis_relay", 0.0)
    return {str(sites.ORIGIN): round(on_origin, 1), str(sites.SUBSCRIBER): round(on_subscriber, 1)}


def catch_up(m: int) -> dict[str, Any]:
    """Seconds until a relay that was down for ``m`` publications journals all of them."""
    pinned: dict[str, tuple[list[str], int]] = {}
    with EmbeddedRedis() as redis_a, EmbeddedRedis() as redis_b, ExitStack() as stack:
        if SITES:
            sites.pin(pid_of(redis_a), sites.ORIGIN)
            sites.pin(pid_of(redis_b), sites.SUBSCRIBER)
        comp, a_url = start(["serve", "--redis-url", redis_a.url, *SERVE_ARGS], "a")
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
                publish(a_url, redis_a.url, m, source="bench", pinned=pinned)  # after 10
                journal_a = stack.enter_context(Journal.from_url(redis_a.url))
                target = journal_a.high_water("bench")
                began = time.perf_counter()
                first = (began, sites.cpu_jiffies()) if SITES else None
                relay, _ = start(relay_args, "b")
                deadline = time.monotonic() + 1800
                while journal_b.high_water("bench") < target and time.monotonic() < deadline:
                    time.sleep(0.05)
                took = time.perf_counter() - began
                busy = (sites.core_busy(first, (began + took, sites.cpu_jiffies()))
                        if first is not None else None)
                relay_cpu = proc_cpu(relay.pid)
                if SITES:
                    pinned.update(origin=(sites.allowed(comp.pid), sites.ORIGIN),
                                  redis_origin=(sites.allowed(pid_of(redis_a)), sites.ORIGIN),
                                  relay=(sites.allowed(relay.pid), sites.SUBSCRIBER),
                                  redis_relay=(sites.allowed(pid_of(redis_b)),
                                               sites.SUBSCRIBER),
                                  bench=(sites.allowed(os.getpid()), sites.SUBSCRIBER))
                    show_pinning("catch_up", pinned)
                held = journal_b.high_water("bench")
                # exactly what A holds, in order, under the same numbers and content
                exact = held == target and all(
                    a is not None and b is not None and a == b
                    for a, b in itertools.zip_longest(
                        journal_a.iter_range("bench", 1, target),
                        journal_b.iter_range("bench", 1, target)))
            stop(relay)
        finally:
            stop(comp)
    result = {"publications": m, "seconds": round(took, 2), "rate": round(m / took),
              "caught_up": held == target, "exact": exact,
              "relay_cpu_us_per_pub": round(relay_cpu / m * 1e6, 1)}
    if busy is not None:  # --sites: from the relay's start to all journaled, start-up included
        result["core_busy"] = busy
    return result


def cpu_medians(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Per process, the median over ``rounds`` of its CPU microseconds per publication."""
    return {name: round(statistics.median(r["cpu_us_per_pub"][name] for r in rounds), 1)
            for name in rounds[0]["cpu_us_per_pub"]}


def main() -> None:
    global PROFILE, TRACE, SITES
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=20_000)
    parser.add_argument("rounds", nargs="?", type=int, default=2)
    parser.add_argument("--catch-up", type=int, default=100_000, metavar="M",
                        help="publications a stopped relay catches up on (0: none)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="run serve and relay under cProfile (benchmarks/profproc.py), "
                             "a pstats file per process and thread in DIR")
    parser.add_argument("--trace", type=Path, metavar="DIR",
                        help="run the relay under benchmarks/relaytrace.py (per-stage times of "
                             "each batch) and keep the subscriber's delivery times, in DIR")
    parser.add_argument("--baseline-relay", type=Path, metavar="TREE",
                        help="also relayed rounds with the relay (only it) running the code of "
                             "TREE (another checkout), interleaved: the relay's before/after")
    parser.add_argument("--sites", action="store_true",
                        help="one core per site (a model of sites on separate hosts, not the "
                             "shared-cores figure): core 0 the origin's site, core 1 the "
                             "subscriber's, with the relay and its redis in relayed rounds")
    parser.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                        help="one more argument of the origin's serve, in direct and relayed "
                             "rounds alike (repeat it: --serve-arg=--max-batch "
                             "--serve-arg=1024)")
    args = parser.parse_args()
    SERVE_ARGS.extend(args.serve_arg)
    PROFILE = args.profile
    TRACE = args.trace
    SITES = args.sites
    if SITES:
        sites.check_machine()
        sites.pin(os.getpid(), sites.SUBSCRIBER)  # the subscriber's threads inherit it
    direct: list[dict[str, Any]] = []
    relayed: list[dict[str, Any]] = []
    baseline: list[dict[str, Any]] = []
    loads = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        direct.append(rate(args.n, relayed=False))
        relayed.append(rate(args.n, relayed=True))
        if args.baseline_relay is not None:
            baseline.append(rate(args.n, relayed=True, relay_tree=args.baseline_relay))
        loads.append(os.getloadavg()[0])
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
        "exact": all(r["exact"] for r in direct + relayed),
        "cpu_us_per_pub_direct": cpu_medians(direct),
        "cpu_us_per_pub_relayed": cpu_medians(relayed),
        "load": [round(x, 1) for x in loads],
    }
    # what the CPU alone predicts for the ratio (the rate follows the CPU on 2 shared cores)
    result["cpu_ratio_net"] = round(result["cpu_us_per_pub_direct"]["total_net"]
                                    / result["cpu_us_per_pub_relayed"]["total_net"], 3)
    if baseline:
        result["baseline_relay"] = {
            "tree": str(args.baseline_relay),
            "relayed": [round(r["rate"]) for r in baseline],
            "ratio_of_medians": round(statistics.median(r["rate"] for r in baseline)
                                      / statistics.median(r["rate"] for r in direct), 3),
            "exact": all(r["exact"] and r["delivered"] == args.n for r in baseline),
            "cpu_us_per_pub": cpu_medians(baseline),
        }
    if SITES:
        result.update(sites_fields(direct, relayed, baseline))
    if args.catch_up:
        result["catch_up"] = catch_up(args.catch_up)
        result["catch_up"]["vs_direct"] = round(result["catch_up"]["rate"] / best_direct, 3)
        result["load"].append(round(os.getloadavg()[0], 1))
    if SITES:
        summarize_sites(result)
    print(json.dumps(result))


def sites_fields(direct: list[dict[str, Any]], relayed: list[dict[str, Any]],
                 baseline: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``--sites`` adds to the result: the mode, the assignment of processes to cores,
    each round's cores busy over its delivery window and the CPU of each core's processes."""
    fields: dict[str, Any] = {
        "sites": True, "model": sites.MODEL, "site_assignment": sites.ASSIGNMENT,
        "core_busy_direct": [r["core_busy"] for r in direct],
        "core_busy_relayed": [r["core_busy"] for r in relayed],
        "core_busy_own_direct": [r["core_busy_own"] for r in direct],
        "core_busy_own_relayed": [r["core_busy_own"] for r in relayed],
        "site_cpu_us_per_pub_direct": site_medians(direct),
        "site_cpu_us_per_pub_relayed": site_medians(relayed),
        "pinned": {"direct": direct[0]["pinned"], "relayed": relayed[0]["pinned"]},
    }
    if baseline:
        fields["core_busy_baseline_relay"] = [r["core_busy"] for r in baseline]
        fields["site_cpu_us_per_pub_baseline_relay"] = site_medians(baseline)
    return fields


def site_medians(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Per core, the median over ``rounds`` of its processes' CPU per publication."""
    return {core: round(statistics.median(r["site_cpu_us_per_pub"][core] for r in rounds), 1)
            for core in rounds[0]["site_cpu_us_per_pub"]}


def summarize_sites(result: dict[str, Any]) -> None:
    """The ``--sites`` run in words (stderr): the model, the ratio, which core was busiest."""
    lines = [f"MODEL: {result['model']}",
             f"ratio relayed/direct (one core per site): best {result['ratio']}, "
             f"of medians {result['ratio_of_medians']}; exact {result['exact']}"]
    for kind in ("direct", "relayed"):
        rates = ", ".join(f"{r / 1000:.1f}k" for r in result[kind])
        busy = "; ".join("n/a" if b is None else "/".join(
            f"{x:.2f} ({y:.2f})" for x, y in zip(b, own, strict=True))
            for b, own in zip(result[f"core_busy_{kind}"], result[f"core_busy_own_{kind}"],
                              strict=True))
        cpu = result[f"site_cpu_us_per_pub_{kind}"]
        lines.append(f"{kind}: {rates}/s; cores 0/1 busy over each delivery window, (of it "
                     f"this round's processes): {busy}; CPU us/pub core 0 {cpu['0']}, "
                     f"core 1 {cpu['1']}")
        known = [b for b in result[f"core_busy_{kind}"] if b is not None]
        if known:
            medians = [statistics.median(b[core] for b in known) for core in (0, 1)]
            top = max((0, 1), key=lambda core: medians[core])
            site = "origin's" if top == sites.ORIGIN else "subscriber's"
            lines.append(f"  {kind}: busiest core {top} ({site} site), median busy "
                         f"{medians[top]:.2f}; the other {medians[1 - top]:.2f}")
    if "catch_up" in result and "core_busy" in result["catch_up"]:
        busy = "/".join(f"{x:.2f}" for x in result["catch_up"]["core_busy"])
        lines.append(f"catch-up: {result['catch_up']['rate']}/s, cores 0/1 busy {busy}")
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
