"""Where the milliseconds of one publication go on the live path, and cProfile of every thread.

Used by ``bench_live.py --trace DIR``: each process of a run (publisher, component, subscriber)
installs probes here (by wrapping methods, the code under test is unchanged) that note the
wall-clock time (``time.time()``: one clock for every process on the machine) at each step of
each publication, per source number, and profiles every thread with its own
``cProfile.Profile`` (``cProfile`` alone sees the main thread only; the clients send and
receive on the container's thread). At exit each process writes ``DIR/<name>.trace.json`` and
``DIR/<name>-<thread>.prof``; :func:`breakdown` joins the traces.

Steps (``t`` is the application's time just before its ``publish()`` call):

- publisher: ``journaled`` (the journal's append returned), ``returned`` (``publish()``
  returned), ``sent`` (``sender.send`` of its transfer, container thread);
- component: ``received`` (the message reached ``Ingest.publish``), ``checked`` (the journal
  port's ``append``, the journal check, returned), ``offered`` (fan-out offered it to the
  links), ``pumped`` (the links' pump after the events at hand: handed to proton);
- subscriber: ``arrived`` (the transfer reached ``Subscriber.on_message``), ``delivered``
  (the application's callback).

``python livetrace.py serve ...`` runs ``seqrepair serve`` with the probes (what
``BENCH_COMPONENT_RUN`` of ``bench_live.py`` names).
"""

from __future__ import annotations

import atexit
import cProfile
import functools
import itertools
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEPS: dict[str, dict[int, float]] = {}
_PROFILES: list[tuple[str, cProfile.Profile]] = []


def _note(step: str, seqs: Any, now: float | None = None) -> None:
    stamp = time.time() if now is None else now
    marks = STEPS.setdefault(step, {})
    for seq in seqs:
        marks.setdefault(seq, stamp)


