"""Run ``python -m seqrepair.cli ARGS...`` with cProfile on every thread (py-spy is not on this
machine): ``python benchmarks/profproc.py PREFIX ARGS...`` writes ``PREFIX.<thread>.prof``,
pstats files, one per thread that ran Python. Each thread writes its own (another thread's
profile cannot be read safely): the main thread when the process ends normally (SIGTERM ends
``serve`` and ``relay`` so), other threads when they end and, for a client's container thread
(a relay's upstream subscriber, which may still run at exit), every second from its timer.
CPU time of the thread (``time.thread_time``), not wall time; the timer's system calls
inflate functions called often. Read one with ``python -m pstats FILE``.
"""

from __future__ import annotations

import atexit
import cProfile
import re
import runpy
import sys
import threading
import time
from typing import Any

from seqrepair.amqp.client.runner import SubscriberRunner

PREFIX = sys.argv[1]
sys.argv = ["seqrepair", *sys.argv[2:]]
_local = threading.local()
_thread_run = threading.Thread.run
_timer = SubscriberRunner.on_timer_task


def _write(name: str, profile: cProfile.Profile, again: bool = False) -> None:
    profile.disable()
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    profile.dump_stats(f"{PREFIX}.{safe}.prof")
    if again:
        profile.enable()  # it goes on counting from where it was


def _profiled_run(self: threading.Thread) -> None:
    profile = _local.profile = cProfile.Profile(time.thread_time)
    _local.written = time.monotonic()
    profile.enable()
    try:
        _thread_run(self)
    finally:
        _write(self.name, profile)


def _timer_task(self: Any, event: Any) -> None:
    _timer(self, event)
    profile = getattr(_local, "profile", None)
    if profile is not None and time.monotonic() - _local.written > 1.0:
        _local.written = time.monotonic()
        _write(threading.current_thread().name, profile, again=True)


threading.Thread.run = _profiled_run  # type: ignore[method-assign]
SubscriberRunner.on_timer_task = _timer_task  # type: ignore[method-assign]
MAIN = cProfile.Profile(time.thread_time)
atexit.register(lambda: _write("main", MAIN))
MAIN.enable()
runpy.run_module("seqrepair.cli", run_name="__main__", alter_sys=True)
