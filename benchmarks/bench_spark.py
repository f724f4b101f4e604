"""Spark image-rebuild benchmark (results in benchmarks/results/spark.md).

For each size (default 1, 5 and 20 million publications) it generates one Parquet journal
archive (pyarrow, 4 sources, 10 000 items, 8 fields; 84 % updates, 5 % corrections, 8 % images,
1 % drops, 2 % snapshots) and rebuilds every image from it, in the same run:

* Spark ``local[1]`` and ``local[2]`` (each in a fresh process: a fresh JVM), timed from the
  job's start to the last image computed (a ``noop`` write). The first (cold) run pays for
  JVM warm-up and code generation and is reported apart; then three warm runs, of which the
  best gives the rate (the machine is shared, so the slower runs measure other people's jobs;
  all runs are printed);
* a plain Python fold that streams the same Parquet with ``pyarrow`` ``iter_batches``,
  merging the sources in the rebuild's event order, with dicts.

Peak memory is each process's high-water RSS from ``/proc/<pid>/status`` (``VmHWM``): the
Spark JVM plus the Python driver, and the fold's own process. The physical plan is printed and
checked for Python UDF nodes. Run::

    .venv/bin/python benchmarks/bench_spark.py                 # 1M, 5M, 20M
    .venv/bin/python benchmarks/bench_spark.py --sizes 1e6     # quicker
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SOURCES = ("feed.a", "feed.b", "feed.c", "feed.d")
FIELD_NAMES = tuple(f"f{i}" for i in range(8))
BITS = 16
ROWS_PER_FILE = 1_000_000
ARROW_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("wire_seq", pa.int64(), nullable=False),
        pa.field("bits", pa.int32(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("ptype", pa.string(), nullable=False),
        pa.field("fields", pa.map_(pa.string(), pa.string())),
        pa.field("permtoken", pa.string()),
        pa.field("timestamp", pa.float64()),
    ]
)
PTYPES = np.array(["update", "correction", "image", "drop", "snapshot"])
PTYPE_WEIGHTS = np.array([0.84, 0.05, 0.08, 0.01, 0.02])


def _chunk(rng: np.random.Generator, source: str, first: int, count: int, topics: int) -> pa.Table:
    seq = np.arange(first, first + count, dtype=np.int64)
    wire = (seq - 1) % ((1 << BITS) - 1) + 1
    kind = rng.choice(len(PTYPES), size=count, p=PTYPE_WEIGHTS)
    nfields = np.select(
        [kind == 0, kind == 1, kind == 2],
        [rng.integers(1, 4, count), np.ones(count, np.int64), rng.integers(4, 9, count)],
        0,
    ).astype(np.int64)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(nfields, out=offsets[1:])
    total = int(offsets[-1])
    start = rng.integers(0, len(FIELD_NAMES), count)
    within = np.arange(total) - np.repeat(offsets[:-1], nfields)
    key_idx = (np.repeat(start, nfields) + within) % len(FIELD_NAMES)
    keys = pa.DictionaryArray.from_arrays(
        pa.array(key_idx.astype(np.int32)), pa.array(FIELD_NAMES)
    ).cast(pa.string())
    raw = pc.cast(pa.array(rng.integers(0, 100_000, total)), pa.string())
    values = pc.if_else(pa.array(rng.random(total) < 0.05), pa.scalar("null"), raw)
    fields = pa.MapArray.from_arrays(pa.array(offsets), keys, values)
    topic_idx = rng.integers(0, topics, count)
    topic = pc.binary_join_element_wise(
        pa.scalar("/bench/item/"), pc.cast(pa.array(topic_idx), pa.string()), ""
    )
    ts = 1_700_000_000.0 + seq.astype(np.float64) * 0.001 + SOURCES.index(source) * 1e-4
    return pa.table(
        {
            "source": pa.array([source] * count, pa.string()),
            "seq": pa.array(seq),
            "wire_seq": pa.array(wire),
            "bits": pa.array(np.full(count, BITS, np.int32)),
            "topic": topic,
            "ptype": pa.array(PTYPES[kind]),
            "fields": fields,
            "permtoken": pa.nulls(count, pa.string()),
            "timestamp": pa.array(ts),
        },
        schema=ARROW_SCHEMA,
    )


def generate_archive(root: Path, events: int, *, topics: int = 10_000, seed: int = 7) -> Path:
    """Write ``events`` synthetic publications as a journal archive under ``root``."""
    from seqrepair.journal.format import archive_path

    rng = np.random.default_rng(seed)
    per_source = events // len(SOURCES)
    for n, source in enumerate(SOURCES):
        count = per_source if n < len(SOURCES) - 1 else events - per_source * n
        first = 1
        while count > 0:
            size = min(ROWS_PER_FILE, count)
            table = _chunk(rng, source, first, size, topics)
            path = archive_path(root, source, first, first + size - 1)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            first += size
            count -= size
    return root


FORBIDDEN = ("PythonUDF", "BatchEvalPython", "ArrowEvalPython", "PythonUDTF", "MapInPandas")
WARM_RUNS = 3
SPARK_CONFIGS = (  # the two configurations of the 2 / 1 CPU ratio run back to back
    ("spark1cpu", "spark-pinned", 1),  # local[1], the process pinned to one CPU
    ("spark2", "spark", 2),
    ("spark1", "spark", 1),  # local[1], the JVM free to use both CPUs for GC and JIT
)


def peak_rss_mib(pid: int | str = "self") -> float:
    """High-water resident set size of ``pid`` in MiB (Linux ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def archive_for(root: Path, events: int) -> Path:
    """The archive of ``events`` publications under ``root`` (generated once, then reused)."""
    path = root / f"events-{events}"
    done = path / ".complete"
    if not done.exists():
        started = time.perf_counter()
        generate_archive(path, events)
        done.write_text("ok")
        print(f"  generated {events:,} events in {time.perf_counter() - started:.1f}s")
    return path


# --- Spark ------------------------------------------------------------------------------------


def spark_run(archive: Path, cores: int, *, pin: bool = False) -> dict[str, Any]:
    """Rebuild ``archive`` with Spark on ``cores`` local cores (runs inside a child process).

    ``pin`` restricts this process, and so the JVM it starts, to ``cores`` CPUs: without it a
    ``local[1]`` JVM still runs its garbage collector and JIT compiler on the other CPU.
    """
    if pin:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
    from seqrepair.spark.reading import read_archive
    from seqrepair.spark.rebuild import rebuild_images
    from seqrepair.spark.session import spark_session

    spark = spark_session(
        f"local[{cores}]",
        app_name=f"bench-{cores}",
        conf={
            "spark.sql.shuffle.partitions": str(max(4, 2 * cores)),
            "spark.driver.memory": "6g",
            "spark.sql.files.maxPartitionBytes": str(32 << 20),
        },
    )
    journal = read_archive(spark, str(archive))
    runs = []
    load = os.getloadavg()[0]
    sc = spark.sparkContext
    for n in range(1 + WARM_RUNS):  # the first run pays for JVM warm-up and code generation
        sc.setJobGroup(f"run-{n}", "rebuild")
        images = rebuild_images(journal)
        started = time.perf_counter()
        images.write.format("noop").mode("overwrite").save()
        runs.append(time.perf_counter() - started)
    sc.setJobGroup("checks", "totals")  # the jobs below are not part of any run
    seconds = min(runs[1:])
    best = f"run-{1 + runs[1:].index(seconds)}"
    plan = images._jdf.queryExecution().executedPlan().toString()
    totals = images.selectExpr("count(*) AS items", "sum(size(fields)) AS fields").first()
    jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    result = {
        "seconds": seconds,
        "cold_seconds": runs[0],
        "warm_runs": runs[1:],
        "items": int(totals["items"]),
        "fields": int(totals["fields"]),
        "jvm_mib": peak_rss_mib(jvm_pid),
        "python_mib": peak_rss_mib(),
        "plan": plan,
        "stage_tasks": stage_tasks(spark, best),
        "load": [load, os.getloadavg()[0]],
    }
    spark.stop()
    return result


def stage_tasks(spark: Any, group: str) -> list[int]:
    """Task count of every stage the jobs of ``group`` ran, in stage order (skipped stages,
    whose shuffle output was reused, are left out)."""
    tracker = spark.sparkContext.statusTracker()
    counts = {}
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            s = tracker.getStageInfo(stage)
            if s is not None and s.numCompletedTasks > 0:
                counts[stage] = s.numTasks
    return [counts[k] for k in sorted(counts)]


# --- the plain Python fold ---------------------------------------------------------------------

_COLUMNS = ["source", "seq", "topic", "ptype", "fields", "timestamp"]
_NO_TIME = float("-inf")


def _stream(files: list[Path]) -> Iterator[tuple[float, str, int, str, str, list[Any]]]:
    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536, columns=_COLUMNS):
            cols = batch.to_pydict()
            for source, seq, topic, ptype, fields, ts in zip(
                cols["source"],
                cols["seq"],
                cols["topic"],
                cols["ptype"],
                cols["fields"],
                cols["timestamp"],
                strict=True,
            ):
                yield (_NO_TIME if ts is None else ts, source, seq, topic, ptype, fields)