def _wrap(owner: Any, name: str, after: Callable[..., None] | None = None,
          before: Callable[..., None] | None = None) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def probe(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(*args, **kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            after(result, *args, **kwargs)
        return result

    setattr(owner, name, probe)


def _profile_threads(out: Path, name: str) -> None:
    """A profiler per thread, the main one included, written at exit."""
    run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        prof = cProfile.Profile(time.thread_time)
        _PROFILES.append((f"{name}-{self.name}", prof))
        prof.enable()
        try:
            run(self)
        finally:
            prof.disable()

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    _PROFILES.append((f"{name}-main", main))
    main.enable()


_LAST_READ = [0.0]
_UNWRITTEN: list[int] = []


def _io_probes() -> None:
    """``_LAST_READ``: when proton last read a socket; what is in ``_UNWRITTEN`` is marked
    ``written`` once proton has written a socket after it."""
    from proton import _handlers

    def read(self: Any, event: Any) -> None:
        _LAST_READ[0] = time.time()

    def wrote(result: Any, self: Any, event: Any) -> None:
        if _UNWRITTEN:
            _note("written", _UNWRITTEN)
            _UNWRITTEN.clear()

    _wrap(_handlers.IOHandler, "on_selectable_readable", before=read)
    _wrap(_handlers.IOHandler, "on_selectable_writable", after=wrote)
    try:
        from seqrepair.amqp.wire import reactor
    except ImportError:
        return
    if hasattr(reactor, "_write_now"):  # what was sent written at once (this tree's)
        _wrap(reactor, "_write_now", after=lambda n, *a: wrote(n, None, None) if n else None)


def install(name: str) -> None:
    """Probes and profilers for the process ``name`` (publisher, component, subscriber), when
    ``BENCH_TRACE`` names a folder."""
    folder = os.environ.get("BENCH_TRACE")
    if not folder:
        return
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    _io_probes()
    if name == "publisher":
        _publisher_probes()
    elif name == "component":
        _component_probes()
    elif name == "subscriber":
        _subscriber_probes()
    if os.environ.get("BENCH_CPROFILE"):
        _profile_threads(out, name)

    def dump() -> None:
        for label, prof in _PROFILES:
            prof.disable()
            prof.dump_stats(str(out / f"{label.replace(' ', '_')}.prof"))
        (out / f"{name}.trace.json").write_text(json.dumps(
            {step: {str(k): v for k, v in marks.items()} for step, marks in STEPS.items()}))

    atexit.register(dump)


def _publisher_probes() -> None:
    from seqrepair.amqp.client import publisher

    def returned(pub: Any, self: Any, *args: Any, **kwargs: Any) -> None:
        _note("t", [pub.source_seq], pub.fields.get("t"))
        _note("returned", [pub.source_seq])

    _wrap(publisher.Publisher, "_journal",
          after=lambda r, self, stamped: _note("journaled", [p.source_seq for p in stamped]))
    _wrap(publisher.Publisher, "publish", after=returned)
    original_linger = publisher.Publisher._linger
    lingers = STEPS.setdefault("_linger_ms", {})

    def linger(self: Any) -> None:  # how long the sender held a batch back, each time
        began = time.perf_counter()
        original_linger(self)
        lingers[len(lingers)] = 1000 * (time.perf_counter() - began)

    publisher.Publisher._linger = linger  # type: ignore[method-assign]
    original_sent = publisher.Publisher.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        on_sent = kwargs.get("on_sent")

        def sent(batch: Any) -> None:
            _note("sent", [p.source_seq for p in batch])
            _UNWRITTEN.extend(p.source_seq for p in batch)
            if on_sent is not None:
                on_sent(batch)

        kwargs["on_sent"] = sent
        original_sent(self, *args, **kwargs)

    publisher.Publisher.__init__ = init  # type: ignore[method-assign]


def _component_probes() -> None:
    from seqrepair.amqp.component import component, ingest, journalport

    current: list[float] = [0.0]

    def received(self: Any, receiver: Any, message: Any) -> None:
        current[0] = time.time()

    _wrap(ingest.Ingest, "publish", before=received)
    original_journal = ingest.Ingest._journal

    def journal(self: Any, pubs: Any, *args: Any, **kwargs: Any) -> Any:
        _note("read", [p.source_seq for p in pubs], _LAST_READ[0])
        _note("received", [p.source_seq for p in pubs], current[0])
        return original_journal(self, pubs, *args, **kwargs)

    ingest.Ingest._journal = journal  # type: ignore[method-assign]
    _wrap(journalport.RedisJournalPort, "append",
          after=lambda r, self, pubs, *a, **k: _note("checked", [p.source_seq for p in pubs]))
    original_publish = ingest.Ingest._publish
    waiting: list[int] = []

    def offered(self: Any, pubs: Any, entries: Any) -> None:
        original_publish(self, pubs, entries)
        seqs = [p.source_seq for p in pubs]
        _note("offered", seqs)
        waiting.extend(seqs)

    ingest.Ingest._publish = offered  # type: ignore[method-assign]

    def pumped(result: Any, self: Any) -> None:
        if waiting:
            _note("pumped", waiting)
            _UNWRITTEN.extend(waiting)
            waiting.clear()

    _wrap(component.Component, "pump_offered", after=pumped)


def _subscriber_probes() -> None:
    from seqrepair.amqp.client import subscriber

    arrivals: list[float] = [0.0, 0.0]

    def arrived(self: Any, event: Any) -> None:
        arrivals[0] = time.time()
        arrivals[1] = _LAST_READ[0]

    _wrap(subscriber.Subscriber, "on_message", before=arrived)
    original = subscriber.Subscriber._deliver

    def deliver(self: Any, publication: Any) -> None:
        _note("sread", [publication.source_seq], arrivals[1])
        _note("arrived", [publication.source_seq], arrivals[0])
        original(self, publication)
        _note("delivered", [publication.source_seq])

    subscriber.Subscriber._deliver = deliver  # type: ignore[method-assign]


def breakdown(folder: Path) -> dict[str, Any]:
    """Join the traces in ``folder``: per step, the median and p99 of the time since the step
    before (ms), over the publications every step saw."""
    steps: dict[str, dict[int, float]] = {}
    for name in ("publisher", "component", "subscriber"):
        path = folder / f"{name}.trace.json"
        if path.exists():
            for step, marks in json.loads(path.read_text()).items():
                if name == "component" and step == "written":
                    step = "cwritten"
                steps[step] = {int(k): v for k, v in marks.items()}
    held = sorted(steps.pop("_linger_ms", {}).values())
    lingered = [ms for ms in held if ms >= 0.05]
    times_t = steps.pop("t", {})
    order = ["t", "journaled", "returned", "sent", "written", "read", "received", "checked",
             "offered", "pumped", "cwritten", "sread", "arrived", "delivered"]
    steps["t"] = times_t
    present = [s for s in order if steps.get(s)]
    common = set.intersection(*(set(steps[s]) for s in present)) if present else set()
    result: dict[str, Any] = {
        "publications": len(common), "steps": {},
        "sender_linger": {"sends": len(held), "held_0.05ms_or_more": len(lingered),
                          "held_ms_total": round(sum(lingered), 1),
                          "held_ms_max": round(max(lingered), 2) if lingered else 0.0},
    }
    for before, after in itertools.pairwise(present):
        gaps = sorted(1000 * (steps[after][k] - steps[before][k]) for k in common)
        if gaps:
            result["steps"][f"{before} -> {after}"] = {
                "p50_ms": round(statistics.median(gaps), 3),
                "p99_ms": round(gaps[int(0.99 * (len(gaps) - 1))], 3),
                "mean_ms": round(statistics.fmean(gaps), 3),
            }
    if common and "t" in present and present[-1] != "t":
        total = sorted(1000 * (steps[present[-1]][k] - steps["t"][k]) for k in common)
        result["end_to_end"] = {"p50_ms": round(statistics.median(total), 3),
                                "p99_ms": round(total[int(0.99 * (len(total) - 1))], 3)}
    return result


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--breakdown":
        print(json.dumps(breakdown(Path(sys.argv[2])), indent=1))
        raise SystemExit(0)
    install("component")
    from seqrepair.cli import main

    sys.exit(main())
