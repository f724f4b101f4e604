"""Run ``python -m seqrepair.cli relay ...`` counting, per thread, proton's events by type,
``Reactor.process`` passes, selects (``on_reactor_quiesced``), socket reads (capacity offered,
bytes read), the upstream subscriber's transfers and frames (``_take``), and each connection's
max-frame-size (local, remote) and frames in/out: ``python relay_frames_events.py OUT.json
ARGS...`` rewrites OUT.json every 0.25 s and at exit. ``FRAMES_MAX_FRAME=N`` sets the
max-frame-size of the connections the relay opens (upstream, fetch), as
``Container.connect(max_frame_size=N)`` would. Used by ``relay_frames_drive.py``; code under
test unchanged (see ``relay-bound.md``, "frames32")."""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import runpy
import sys
import threading
import time
from typing import Any

from proton import _events, _handlers, _reactor

from seqrepair.amqp.relay import upstream

OUT = sys.argv[1]
sys.argv = ["seqrepair", *sys.argv[2:]]
COUNTS: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
READS: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
TRANSPORTS: dict[str, dict[str, int]] = {}
MAX_FRAME = int(os.environ.get("FRAMES_MAX_FRAME", "0"))


def name() -> str:
    return threading.current_thread().name


def wrap(cls: Any, method: str, before: Any) -> None:
    inner = getattr(cls, method)

    def probe(self: Any, *args: Any) -> Any:
        before(self, *args)
        return inner(self, *args)

    setattr(cls, method, probe)


def popped(collector: Any) -> None:
    event = collector.peek()
    if event is not None:
        COUNTS[name()]["ev:" + str(event.type)] += 1
        COUNTS[name()]["events"] += 1


def counted(key: str) -> Any:
    def count(*_: Any) -> None:
        COUNTS[name()][key] += 1
    return count


def taken(_: Any, frames: Any, now: float) -> None:
    COUNTS[name()]["transfers"] += 1
    COUNTS[name()]["frames"] += len(frames)


wrap(_events.Collector, "pop", popped)
wrap(_reactor.Reactor, "process", counted("process"))
wrap(_handlers.IOHandler, "on_reactor_quiesced", counted("select"))
wrap(upstream.UpstreamSubscriber, "_take", taken)

_readable = _handlers.IOHandler.on_selectable_readable


def readable(self: Any, event: Any) -> None:
    selectable = event.selectable
    transport = selectable._transport
    if transport is None:
        _readable(self, event)
        return
    capacity = transport.capacity()
    recv = selectable.recv
    got: list[int] = []

    def counting(n: int) -> bytes:
        data: bytes = recv(n)
        got.append(len(data))
        return data

    selectable.recv = counting
    try:
        _readable(self, event)
    finally:
        selectable.recv = recv
    READS[name()].append((capacity, got[0] if got else -1))
    TRANSPORTS[f"{name()}:{id(transport)}"] = {
        "max_frame": transport.max_frame_size, "remote_max_frame": transport.remote_max_frame_size,
        "frames_in": transport.frames_input, "frames_out": transport.frames_output}


_handlers.IOHandler.on_selectable_readable = readable  # type: ignore[method-assign]

if MAX_FRAME:
    _connect = _reactor._Connector._connect

    def connect(self: Any, connection: Any, url: Any) -> None:
        _connect(self, connection, url)
        connection.transport.max_frame_size = MAX_FRAME

    _reactor._Connector._connect = connect  # type: ignore[method-assign]


def dump() -> None:
    data = {"counts": {k: dict(v) for k, v in list(COUNTS.items())},
            "reads": {k: list(v) for k, v in list(READS.items())},
            "transports": dict(TRANSPORTS)}
    with open(OUT + ".tmp", "w") as out:
        json.dump(data, out)
    os.replace(OUT + ".tmp", OUT)


def dumping() -> None:
    while True:
        time.sleep(0.25)
        with contextlib.suppress(Exception):  # a dict changed while copied: the next one
            dump()


threading.Thread(target=dumping, daemon=True).start()
atexit.register(dump)
runpy.run_module("seqrepair.cli", run_name="__main__", alter_sys=True)
