"""Journals into DataFrames: the Redis journal, the Parquet archive, and both without overlap.

Every reader returns each (source, seq) once:

* :func:`read_journal` reads the ranges Redis holds **when the DataFrame is built** (a
  snapshot: every action reads the same numbers, publications appended later are not seen;
  build a new DataFrame to see them). Numbers retention trims in between are read from the
  archive when one is given, else the action fails with
  :class:`~seqrepair.spark.datasource.SnapshotTrimmedError`.
* :func:`read_archive` reads the archive files, overlapping ones included (a range archived
  twice, e.g. an export followed by a retention pass), each number once. The overlap is
  resolved from the file names (``seq-<first>-<last>.parquet``, the archive format), so
  archives without overlaps are read with no extra work.
* :func:`read_journals` is the archive below each source's snapshot range plus the snapshot.

The journal readers record the trim record of their snapshot (per source the last number
retention had removed) in the ``seq`` column's metadata, where
:func:`~seqrepair.spark.audit.audit` finds it (see :func:`~seqrepair.spark.schema.trim_record`).
"""

from __future__ import annotations

import glob
import os
import urllib.parse
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from seqrepair.core.config import check_positive_int
from seqrepair.core.errors import InvalidConfigError
from seqrepair.logs import get_logger
from seqrepair.spark.datasource import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_PARTITION_SIZE,
    FORMAT_NAME,
    JournalDataSource,
    SourceRange,
    archive_file_range,
    encode_ranges,
    source_ranges,
)
from seqrepair.spark.schema import (
    JOURNAL_COLUMNS,
    JOURNAL_SCHEMA,
    NOT_SELECTED_PTYPE,
    with_trim_record,
)

log = get_logger(__name__)


def register_journal_source(spark: SparkSession) -> None:
    """Make ``spark.read.format("seqrepair-journal")`` available in ``spark``."""
    spark.dataSource.register(JournalDataSource)


def _journal_frame(
    spark: SparkSession,
    url: str,
    ranges: Sequence[SourceRange],
    *,
    partition_size: int,
    page_size: int,
    archive: str | None,
) -> DataFrame:
    check_positive_int("partition_size", partition_size)
    check_positive_int("page_size", page_size)
    register_journal_source(spark)
    reader = (
        spark.read.format(FORMAT_NAME)
        .option("url", url)
        .option("partition_size", str(partition_size))
        .option("page_size", str(page_size))
        .option("ranges", encode_ranges(ranges))
    )
    if archive is not None:
        reader = reader.option("archive", os.path.abspath(archive))
    frame = reader.load()
    return with_trim_record(frame, {r.source: r.first - 1 for r in ranges})


def read_journal(
    spark: SparkSession,
    url: str,
    *,
    sources: Sequence[str] | None = None,
    partition_size: int = DEFAULT_PARTITION_SIZE,
    page_size: int = DEFAULT_PAGE_SIZE,
    archive: str | None = None,
) -> DataFrame:
    """The retained Redis journal at ``url`` (every source, or ``sources``) as a DataFrame.

    A snapshot of the ranges held now (see the module docstring); ``archive`` is where to
    find numbers retention trims before an action reads them. Read in parallel: one task per
    ``partition_size`` absolute numbers of a source.
    """
    ranges = source_ranges(url, sources)
    log.info("journal snapshot", url=url, sources=len(ranges))
    return _journal_frame(
        spark, url, ranges, partition_size=partition_size, page_size=page_size, archive=archive
    )


def archive_files(root: str) -> list[str]:
    """Every archive file under ``root`` (``<root>/<source>/seq-<first>-<last>.parquet``),
    sources whose folder name starts with a dot included (glob's ``*`` would skip them)."""
    try:
        folders = [entry.path for entry in os.scandir(root) if entry.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        path
        for folder in folders
        for path in glob.glob(os.path.join(glob.escape(folder), "seq-*.parquet"))
    )


ArchivePlan = list[tuple[list[str], list[tuple[str, int, int]] | None]]


