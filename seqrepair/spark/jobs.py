"""The rebuild and audit jobs behind ``seqrepair rebuild|audit`` and ``spark-submit``."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from seqrepair.core.errors import InvalidConfigError, SeqRepairError
from seqrepair.logs import get_logger
from seqrepair.spark.audit import TABLES as AUDIT_TABLES
from seqrepair.spark.audit import audit, format_summary
from seqrepair.spark.reading import read_journals
from seqrepair.spark.rebuild import rebuild_images, write_images
from seqrepair.spark.session import spark_session

log = get_logger(__name__)


# What Spark writes into a Parquet output folder.
_SPARK_OUTPUT = re.compile(r"part-.*|_SUCCESS|\..*\.crc|_(started|committed)_.*")


def check_output(path: str, *, inputs: Sequence[str], audit: bool = False) -> None:
    """Refuse an output folder whose writing would destroy what is not this command's own.

    Spark replaces an output folder whole, so ``path`` must be new, empty, or hold only what a
    ``rebuild`` (Parquet part files) or an ``audit`` (its tables and ``summary.json``) wrote;
    and it must not hold, or lie within, an input. Raises :class:`InvalidConfigError`.
    """
    target = os.path.realpath(path)
    for given in inputs:
        source = os.path.realpath(given)
        if os.path.commonpath([target, source]) in (target, source):
            raise InvalidConfigError(f"--output {path} overlaps the input {given}", got=path)
    if not os.path.exists(target):
        return
    if not os.path.isdir(target):
        raise InvalidConfigError(f"--output {path} exists and is no folder", got=path)
    own = {"summary.json", *AUDIT_TABLES} if audit else set()
    foreign = sorted(
        name for name in os.listdir(target) if name not in own and not _SPARK_OUTPUT.fullmatch(name)
    )
    if foreign:
        raise InvalidConfigError(
            f"--output {path} holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}"
            f", which this command did not write: give a new or empty folder",
            got=path,
        )


def _check_input(args: argparse.Namespace, command: str) -> None:
    if not args.journal and not args.archive:
        raise InvalidConfigError("give --journal REDIS_URL and/or --archive PATH")
    if args.archive and not args.journal and not os.path.isdir(args.archive):
        # (beside a journal the archive may not exist yet: retention has archived nothing)
        raise InvalidConfigError(f"no archive folder at {args.archive}", got=args.archive)
    if args.output:
        check_output(
            args.output, inputs=[args.archive] if args.archive else [], audit=command == "audit"
        )


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
    print(format_summary(digest))  # the digest's own figures: no second pass over the tables
    log.info("audit done", sources=len(digest["sources"]), output=args.output)
    return digest


def rebuild_main(args: argparse.Namespace) -> int:
    """``seqrepair rebuild``: exit 2 on bad input, 1 when the journal cannot be read."""
    try:
        as_of = parse_as_of(args.as_of_seq)
        _check_input(args, "rebuild")
    except ValueError as exc:
        return _fail("rebuild", exc, 2)
    try:
        spark = session_for(args)
        log.debug("rebuild", as_of_seq=as_of, as_of_time=args.as_of_time)
        summary, images = run_rebuild(spark, args)
    except SeqRepairError as exc:
        return _fail("rebuild", exc, 2 if isinstance(exc, InvalidConfigError) else 1)
    if args.show:
        for row in images.orderBy("topic").limit(args.show).collect():
            print(f"{row['topic']}: {dict(row['fields'])}{' (partial)' if row['partial'] else ''}")
    print(json.dumps(summary, sort_keys=True))
    return 0


def audit_main(args: argparse.Namespace) -> int:
    """``seqrepair audit``: exit 2 on bad input, 1 when the journal cannot be read."""
    try:
        _check_input(args, "audit")
    except ValueError as exc:
        return _fail("audit", exc, 2)
    try:
        run_audit(session_for(args), args)
    except SeqRepairError as exc:
        return _fail("audit", exc, 2 if isinstance(exc, InvalidConfigError) else 1)
    return 0


def _fail(command: str, error: Exception, status: int) -> int:
    print(f"seqrepair {command}: {error}", file=sys.stderr)
    return status