def python_fold(archive: Path) -> dict[str, Any]:
    """Fold the archive into images with dicts, sources merged in event order."""
    started = time.perf_counter()
    per_source = [
        sorted(folder.glob("seq-*.parquet"))
        for folder in sorted(archive.iterdir())
        if folder.is_dir()
    ]
    items: dict[str, tuple[dict[str, str], bool]] = {}
    for _ts, _source, _seq, topic, ptype, fields in heapq.merge(
        *(_stream(files) for files in per_source)
    ):
        if ptype == "update" or ptype == "correction":
            item = items.get(topic)
            if item is None:
                items[topic] = (dict(fields), True)
            else:
                item[0].update(fields)
        elif ptype == "image":
            items[topic] = (dict(fields), False)
        elif ptype == "drop":
            items.pop(topic, None)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "items": len(items),
        "fields": sum(len(f) for f, _ in items.values()),
        "python_mib": peak_rss_mib(),
    }


# --- driver --------------------------------------------------------------------------------------


def in_child(kind: str, archive: Path, cores: int = 0) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter, so peak memory is its own."""
    code = (
        "import json, sys; from pathlib import Path; sys.path[:0] = sys.argv[4:];"
        "import bench_spark as b; k, a, c = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]);"
        "r = b.spark_run(a, c, pin=k == 'spark-pinned') if k.startswith('spark') "
        "else b.python_fold(a);"
        "print('RESULT ' + json.dumps(r))"
    )
    here = str(Path(__file__).parent)
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", code, kind, str(archive), str(cores), here, root],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"{kind} run failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,5e6,20e6", help="comma-separated event counts")
    parser.add_argument("--root", type=Path, default=Path("/tmp/seqrepair-bench-spark"))
    parser.add_argument("--no-fold", action="store_true", help="skip the Python fold")
    parser.add_argument(
        "--write", type=Path, default=None,
        help="also write the report to this markdown file (results/spark.md keeps the history "
        "by hand: a run never overwrites it unasked)",
    )
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    rows = []
    plan_printed = False
    for events in sizes:
        print(f"{events:,} events")
        archive = archive_for(args.root, events)
        row: dict[str, Any] = {"events": events}
        for name, kind, cores in SPARK_CONFIGS:
            r = in_child(kind, archive, cores)
            if not plan_printed:
                print("physical plan:\n" + r["plan"])
                plan_printed = True
            bad = [n for n in FORBIDDEN if n in r["plan"]]
            assert not bad, f"Python evaluation in the physical plan: {bad}"
            row[name] = r
            print(
                f"  {name} (local[{cores}]): best {r['seconds']:.1f}s, "
                f"{events / r['seconds']:,.0f} ev/s (cold {r['cold_seconds']:.1f}s, warm "
                f"{', '.join(f'{w:.1f}' for w in r['warm_runs'])}s), JVM {r['jvm_mib']:.0f} MiB, "
                f"python {r['python_mib']:.0f} MiB, {r['items']} items, "
                f"tasks per stage {r['stage_tasks']}, load {r['load'][0]:.1f}-{r['load'][1]:.1f}"
            )
        if not args.no_fold:
            f = in_child("fold", archive)
            row["fold"] = f
            print(
                f"  python fold: {f['seconds']:.1f}s, {events / f['seconds']:,.0f} ev/s, "
                f"{f['python_mib']:.0f} MiB, {f['items']} items"
            )
            assert (f["items"], f["fields"]) == (row["spark1"]["items"], row["spark1"]["fields"])
        assert (row["spark1"]["items"], row["spark1"]["fields"]) == (
            row["spark2"]["items"],
            row["spark2"]["fields"],
        )
        rows.append(row)
    report = render(rows, " ".join(["benchmarks/bench_spark.py", *(argv or sys.argv[1:])]))
    print(report)
    if args.write is not None:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(report)
    return 0


def _cell(events: int, r: dict[str, Any]) -> str:
    return f"{events / r['seconds']:,.0f} ({r['seconds']:.1f}s; cold {r['cold_seconds']:.1f}s)"


def render(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# Spark image rebuild benchmark",
        "",
        f"Command: `.venv/bin/python {command}`  ",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}; load average at the end "
        f"{os.getloadavg()[0]:.1f} (other jobs share the machine).",
        "",
        "Events per second (best of three warm runs; seconds; the cold first run). "
        "`local[1] 1 CPU`: the process pinned to one CPU; `local[1]`: one task thread but the "
        "JVM free to run GC and JIT on the other CPU.",
        "",
        "| events | Spark local[1] 1 CPU | Spark local[1] | Spark local[2] | 2 / 1 CPU "
        "| Python fold | Spark local[2] / fold |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        n = row["events"]
        p1, s1, s2, f = row["spark1cpu"], row["spark1"], row["spark2"], row.get("fold")
        r2 = n / s2["seconds"]
        fold = f"{n / f['seconds']:,.0f} ({f['seconds']:.1f}s)" if f else "-"
        vs = f"{r2 / (n / f['seconds']):.1f}x" if f else "-"
        lines.append(
            f"| {n:,} | {_cell(n, p1)} | {_cell(n, s1)} | {_cell(n, s2)} "
            f"| {p1['seconds'] / s2['seconds']:.2f}x | {fold} | {vs} |"
        )
    lines += [
        "",
        "Peak RSS (VmHWM), MiB:",
        "",
        "| events | local[1] 1 CPU: JVM + python | local[1]: JVM + python "
        "| local[2]: JVM + python | Python fold |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        cells = [
            f"{row[k]['jvm_mib']:.0f} + {row[k]['python_mib']:.0f}"
            for k in ("spark1cpu", "spark1", "spark2")
        ]
        fold_mib = f"{row['fold']['python_mib']:.0f}" if row.get("fold") else "-"
        lines.append(f"| {row['events']:,} | {' | '.join(cells)} | {fold_mib} |")
    lines += [
        "",
        "Tasks per stage of the best run (the stages of the rebuild and the write; a stage with "
        "1 task runs on one core) and the load average at the start and end of each process:",
        "",
        "| events | local[1] 1 CPU | local[1] | local[2] |",
        "| ---: | --- | --- | --- |",
    ]
    for row in rows:
        cells = [
            f"{row[k]['stage_tasks']}; load {row[k]['load'][0]:.1f}-{row[k]['load'][1]:.1f}"
            for k in ("spark1cpu", "spark1", "spark2")
        ]
        lines.append(f"| {row['events']:,} | {' | '.join(cells)} |")
    lines += [
        "",
        "Goals: Spark >= 1,000,000 events/s at 20M; 2 cores >= 1.6x 1 core; no Python UDF in "
        "the physical plan (checked by the benchmark on every run).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
