"""The rebuild and audit jobs behind ``seqrepair rebuild|audit`` and ``spark-submit``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from math import isfinite
from typing import Any

import structlog
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from seqrepair.spark.audit import audit
from seqrepair.spark.datasource import DEFAULT_PARTITION_SIZE
from seqrepair.spark.reading import read_journals
from seqrepair.spark.rebuild import rebuild_images, write_images
from seqrepair.spark.session import spark_session

log = structlog.get_logger(__name__)


def add_input_arguments(parser: argparse.ArgumentParser, *, master: bool = True) -> None:
    """The options shared by ``rebuild`` and ``audit``."""
    if master:
        parser.add_argument(
            "--master", default="local[*]", help="Spark master URL (default local[*])"
        )
    parser.add_argument("--journal", metavar="REDIS_URL", help="read the Redis journal at URL")
    parser.add_argument("--archive", metavar="PATH", help="read the Parquet archive under PATH")
    parser.add_argument("--output", metavar="PATH", help="write results (Parquet) under PATH")
    parser.add_argument(
        "--partition-size",
        type=int,
        default=DEFAULT_PARTITION_SIZE,
        help="journal numbers per Spark partition when reading Redis",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="hide Spark's console progress bar"
    )


def add_rebuild_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rebuild`` beyond the shared ones."""
    parser.add_argument(
        "--as-of-seq",
        action="append",
        default=[],
        metavar="SOURCE=SEQ",
        help="rebuild as of this absolute number of SOURCE (repeatable)",
    )
    parser.add_argument(
        "--as-of-time",
        type=_finite_seconds,
        help="rebuild as of this timestamp (seconds): each source up to its first publication "
        "stamped later (publications are cut on their effective time)",
    )
    parser.add_argument("--show", type=int, default=10, help="print this many images")


def _finite_seconds(text: str) -> float:
    value = float(text)  # argparse reports a ValueError as an invalid value
    if not isfinite(value):
        raise ValueError(f"a time must be a finite number of seconds, got {text!r}")
    return value


def parse_as_of(values: Sequence[str]) -> dict[str, int]:
    """``["feed.a=10"]`` -> ``{"feed.a": 10}``; raises ValueError on a malformed pair."""
    out = {}
    for value in values:
        source, sep, seq = value.rpartition("=")
        if not sep or not source or not seq.isdigit():
            raise ValueError(f"--as-of-seq wants SOURCE=SEQ, got {value!r}")
        out[source] = int(seq)
    return out


def _input(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    if not args.journal and not args.archive:
        raise ValueError("give --journal REDIS_URL and/or --archive PATH")
    frame = read_journals(
        spark, url=args.journal, archive=args.archive, partition_size=args.partition_size
    )
    if args.journal:
        # the rebuild and the audit scan their input several times: read Redis once
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
    return frame


def session_for(args: argparse.Namespace) -> SparkSession:
    """The session a command runs in (``--master`` None: as spark-submit set it)."""
    return spark_session(getattr(args, "master", None), progress=not args.no_progress)


def run_rebuild(spark: SparkSession, args: argparse.Namespace) -> tuple[dict[str, Any], DataFrame]:
    """Rebuild images from the input; write them when ``--output``; return a summary and the
    images (read back from ``--output`` when written)."""
    started = time.perf_counter()
    images = rebuild_images(
        _input(spark, args), as_of_seq=parse_as_of(args.as_of_seq), as_of_time=args.as_of_time
    )
    if args.output:
        write_images(images, args.output)
        images = spark.read.parquet(args.output)
    totals = images.agg(
        F.count("*").alias("items"),
        F.coalesce(F.sum(F.col("partial").cast("int")), F.lit(0)).alias("partial"),
        F.coalesce(F.sum(F.size("fields")), F.lit(0)).alias("fields"),
    ).first()
    summary = {
        "items": int(totals["items"]) if totals else 0,
        "partial": int(totals["partial"]) if totals else 0,
        "fields": int(totals["fields"]) if totals else 0,
        "output": args.output,
        "seconds": round(time.perf_counter() - started, 3),
    }
    log.info("rebuild done", **summary)
    return summary, images


def run_audit(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    """Audit the input; write tables and summary.json when ``--output``; return the digest."""
    report = audit(spark, _input(spark, args))  # the journal's trim record rides along
    digest = report.write(args.output) if args.output else report.to_dict()
    print(report.summary())
    log.info("audit done", sources=len(digest["sources"]), output=args.output)
    return digest


def rebuild_main(args: argparse.Namespace) -> int:
    """``seqrepair rebuild``."""
    try:
        as_of = parse_as_of(args.as_of_seq)
        if not args.journal and not args.archive:
            raise ValueError("give --journal REDIS_URL and/or --archive PATH")
    except ValueError as exc:
        print(f"seqrepair rebuild: {exc}", file=sys.stderr)
        return 2
    spark = session_for(args)
    log.debug("rebuild", as_of_seq=as_of, as_of_time=args.as_of_time)
    summary, images = run_rebuild(spark, args)
    if args.show:
        for row in images.orderBy("topic").limit(args.show).collect():
            print(f"{row['topic']}: {dict(row['fields'])}{' (partial)' if row['partial'] else ''}")
    print(json.dumps(summary, sort_keys=True))
    return 0


def audit_main(args: argparse.Namespace) -> int:
    """``seqrepair audit``."""
    if not args.journal and not args.archive:
        print("seqrepair audit: give --journal REDIS_URL and/or --archive PATH", file=sys.stderr)
        return 2
    run_audit(session_for(args), args)
    return 0
