"""Catch-up of N missed publications: rate and duplicates, two code trees in the same run.

    python benchmarks/bench_catchup.py [--n 100000] [--rounds 3] [--base /work/wt/x-base]
        [--freeze-every 10000 --freeze-for 0.5] [--hogs 2]
        [--serve-arg=--replay-page=1000 ...]

Each trial (a child process, so the component, the subscriber and the publisher all run the
code of one tree) starts a private redis-server (AOF everysec) and ``seqrepair serve``; a
durable subscriber (``link_name``, ``seqrepair-ack``) attaches, so the component stores its
position, and goes away; a publisher sends N publications of one source through the component
(nobody receives them); then the subscriber comes back under the same name and catches up
from the journal by source replay. Timed: from the new subscriber's start until its N-th
delivery. Counted: duplicates its stub dropped, source requests it sent, and whether it got
exactly 1..N once, in order. The parent runs the trees interleaved (base, this, base, ...)
and prints per round and the median ratio this/base.

``--freeze-every K --freeze-for S`` stops the component (SIGSTOP) for S seconds each time the
subscriber has received K more: the replay pauses, as it does at page boundaries on a loaded
machine (issue 26: a pause past the stub's 0.25 s retry window restarted the replay). ``--hogs``
runs busy loops alongside.

``--base`` is another checkout (e.g. ``git worktree add /tmp/base main``); without it only
this tree runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def trial(n: int, serve_args: list[str], freeze_every: int = 0,
          freeze_for: float = 0.5) -> dict[str, object]:
    """One catch-up in this process, with the code of the tree on ``sys.path``; with
    ``freeze_every``, the component is stopped (SIGSTOP) for ``freeze_for`` seconds each time
    the subscriber has received that many more (a replay that pauses, as under load)."""
    import signal
    import threading

    from seqrepair.amqp.client.subscriber import Publisher, Subscriber
    from seqrepair.journal.server import EmbeddedRedis
    from tests.amqp.conftest import ComponentProcess

    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory() as tmp:
        comp = ComponentProcess(redis.url, Path(tmp), *serve_args).start()
        try:
            first = Subscriber(comp.url, "/bench/#", link_name="catchup")
            with first:
                assert first.wait_connected(20)
                time.sleep(0.3)  # the position is written on the attach; let the ACKs settle
            pad = "x" * 100
            with Publisher(comp.url, "feed.c", address="/bench/#") as pub:
                for start in range(0, n, 1000):
                    pub.publish_many([("/bench/t", {"n": i, "pad": pad}, "update")
                                      for i in range(start, min(n, start + 1000))])
                    pub.flush(120)
                assert pub.flush(120)
            got: list[int] = []

            timers: list[threading.Timer] = []

            def take(p: object) -> None:
                got.append(p.source_seq)  # type: ignore[attr-defined]
                if freeze_every and len(got) % freeze_every == 0 and len(got) < n:
                    assert comp.proc is not None
                    os.kill(comp.proc.pid, signal.SIGSTOP)
                    timers.append(threading.Timer(freeze_for, os.kill,
                                                  (comp.proc.pid, signal.SIGCONT)))
                    timers[-1].start()

            assert comp.proc is not None
            comp_cpu = _cpu(comp.proc.pid)
            own_cpu = time.process_time()
            began = time.monotonic()
            second = Subscriber(comp.url, "/bench/#", link_name="catchup", on_publication=take)
            second.start()
            deadline = began + max(120.0, n / 500)
            while len(got) < n and time.monotonic() < deadline:
                time.sleep(0.005)
            elapsed = time.monotonic() - began
            for timer in timers:
                timer.join()
            comp_cpu = _cpu(comp.proc.pid) - comp_cpu
            own_cpu = time.process_time() - own_cpu
            time.sleep(0.2)
            second.stop()
            stats = second.stats()
            comp.stop()
            stopped = [line for line in comp.log_text().splitlines() if "component stopped" in line]
            return {
                "n": n, "seconds": elapsed, "rate": len(got) / elapsed if elapsed else 0.0,
                "received": len(got), "exact": got == list(range(1, n + 1)),
                "duplicates": stats.duplicates, "source_requests": stats.source_requests_sent,
                "component_cpu": comp_cpu, "subscriber_cpu": own_cpu,
                "component": stopped[-1][-400:] if stopped else "",
            }
        finally:
            comp.stop()


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_tree(root: Path, n: int, serve_args: list[str], freeze: list[str]) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, str(HERE / "benchmarks" / "bench_catchup.py"), "--trial", str(n),
         *(f"--serve-arg={arg}" for arg in serve_args), *freeze],
        cwd=root, env=env, capture_output=True, text=True, timeout=3600,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"trial in {root} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", type=Path, default=None)
    parser.add_argument("--trial", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-arg", action="append", default=[])
    parser.add_argument("--freeze-every", type=int, default=0,
                        help="stop the component each time this many more were received")
    parser.add_argument("--freeze-for", type=float, default=0.5, help="seconds stopped")
    parser.add_argument("--hogs", type=int, default=0,
                        help="busy-looping processes run alongside (a loaded machine)")
    args = parser.parse_args()
    if args.trial is not None:
        sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]
        print(json.dumps(trial(args.trial, args.serve_arg, args.freeze_every, args.freeze_for)),
              flush=True)
        return
    trees = ([("base", args.base.resolve())] if args.base else []) + [("this", HERE)]
    rates: dict[str, list[float]] = {name: [] for name, _ in trees}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.hogs)]
    try:
        _rounds(args, trees, rates)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _rounds(args: argparse.Namespace, trees: list[tuple[str, Path]],
            rates: dict[str, list[float]]) -> None:
    for round_ in range(args.rounds):
        for name, root in trees:
            res = run_tree(root, args.n, args.serve_arg,
                           [f"--freeze-every={args.freeze_every}",
                            f"--freeze-for={args.freeze_for}"])
            rates[name].append(float(res["rate"]))  # type: ignore[arg-type]
            dups = int(res["duplicates"])  # type: ignore[call-overload]
            print(f"round {round_ + 1} {name:4}: {res['rate']:8,.0f}/s  "
                  f"{res['seconds']:6.2f} s  duplicates {dups:8,} "
                  f"({100 * dups / args.n:.2f}% of N)  source requests "
                  f"{res['source_requests']}  exact {res['exact']}  CPU component "
                  f"{res['component_cpu']:.2f} s subscriber {res['subscriber_cpu']:.2f} s",
                  flush=True)
    if args.base:
        ratio = statistics.median(rates["this"]) / statistics.median(rates["base"])
        print(f"median rate this/base: {ratio:.2f}x "
              f"({statistics.median(rates['this']):,.0f}/s vs "
              f"{statistics.median(rates['base']):,.0f}/s), N={args.n:,}")


if __name__ == "__main__":
    main()
