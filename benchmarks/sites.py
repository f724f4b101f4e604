"""One host per site on this machine's cores, for ``bench_relay.py --sites``.

On two shared cores a relayed round is bound by the CPU sum of all its processes; in a
deployment the relay runs on another site's host. This models one core per site: core
``ORIGIN`` holds the origin's site (publisher, ``seqrepair serve``, its redis-server), core
``SUBSCRIBER`` the subscriber's site (the bench process) and, in relayed rounds, the relay and
its redis-server too (the relay shares its core with the subscriber: conservative). Children
are pinned by ``taskset -c`` (every thread inherits it), an already running redis-server by
``sched_setaffinity`` of each of its threads, the bench process's own threads likewise.
:func:`allowed` reads back what the kernel holds (``Cpus_allowed_list`` of every thread), and
:func:`core_busy` the cores' busy time from ``/proc/stat`` per cpu. Imports nothing of
seqrepair.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from procs import proc_cpu

ORIGIN = 0  # core of the origin's site: publisher, serve, the origin's redis-server
SUBSCRIBER = 1  # core of the subscriber's site: the subscriber, and the relay with its redis

ASSIGNMENT = {
    "direct": {str(ORIGIN): ["publisher", "origin", "redis_origin"],
               str(SUBSCRIBER): ["subscriber"]},
    "relayed": {str(ORIGIN): ["publisher", "origin", "redis_origin"],
                str(SUBSCRIBER): ["subscriber", "relay", "redis_relay"]},
    "catch_up": {str(ORIGIN): ["publisher", "origin", "redis_origin"],
                 str(SUBSCRIBER): ["relay", "redis_relay", "bench (polls the relay's journal)"]},
}
MODEL = ("one core per site (--sites): core 0 = the origin's site (publisher, serve, its "
         "redis), core 1 = the subscriber's site (subscriber; in relayed rounds also the relay "
         "and its redis). A model of sites on separate hosts, NOT the shared-cores figure of "
         "the default mode.")


def check_machine() -> None:
    """Refuse a machine where the two cores are not both there to pin to."""
    if not {ORIGIN, SUBSCRIBER} <= os.sched_getaffinity(0):
        raise SystemExit(f"--sites needs cores {ORIGIN} and {SUBSCRIBER}; this process may "
                         f"run on {sorted(os.sched_getaffinity(0))}")


def taskset(core: int) -> list[str]:
    """The command prefix that runs a child (and every thread it starts) on ``core`` only."""
    return ["taskset", "-c", str(core)]


def pin(pid: int, core: int) -> None:
    """Every thread of a running ``pid`` on ``core`` only (threads it starts later inherit
    the affinity of the thread that starts them)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {core})
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def allowed(pid: int) -> list[str]:
    """``Cpus_allowed_list`` of each of ``pid``'s threads, as the kernel holds it (distinct
    values, sorted: one value when the process is pinned as a whole)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue
        found.update(line.split(":", 1)[1].strip() for line in status.splitlines()
                     if line.startswith("Cpus_allowed_list:"))
    return sorted(found)


def run_pinned(command: list[str], core: int, env: dict[str, str], timeout: float,
               started: Callable[[int], None] | None = None) -> list[str]:
    """Run ``command`` under ``taskset -c core`` to its end (output discarded, check=True),
    ``started`` told its pid; the affinity its threads had once ``taskset`` had handed over."""
    proc = subprocess.Popen([*taskset(core), *command], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    if started is not None:
        started(proc.pid)
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    argv = "\0".join(command).encode() + b"\0"
    while proc.poll() is None and time.monotonic() < deadline:
        try:  # the child may not have exec'd taskset yet; taskset sets, then execs command
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes() == argv:
                seen = allowed(proc.pid)
                break
        except OSError:
            break
        time.sleep(0.001)
    try:
        _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, command, stderr=err)
    return seen


def verify(pinned: dict[str, tuple[list[str], int]]) -> None:
    """Raise unless every named process's threads were all held to its core."""
    wrong = {name: seen for name, (seen, core) in pinned.items() if seen != [str(core)]}
    if wrong:
        raise RuntimeError(f"--sites: pinning did not hold: {wrong}")


def cpu_jiffies() -> list[int]:
    """Busy jiffies (all but idle and iowait) of each cpu so far, from ``/proc/stat``."""
    busy = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            fields = [int(x) for x in line.split()[1:]]
            busy.append(sum(fields) - fields[3] - fields[4])
    return busy


def core_busy(first: tuple[float, list[int]], last: tuple[float, list[int]]) -> list[float]:
    """Each core's busy share between two ``(perf_counter time, cpu_jiffies())`` marks
    (jiffies of 1/CLK_TCK s: over a 0.3 s window a share is good to about +-0.03), whoever
    kept it busy."""
    seconds = last[0] - first[0]
    if seconds <= 0:
        return [float("nan")] * len(first[1])
    tick = os.sysconf("SC_CLK_TCK")
    return [round((b - a) / tick / seconds, 2) for a, b in zip(first[1], last[1], strict=True)]


class Window:
    """Marks at the first and the last delivery of a round: each cpu's busy jiffies and the
    CPU of each watched process (``pids``, by name), so a core's busy share can be told apart
    into this round's processes and anything else on the machine (other users' load)."""

    def __init__(self) -> None:
        self.pids: dict[str, int] = {}
        self.marks: list[tuple[float, list[int], dict[str, float]]] = []

    def mark(self, at: float) -> None:
        """Take a mark at ``at`` (perf_counter time, now)."""
        self.marks.append((at, cpu_jiffies(),
                           {name: proc_cpu(pid) for name, pid in self.pids.items()}))

    def busy(self, cores: dict[str, int], ended: dict[str, float]
             ) -> tuple[list[float], list[float]] | None:
        """Each core's busy share between the two marks, and the share of it this round's
        processes used (``cores``: each process's core). ``ended``: the total CPU of a process
        that may have exited before the last mark (the publisher), taken for its CPU at the
        last mark when it was gone by then (``proc_cpu`` 0)."""
        if len(self.marks) != 2:
            return None
        (t0, jiffies0, cpu0), (t1, jiffies1, cpu1) = self.marks
        total = core_busy((t0, jiffies0), (t1, jiffies1))
        own = [0.0] * len(total)
        for name, core in cores.items():
            last = cpu1.get(name, 0.0)
            if not last and name in ended:
                last = ended[name]
            used = last - cpu0.get(name, 0.0)
            own[core] += used / (t1 - t0)
        return total, [round(x, 2) for x in own]
