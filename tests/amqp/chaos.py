"""The chaos harness (issue 24): one component, an honest feed and subscriber, one attack.

Shared by ``tests/amqp/test_chaos.py`` and ``benchmarks/bench_attacks.py``. A :class:`Scenario`
starts a private redis-server and ``seqrepair serve`` (real processes), optionally fills the
journal (the replay a repair flood asks for), starts the honest subscriber (the library
``Subscriber``, in this process, timing every delivery) and the honest feed (a paced journaling
``Publisher`` in a process of its own: ``python tests/amqp/chaos.py feed ...``), samples the
component's RSS and descriptors every 0.5 s from ``/proc``, and runs an attack from
:mod:`attacks` (its own process) for a while in the middle of the feed. :class:`Outcome` holds
what came of it: the honest deliveries (delay = arrival - publish time, inter-delivery gaps),
whether the honest source arrived exactly once and in order compared with the journal, the RSS
samples and the attacker's report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ATTACKER = HERE / "attacks.py"
ATTACKER_NICE = 10

HONEST_SOURCE = "feed.honest"
FILL_SOURCE = "feed.history"
HONEST_PATTERN = "/honest/#"

MIB = 1 << 20
SERVE_ARGS: list[str] = [
    "--link-context-bytes", str(4 * MIB), "--link-unsent-bytes", str(MIB),
    "--connection-bytes", str(8 * MIB), "--principal-bytes", str(16 * MIB),
    "--component-bytes", str(64 * MIB), "--memory-grace", "3",
    "--max-links-per-connection", "100", "--max-links-per-principal", "200",
    "--max-connections-per-principal", "20", "--open-timeout", "2",
    "--max-replays-per-connection", "8", "--max-replays-per-principal", "32",
]
"""The component's resource options for the chaos runs: byte bounds small enough that an
attack meets them within its 12 s (a dead link passes 1 MiB unsent in ~2 s at the honest
feed's 0.5 MB/s, and is detached 3 s later), 100 links per connection, 2 s to open."""

SOURCES = f"{FILL_SOURCE},{HONEST_SOURCE}"
ATTACKS: dict[str, tuple[list[str], int]] = {  # attack: (attacker's arguments, journal fill)
    "flood": (["--connections", "4", "--requests", "32", "--sources", SOURCES], 20_000),
    "dead": (["--connections", "8", "--links", "2"], 0),
    "hoard": (["--idle-links", "300", "--busy-links", "30"], 0),
    "never-open": (["--connections", "500"], 0),
    "all": (["--requests", "32", "--sources", SOURCES, "--idle-links", "300",
             "--busy-links", "30", "--never-open", "300"], 20_000),
}
"""What the chaos test and the benchmark run: the issue's flood (4 x 32 "after 0" on a
20,000-entry journal), 16 dead subscriber links on 8 connections, 300 idle + 30 busy links on
one connection, 500 never-open connections (100 a second), and all at once (4 flooding, 4 x 2
dead links, the hoarder, 300 never-open)."""


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (KiB) of a live process, and its open descriptors."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def run_delays(pid: int) -> dict[int, float]:
    """Seconds each thread of a live process has spent runnable but not running (waiting for
    a CPU the machine gave to others: ``/proc/PID/task/TID/schedstat``), by thread id."""
    delays: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text()
                delays[int(tid)] = int(text.split()[1]) / 1e9
    return delays


def starved(before: dict[int, float], after: dict[int, float]) -> float:
    """How long the most starved thread waited for a CPU between two :func:`run_delays`."""
    return max((after[tid] - before.get(tid, 0.0) for tid in after), default=0.0)


class Sampler(threading.Thread):
    """RSS (KiB) and descriptors of a process every ``interval`` seconds, with the time, and
    the latest :func:`run_delays` of every process it watches (it and those of
    :meth:`watch`)."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, int, int]] = []
        self.done = threading.Event()
        self.watched: dict[str, int] = {"component": pid}
        self.delays: dict[str, dict[int, float]] = {}
        self._lock = threading.Lock()

    def watch(self, name: str, pid: int) -> None:
        with self._lock:
            self.watched[name] = pid

    def run_delays(self) -> dict[str, dict[int, float]]:
        """The latest run delays of every watched process (a process that ended: its last)."""
        with self._lock:
            for name, pid in self.watched.items():
                now = run_delays(pid)
                if now:
                    self.delays[name] = now
            return {name: dict(d) for name, d in self.delays.items()}

    def run(self) -> None:
        while not self.done.is_set():
            status = proc_status(self.pid)
            if "VmRSS" in status:
                self.samples.append((time.monotonic(), status["VmRSS"], status["fds"]))
            self.run_delays()
            self.done.wait(self.interval)

    def between(self, start: float, end: float) -> list[tuple[float, int, int]]:
        return [s for s in self.samples if start <= s[0] <= end]


@attrs.define
class Outcome:
    """What one scenario run measured (times in seconds, RSS in MiB)."""

    attack: str
    arrivals: list[float]  # monotonic time of each honest delivery, in delivery order
    delays: list[float]  # wall-clock arrival - publish time
    delivered: list[int]  # source numbers of the honest source, in delivery order
    journaled: list[int]  # what the journal holds of the honest source
    baseline_rss: float  # before the attack
    peak_rss: float  # over the whole run
    end_rss: float  # after the attack ended and the feed drained
    peak_fds: int
    baseline_fds: int
    end_fds: int
    attacker: dict[str, Any]
    subscriber: dict[str, int]
    publisher: dict[str, Any]
    caps_limits: dict[str, float]
    late_connect_s: float | None  # a fresh client's CAPABILITIES query during the attack
    # seconds the machine kept each process of the honest path (component, feed, subscriber)
    # from running from the attack's start to the end of the deliveries, and the component
    # and this process during the fresh client's query: load, not the component's doing
    starved_s: dict[str, float] = attrs.field(factory=dict)
    late_starved_s: float = 0.0
    component_alive: bool = True  # still running when the run ended
    log_tail: list[str] = attrs.field(factory=list)  # its warnings, errors and stop counters

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)]

    @staticmethod
    def pct(values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]

    @property
    def exactly_once_in_order(self) -> bool:
        return bool(self.journaled) and self.delivered == self.journaled

    def figures(self) -> dict[str, Any]:
        gaps = self.gaps
        return {
            "attack": self.attack,
            "delivered": len(self.delivered),
            "journaled": len(self.journaled),
            "exactly_once_in_order": self.exactly_once_in_order,
            "gap_p99_s": round(self.pct(gaps, 0.99), 3),
            "gap_max_s": round(max(gaps, default=float("nan")), 3),
            "delay_p50_s": round(self.pct(self.delays, 0.5), 3),
            "delay_p99_s": round(self.pct(self.delays, 0.99), 3),
            "delay_max_s": round(max(self.delays, default=float("nan")), 3),
            "rss_mib": {"baseline": round(self.baseline_rss, 1), "peak": round(self.peak_rss, 1),
                        "end": round(self.end_rss, 1)},
            "fds": {"baseline": self.baseline_fds, "peak": self.peak_fds, "end": self.end_fds},
            "late_connect_s": self.late_connect_s,
            "starved_s": {k: round(v, 2) for k, v in self.starved_s.items()},
            "late_starved_s": round(self.late_starved_s, 2),
            "subscriber": {k: v for k, v in self.subscriber.items() if v},
            "attacker": self.attacker,
        }


@attrs.define
class Scenario:
    """One run: ``warm`` s of honest traffic, ``attack_s`` of attack, ``tail`` s after it.

    ``attack`` is an :mod:`attacks` command (``flood``, ``dead``, ``hoard``, ``never-open``,
    ``all``) with ``attack_args``, or None for the baseline. ``serve_args`` go to
    ``seqrepair serve``; ``fill`` publications of another source are journaled before the
    honest subscriber starts (what a flood's "after 0" replays). The honest feed publishes
    ``rate``/s of ``pad`` bytes each under ``/honest/...``.
    """

    tmp: Path
    attack: str | None = None
    attack_args: list[str] = attrs.field(factory=list)
    serve_args: list[str] = attrs.field(factory=list)
    rate: float = 500.0
    pad: int = 1024
    fill: int = 0
    warm: float = 3.0
    attack_s: float = 12.0
    tail: float = 3.0
    drain_timeout: float = 60.0
    close_grace: float = 20.0  # the attacker's wait for never-open connections to be closed

    def run(self) -> Outcome:
        from seqrepair.amqp.client.query import query_capabilities
        from seqrepair.amqp.client.subscriber import Subscriber
        from seqrepair.journal.journal import Journal
        from seqrepair.journal.server import EmbeddedRedis

        sys.path.insert(0, str(HERE.parent))  # conftest's ComponentProcess, outside pytest too
        from amqp.conftest import ComponentProcess

        self.tmp.mkdir(parents=True, exist_ok=True)
        with EmbeddedRedis() as redis, contextlib.ExitStack() as stack:
            comp = ComponentProcess(redis.url, self.tmp, *self.serve_args).start()
            stack.callback(comp.stop)
            assert comp.proc is not None
            sampler = Sampler(comp.proc.pid)
            sampler.watch("subscriber", os.getpid())
            sampler.start()
            stack.callback(sampler.done.set)
            if self.fill:
                self._feed(comp.url, redis.url, FILL_SOURCE, "/history/a", self.fill, 0.0,
                           self.pad).wait(120)
            arrivals: list[float] = []
            delays: list[float] = []
            delivered: list[int] = []

            def record(publication: Any) -> None:
                arrivals.append(time.monotonic())
                delays.append(time.time() - publication.fields["t"])
                delivered.append(publication.source_seq)

            sub = Subscriber(comp.url, HONEST_PATTERN, link_name=f"honest-{uuid.uuid4().hex[:8]}",
                             on_publication=record, credit=500)
            stack.enter_context(sub)
            if not sub.connected.wait(20):
                raise RuntimeError("the honest subscriber did not connect")
            time.sleep(0.3)
            limits = dict(query_capabilities(comp.url, timeout=10).limits or {})
            total = int(self.rate * (self.warm + self.attack_s + self.tail))
            feed = self._feed(comp.url, redis.url, HONEST_SOURCE, "/honest/a", total, self.rate,
                              self.pad)
            stack.callback(lambda: feed.poll() is None and feed.kill())
            sampler.watch("feed", feed.pid)
            time.sleep(self.warm)
            base = sampler.between(0, time.monotonic())[-3:]
            baseline_rss = max(s[1] for s in base) / 1024
            baseline_fds = max(s[2] for s in base)
            report: dict[str, Any] = {}
            late: float | None = None
            attack_started = time.monotonic()
            delays_before = sampler.run_delays()
            late_starved = 0.0
            if self.attack is not None:
                attacker = subprocess.Popen(
                    [sys.executable, str(ATTACKER), self.attack, "--url", comp.url,
                     "--duration", str(self.attack_s), "--close-grace", str(self.close_grace),
                     *self.attack_args],
                    env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    # on 2 shared cores an attacker at full priority would measure the host's
                    # CPU split, not the component: its load on the component is what it sends
                    preexec_fn=lambda: os.nice(ATTACKER_NICE),
                )
                stack.callback(lambda: attacker.poll() is None and attacker.kill())
                time.sleep(min(self.attack_s / 2, 5.0))
                began = time.monotonic()
                asking = [run_delays(comp.proc.pid), run_delays(os.getpid())]
                with contextlib.suppress(Exception):
                    query_capabilities(comp.url, timeout=30)
                    late = round(time.monotonic() - began, 3)
                late_starved = (starved(asking[0], run_delays(comp.proc.pid))
                                + starved(asking[1], run_delays(os.getpid())))
                out, err = attacker.communicate(timeout=self.attack_s + self.close_grace + 60)
                try:
                    report = json.loads(out.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    report = {"error": f"attacker exit {attacker.returncode}: {err[-2000:]}"}
            else:
                time.sleep(self.attack_s)
            attack_ended = time.monotonic()
            publisher = self._finish(feed, attack_started)
            journal = Journal.from_url(redis.url)
            try:
                high = journal.high_water(HONEST_SOURCE)
                journaled = [p.source_seq for p in journal.iter_range(HONEST_SOURCE, 1, high)]
            finally:
                journal.close()
            deadline = time.monotonic() + self.drain_timeout
            while len(delivered) < len(journaled) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # anything delivered twice would come now
            delays_after = sampler.run_delays()
            end = time.monotonic()
            sampler.done.set()
            sampler.join(2)
            samples = sampler.samples
            after = sampler.between(attack_ended, end)[-3:] or samples[-1:]
            outcome = Outcome(
                attack=self.attack or "none",
                arrivals=list(arrivals), delays=list(delays), delivered=list(delivered),
                journaled=journaled,
                baseline_rss=baseline_rss,
                peak_rss=max(s[1] for s in samples) / 1024,
                end_rss=min(s[1] for s in after) / 1024,
                peak_fds=max(s[2] for s in samples), baseline_fds=baseline_fds,
                end_fds=min(s[2] for s in after),
                attacker=report, subscriber=sub.stats().as_dict(), publisher=publisher,
                caps_limits=limits, late_connect_s=late, component_alive=comp.proc.poll() is None,
                starved_s={name: starved(delays_before.get(name, {}), after_)
                           for name, after_ in delays_after.items()},
                late_starved_s=late_starved,
            )
        outcome.log_tail = notable(comp.log_text())
        return outcome

    def _feed(self, url: str, redis_url: str, source: str, topic: str, count: int,
              rate: float, pad: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(HERE / "chaos.py"), "feed", "--url", url, "--redis-url",
             redis_url, "--source", source, "--topic", topic, "--count", str(count),
             "--rate", str(rate), "--pad", str(pad)],
            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def _finish(self, feed: subprocess.Popen[str], started: float) -> dict[str, Any]:
        due = self.warm + self.attack_s + self.tail
        left = max(0.0, started - self.warm + due - time.monotonic())
        try:
            out, err = feed.communicate(timeout=left + self.drain_timeout)
        except subprocess.TimeoutExpired:
            feed.kill()
            out, err = feed.communicate()
        try:
            return dict(json.loads(out.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            return {"error": f"feed exit {feed.returncode}: {err[-2000:]}"}


def notable(log: str, most: int = 30) -> list[str]:
    """The component log's warnings and errors, one line per event (with its count), and its
    last lines (the stop counters)."""
    seen: dict[str, tuple[int, str]] = {}
    for line in log.splitlines():
        if "[warning" in line or "[error" in line or "Traceback" in line:
            text = line.split("]", 1)[-1].strip()
            event = text.split("  ", 1)[0]
            count, first = seen.get(event, (0, text))
            seen[event] = (count + 1, first)
    picked = [f"{n}x {first[:300]}" for n, first in list(seen.values())[:most]]
    return picked + [line[:1500] for line in log.splitlines()[-2:]]


def feed(argv: list[str]) -> int:
    """A paced journaling publisher: ``count`` publications at ``rate``/s (0: at once), each
    ``{"n", "t": publish time, "pad": pad bytes}``, 10 per call; one JSON line at the end."""
    parser = argparse.ArgumentParser()
    for name in ("--url", "--redis-url", "--source", "--topic"):
        parser.add_argument(name, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--pad", type=int, default=0)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args(argv)
    from seqrepair.amqp.client.subscriber import Publisher
    from seqrepair.journal.journal import Journal

    publisher = Publisher(args.url, args.source, journal=Journal.from_url(args.redis_url),
                          max_batch=max(args.batch, 256 if args.rate == 0 else args.batch))
    publisher.start()
    pad = "x" * args.pad
    step = args.batch if args.rate else 256
    start = time.monotonic()
    for first in range(0, args.count, step):
        n = min(step, args.count - first)
        publisher.publish_many([(args.topic, {"n": first + i, "t": time.time(), "pad": pad},
                                 "update", None) for i in range(n)])
        if args.rate:
            delay = start + (first + n) / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    ok = publisher.flush(120)
    publisher.close(timeout=5)
    print(json.dumps({"published": args.count, "accepted": publisher.accepted, "flushed": ok,
                      "ran_s": round(time.monotonic() - start, 2)}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["feed"]:
        sys.exit(feed(sys.argv[2:]))
    sys.exit("usage: chaos.py feed --url ... (see feed())")
