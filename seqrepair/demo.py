"""``seqrepair demo``: the main job.

Three stages, each printing its report; the demo fails if any stage does.

* ``in-process``: publishers -> journal (a private redis-server) -> link sequencer -> a lossy,
  reordering, duplicating simulated link -> subscriber stub -> image cache in one process:
  100,000 publications over an 8-bit link, so the link numbers wrap hundreds of times, with
  forced link resets, repaired from link context and the journal.
* ``network``: ``seqrepair serve``, ``seqrepair publish`` and subscribers as real processes
  over AMQP 1.0, with loss forced at the component's send path and a forced reset.
* ``spark``: a local Spark rebuild and audit of the journals, checked against the
  subscribers' image caches.

``--only NAME`` runs one stage; ``--no-redis`` keeps the journal in memory (in-process only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import attrs

from seqrepair.argtypes import (
    bit_width,
    fraction,
    non_negative_int,
    positive_int,
    spark_master,
)
from seqrepair.core.image import ImageCache
from seqrepair.core.messages import Publication, PublishType
from seqrepair.extras import run_body
from seqrepair.simulation import ComponentBackend, LinkConditions, Simulation, SimulationReport

Plan = list[tuple[str, str, dict[str, Any], PublishType]]


def demo_plan(count: int, *, sources: int = 3, items: int = 200, seed: int = 1) -> Plan:
    """A realistic feed: each item imaged first, then updates, corrections, drops, re-adds."""
    rng = random.Random(seed)
    names = [f"feed.{chr(ord('a') + i)}" for i in range(sources)]
    topics = [
        f"/weather/{kind}/{code:03d}" for kind in ("wind", "temp") for code in range(items // 2)
    ]
    imaged: set[str] = set()
    plan: Plan = []
    for _ in range(count):
        topic = rng.choice(topics)
        # each item has one publishing source, so item order is that source's order
        source = names[topics.index(topic) % len(names)]
        if topic not in imaged:
            ptype = PublishType.IMAGE
            imaged.add(topic)
        else:
            roll = rng.random()
            ptype = (
                PublishType.DROP if roll < 0.02
                else PublishType.CORRECTION if roll < 0.1
                else PublishType.UPDATE
            )
            if ptype is PublishType.DROP:
                imaged.discard(topic)
        fields: dict[str, Any] = {}
        if ptype is not PublishType.DROP:
            for name in ("speed", "gust", "dir", "temp"):
                if ptype is PublishType.IMAGE or rng.random() < 0.4:
                    fields[name] = None if rng.random() < 0.1 else rng.randrange(100)
        plan.append((source, topic, fields, ptype))
    return plan


def run_in_process(
    count: int,
    *,
    bits: int,
    loss: float,
    resets: int,
    seed: int,
    component: ComponentBackend | None = None,
) -> SimulationReport:
    """Stage 1: the whole pipeline in one process on simulated time."""
    plan = demo_plan(count, seed=seed)
    reset_points = frozenset(count * (i + 1) // (resets + 1) for i in range(resets))
    conditions = LinkConditions(
        loss=loss, duplicate=loss / 2, reorder=loss * 2, request_loss=loss
    )
    simulation = Simulation(
        bits=bits,
        plan=plan,
        conditions=conditions,
        resets_at=reset_points,
        context_capacity=4096,
        send_rate=256,
        seed=seed,
        component=component,
    )
    return simulation.run(max_time=3600.0)


def print_in_process_report(report: SimulationReport, wall: float, out: TextIO) -> bool:
    """Print the stage-1 report; True when the run is perfect."""
    stats = report.stats
    perfect = (
        report.exactly_once_in_order
        and not report.unrecoverable
        and report.subscriber_images == report.publisher_images
    )
    rows = [
        ("published", len(report.published)),
        ("delivered", len(report.delivered)),
        ("link resets (forced)", report.resets),
        ("frames lost on the wire", report.events["wire_lost"]),
        ("gaps detected", stats.gaps_detected),
        ("repaired at link level", stats.link_repaired),
        ("repaired at source level (replayed)", stats.source_repaired),
        ("link numbers covered by replay", stats.source_covered),
        ("gap requests sent (link / source)",
         f"{stats.requests_sent} / {stats.source_requests_sent}"),
        ("duplicates dropped", stats.duplicates),
        ("unrecoverable", len(report.unrecoverable)),
        ("exactly once, in order", "yes" if report.exactly_once_in_order else "NO"),
        ("subscriber images == publisher images",
         "yes" if report.subscriber_images == report.publisher_images else "NO"),
        ("items in the image cache", len(report.subscriber_images)),
        ("simulated seconds / wall seconds", f"{report.elapsed:.1f} / {wall:.1f}"),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"  {label:<{width}}  {value}", file=out)
    return perfect


@attrs.define
class DemoRun:
    """What the stages share: options, the journal's Redis, and earlier stages' results."""

    args: argparse.Namespace
    redis_url: str | None
    workdir: Path
    out: TextIO
    results: dict[str, Any] = attrs.Factory(dict)


Stage = Callable[[DemoRun], bool]


def in_process_stage(run: DemoRun) -> bool:
    """Publishers journal to Redis; gaps are repaired from link context and the journal."""
    args = run.args
    started = time.perf_counter()
    if run.redis_url is None:
        title = "in-memory journal"
        report = run_in_process(
            args.publications, bits=args.bits, loss=args.loss, resets=args.resets,
            seed=args.seed,
        )
    else:
        from seqrepair.journal import Journal
        from seqrepair.journal.inprocess import JournalComponent

        title = "journal in Redis"
        with Journal.from_url(run.redis_url) as journal:
            component = JournalComponent(journal, link_bits=args.bits, context_capacity=4096)
            report = run_in_process(
                args.publications, bits=args.bits, loss=args.loss, resets=args.resets,
                seed=args.seed, component=component,
            )
            component.close()
    run.results["in-process"] = report
    print(f"stage in-process: publishers -> {title} -> simulated lossy {args.bits}-bit link "
          "-> subscriber stub -> image cache", file=run.out)
    return print_in_process_report(report, time.perf_counter() - started, run.out)


def network_stage(run: DemoRun) -> bool:
    """Component, publisher and subscribers as real processes over AMQP on loopback."""
    if run.redis_url is None:
        print("stage network: skipped (it needs Redis; run without --no-redis)", file=run.out)
        return True
    from seqrepair.amqp.demo import run_network_demo

    args = run.args
    started = time.perf_counter()
    try:
        report = run_network_demo(
            run.redis_url,
            args.network_publications,
            drop_rate=args.network_loss,
            source="net.feed",
            workdir=run.workdir / "network",
        )
    except (subprocess.TimeoutExpired, RuntimeError) as exc:
        print(f"stage network: a process did not start or finish in time: {exc}", file=run.out)
        return False
    run.results["network"] = report
    print("stage network: seqrepair publish -> seqrepair serve (AMQP 1.0, journal first, "
          f"{args.network_loss:.0%} forced loss, SIGKILL + restart half way) -> "
          "seqrepair subscribe x3 (two topic patterns; one subscription made through the "
          "REST API, topics ending in /LFPG)", file=run.out)
    print(f"  published {report['published']}, component restarts "
          f"{report['component_restarts']}, {time.perf_counter() - started:.1f} s", file=run.out)
    print(f"  authentication: {report['authentication']}", file=run.out)
    header = ("subscriber", "pattern", "entitled", "delivered", "gaps", "repairs",
              "duplicates", "resets", "unrecoverable", "exactly once")
    rows = [header]
    for name, sub in report["subscribers"].items():
        rows.append((name, sub["pattern"], sub["entitled"], sub["delivered"], sub["gaps"],
                     sub["repairs"], sub["duplicates"], sub["resets"], sub["unrecoverable"],
                     "yes" if sub["in_order_exactly_once"] else "NO"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  " + "  ".join(f"{value!s:<{w}}" for value, w in zip(row, widths, strict=True)),
              file=run.out)
    return bool(report["ok"]) and all(
        sub["unrecoverable"] == 0 for sub in report["subscribers"].values()
    )


def _images_from_output(path: Path) -> dict[str, dict[str, Any]]:
    """Fold a ``seqrepair subscribe`` JSON-lines output into item images."""
    cache = ImageCache()
    with path.open() as lines:
        for line in lines:
            row = json.loads(line)
            cache.apply(Publication(topic=row["topic"], source=row["source"],
                                    source_seq=row["source_seq"], ptype=row["ptype"],
                                    fields=row["fields"]))
    return cache.snapshot()


def spark_stage(run: DemoRun) -> bool:
    """Spark reads the Redis journal, rebuilds every image and audits every source."""
    if run.redis_url is None:
        print("stage spark: skipped (it reads the Redis journal; run without --no-redis)",
              file=run.out)
        return True
    from seqrepair.spark.audit import audit, format_summary
    from seqrepair.spark.reading import read_journal
    from seqrepair.spark.rebuild import collect_images, rebuild_images
    from seqrepair.spark.session import spark_session

    started = time.perf_counter()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # everything here is on loopback
    spark = spark_session(run.args.master, progress=False)
    try:
        journal = read_journal(spark, run.redis_url).cache()
        rebuilt = collect_images(rebuild_images(journal))
        digest = audit(spark, journal).to_dict()
        events = journal.count()
    finally:
        spark.stop()
    print(f"stage spark: {run.args.master} Spark read {events} journaled publications from "
          f"Redis, rebuilt {len(rebuilt)} items and audited them "
          f"({time.perf_counter() - started:.1f} s)", file=run.out)
    print("  " + format_summary(digest).replace("\n", "\n  "), file=run.out)
    ok = all(source["gap_numbers"] == 0 and source["duplicates"] == 0
             for source in digest["sources"])
    checks: list[tuple[str, dict[str, dict[str, Any]]]] = []
    in_process = run.results.get("in-process")
    if isinstance(in_process, SimulationReport):
        checks.append(("the in-process subscriber", in_process.subscriber_images))
    network = run.results.get("network")
    if network is not None:
        output = Path(network["workdir"]) / "all.jsonl"
        checks.append(("the network subscriber of /demo/#", _images_from_output(output)))
    for label, images in checks:
        theirs = {topic: rebuilt.get(topic) for topic in images}
        missing = [t for t in rebuilt if t.startswith(_prefix(images)) and t not in images]
        same = theirs == images and not missing
        ok = ok and same
        print(f"  Spark images == the cache of {label} ({len(images)} items): "
              f"{'yes' if same else 'NO'}", file=run.out)
    return ok


def _prefix(images: dict[str, dict[str, Any]]) -> str:
    """The topic root a subscriber's items share (``/weather/`` or ``/demo/``)."""
    first = next(iter(images), "/")
    return "/" + first.split("/")[1] + "/"


