"""Run ``python -m seqrepair.cli relay ...`` with timestamps at each stage of every relayed
batch (methods wrapped, the code under test unchanged): ``python benchmarks/relaytrace.py
OUT.json ARGS...`` writes, at exit, ``{"rows": [...], "threads": {name: CPU seconds}}``: rows
of ``[time.time(), thread, stage, count, first source number, last source number]`` (one
clock for every process on the machine) and each live thread's CPU over its life.

Stages: ``received`` (the upstream subscriber's ``_take`` of one transfer's frames, before
the stub; count = frames), ``offered`` (``Handover.offer_run`` returned; count = run),
``taken`` (the event loop took the handover: ``on_seqrepair_relayed`` submitted it),
``append0``/``append1`` (the journaler thread's append began / returned),
``fanout0``/``fanout1`` (``Ingest.relayed_journaled`` began / returned on the event loop),
``pumped`` (``Component.pump_offered`` returned: handed to proton). Used by
``bench_relay.py --trace DIR`` (see benchmarks/notes/relay-bound.md).
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

from seqrepair.amqp.component.component import Component
from seqrepair.amqp.component.ingest import Ingest
from seqrepair.amqp.relay import journaler, relay, upstream

OUT = sys.argv[1]
sys.argv = ["seqrepair", *sys.argv[2:]]
ROWS: list[list[Any]] = []


def note(stage: str, pubs: Any) -> None:
    first = last = 0
    if pubs:
        first = getattr(pubs[0], "source_seq", 0)
        last = getattr(pubs[-1], "source_seq", 0)
    ROWS.append([time.time(), threading.current_thread().name, stage,
                 len(pubs) if pubs is not None else 0, first, last])


def wrap(cls: Any, name: str, before: str | None, after: str | None,
         arg: int = 0) -> None:
    inner = getattr(cls, name)

    def probe(self: Any, *args: Any, **kwargs: Any) -> Any:
        pubs = args[arg] if len(args) > arg else None
        if before:
            note(before, pubs)
        result = inner(self, *args, **kwargs)
        if after:
            note(after, pubs)
        return result

    setattr(cls, name, probe)


wrap(upstream.UpstreamSubscriber, "_take", "received", None)
wrap(relay.Handover, "offer_run", None, "offered")
wrap(journaler.Journaler, "submit", None, "taken")
_append = journaler.Journaler._append


def _traced_append(self: Any, job: Any, pubs: Any) -> Any:
    note("append0", pubs)
    result = _append(self, job, pubs)
    note("append1", pubs)
    return result


journaler.Journaler._append = _traced_append  # type: ignore[method-assign]
wrap(Ingest, "relayed_journaled", "fanout0", "fanout1")
wrap(Component, "pump_offered", None, "pumped")


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread over its life, by name (``/proc``: the journal
    thread and the upstream subscriber's are apart, which ``bench_relay.py`` cannot tell)."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu = {}
    for thread in threading.enumerate():
        try:
            stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        cpu[thread.name] = (int(fields[11]) + int(fields[12])) / tick
    return cpu


def _write() -> None:
    with open(OUT, "w") as f:
        json.dump({"rows": ROWS, "threads": _thread_cpu()}, f)


atexit.register(_write)
runpy.run_module("seqrepair.cli", run_name="__main__", alter_sys=True)