def plan_archive(files: Sequence[str]) -> ArchivePlan | None:
    """Groups of archive files that together hold each (source, seq) once.

    Each group is ``(files, keep)``: ``keep`` None means every row of those files (they do
    not overlap one another), else the rows of ``(source, first, last)`` ranges only. Within
    a source, files are taken by first number (widest first); each keeps only the numbers
    above everything taken before it, and files that add nothing are left out. Returns None
    when a file name does not give its range.
    """
    spans: dict[str, list[tuple[int, int, str]]] = {}
    for path in files:
        span = archive_file_range(path)
        if span is None:
            return None
        source = urllib.parse.unquote(os.path.basename(os.path.dirname(path)))
        spans.setdefault(source, []).append((span[0], span[1], path))
    whole: list[str] = []
    cut: list[list[tuple[str, int, int, int, str]]] = []  # groups without overlaps inside
    for source, entries in sorted(spans.items()):
        entries.sort(key=lambda e: (e[0], -e[1]))
        covered = 0
        for first, last, path in entries:
            keep_from = max(first, covered + 1)
            if keep_from > last:
                continue
            covered = last
            if keep_from == first:
                whole.append(path)
                continue
            entry = (source, first, last, keep_from, path)
            for group in cut:  # the first group with no file overlapping this one
                if all(s != source or b < first or a > last for s, a, b, _, _ in group):
                    group.append(entry)
                    break
            else:
                cut.append([entry])
    plan: ArchivePlan = [(whole, None)] if whole else []
    for group in cut:
        plan.append(([e[4] for e in group], [(s, k, b) for s, _, b, k, _ in group]))
    return plan


def _in_ranges(ranges: Sequence[tuple[str, int, int]]) -> Column:
    cond = F.lit(False)
    for source, first, last in ranges:
        cond = cond | (
            (F.col("source") == F.lit(source)) & F.col("seq").between(F.lit(first), F.lit(last))
        )
    return cond


def read_archive(spark: SparkSession, root: str) -> DataFrame:
    """The Parquet archive under ``root`` as a DataFrame (empty when there is none), each
    (source, seq) once even where archive files overlap (see :func:`plan_archive`)."""
    files = archive_files(root)
    log.info("archive files", root=root, count=len(files))
    if not files:
        return spark.createDataFrame([], JOURNAL_SCHEMA)

    def read(paths: Sequence[str]) -> DataFrame:
        return spark.read.schema(JOURNAL_SCHEMA).parquet(*paths).select(*JOURNAL_COLUMNS)

    plan = plan_archive(files)
    if plan is None:  # a file whose name does not give its range: deduplicate by shuffle
        log.warning("archive file names without ranges: deduplicating by (source, seq)")
        return read(files).dropDuplicates(["source", "seq"])
    frames = [
        read(paths) if keep is None else read(paths).where(_in_ranges(keep)) for paths, keep in plan
    ]
    if sum(len(paths) for paths, _ in plan) < len(files) or len(plan) > 1:
        log.info("archive files overlap", groups=len(plan), files=len(files))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _cut_markers(older: DataFrame, held: Sequence[SourceRange]) -> DataFrame:
    """``older`` (archive rows below each source's snapshot range) with each not-selected
    marker row reaching into that range cut to end just below it: the snapshot's first
    partition yields the rest (see :func:`~seqrepair.spark.datasource.range_rows`), so each
    number is covered once."""
    if not held:
        return older
    marker = F.col("ptype") == NOT_SELECTED_PTYPE
    through = F.col("fields")["through"].cast("long")
    starts = older.sparkSession.createDataFrame(
        [(r.source, r.first - 1) for r in held], "source string, _below long"
    )
    joined = older.join(F.broadcast(starts), "source", "left")
    below = F.col("_below")
    cut = marker & below.isNotNull() & (through > below)
    fields = F.create_map(
        F.lit("through"), below.cast("string"), F.lit("selection"), F.col("fields")["selection"]
    )
    return joined.withColumn("fields", F.when(cut, fields).otherwise(F.col("fields"))).select(
        *JOURNAL_COLUMNS
    )


def read_journals(
    spark: SparkSession,
    *,
    url: str | None = None,
    archive: str | None = None,
    partition_size: int = DEFAULT_PARTITION_SIZE,
) -> DataFrame:
    """The archive and the Redis journal as one DataFrame, each (source, seq) once.

    The journal side is a snapshot of the ranges Redis holds when this is called (see
    :func:`read_journal`; numbers trimmed before an action are read from the archive). The
    archive side keeps, of each source in the snapshot, only numbers below its range; other
    sources whole. Both are plain filters, no shuffle. The snapshot's trim record is kept as
    ``seq`` column metadata for the audit.
    """
    if url is None and archive is None:
        raise InvalidConfigError("give a journal url, an archive folder, or both")
    if url is None:
        assert archive is not None
        return read_archive(spark, archive)
    ranges = source_ranges(url)
    log.info("journal snapshot", url=url, sources=len(ranges))
    journal = _journal_frame(
        spark,
        url,
        ranges,
        partition_size=partition_size,
        page_size=DEFAULT_PAGE_SIZE,
        archive=archive,
    )
    if archive is None:
        return journal
    held = [r for r in ranges if r.first <= r.last]
    overlap = F.lit(False)
    for r in held:
        overlap = overlap | ((F.col("source") == r.source) & (F.col("seq") >= r.first))
    older = _cut_markers(read_archive(spark, archive).where(~overlap), held)
    return with_trim_record(older.unionByName(journal), {r.source: r.first - 1 for r in ranges})