STAGES: list[tuple[str, Stage]] = [
    ("in-process", in_process_stage),
    ("network", network_stage),
    ("spark", spark_stage),
]


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    outcomes = []
    if threading.current_thread() is threading.main_thread():
        # SIGTERM unwinds like Ctrl-C: the servers stop and the work folder goes
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="seqrepair-demo-")))
        redis_url = args.redis_url
        if redis_url is None and not args.no_redis:
            from seqrepair.journal import EmbeddedRedis

            server = stack.enter_context(EmbeddedRedis(data_dir=workdir / "redis"))
            redis_url = server.url
            print(f"embedded redis-server at {redis_url} (data in {workdir / 'redis'})\n",
                  file=out)
        demo = DemoRun(args=args, redis_url=redis_url, workdir=workdir, out=out)
        for name, stage in STAGES:
            if args.only and name not in args.only:
                continue
            ok = stage(demo)
            outcomes.append((name, ok))
            print(f"  => {name}: {'OK' if ok else 'FAILED'}\n", file=out)
    failed = [name for name, ok in outcomes if not ok]
    print("demo:", "all stages OK" if not failed else f"FAILED stages: {', '.join(failed)}",
          file=out)
    return 1 if failed else 0


def _run(args: argparse.Namespace) -> int:
    # --no-redis runs the in-process stage alone, on the core: the base install runs it
    needs = () if args.no_redis else ("proton", "redis", "pyspark", "pyarrow", "pandas")
    return run_body(args, "seqrepair.demo:run", *needs, extras=["all"])


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the end-to-end demo on embedded defaults",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--publications", type=positive_int, default=100_000)
    parser.add_argument("--bits", type=bit_width, default=8,
                        help="link sequence width (default 8)")
    parser.add_argument("--loss", type=fraction, default=0.01, help="loss probability (0.01)")
    parser.add_argument("--resets", type=non_negative_int, default=2,
                        help="forced link resets (2)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--network-publications", type=positive_int, default=3000,
                        help="publications in the networked stage (3000)")
    parser.add_argument("--network-loss", type=fraction, default=0.02,
                        help="loss forced at the component's send path (0.02)")
    parser.add_argument("--master", type=spark_master, default="local[2]",
                        help="Spark master (local[2])")
    parser.add_argument("--only", action="append", choices=[name for name, _ in STAGES],
                        help="run only the named stage(s)")
    parser.add_argument("--redis-url", help="journal to this Redis instead of a private one")
    parser.add_argument("--no-redis", action="store_true",
                        help="keep the journal in memory (no Redis stages)")
    parser.set_defaults(func=_run)
