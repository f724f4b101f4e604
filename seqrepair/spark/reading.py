"""Journals into DataFrames: the Redis journal, the Parquet archive, and both without overlap."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from seqrepair.spark.datasource import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_PARTITION_SIZE,
    FORMAT_NAME,
    JournalDataSource,
    source_ranges,
)
from seqrepair.spark.schema import JOURNAL_COLUMNS, JOURNAL_SCHEMA

log = structlog.get_logger(__name__)


def register_journal_source(spark: SparkSession) -> None:
    """Make ``spark.read.format("seqrepair-journal")`` available in ``spark``."""
    spark.dataSource.register(JournalDataSource)


def read_journal(
    spark: SparkSession,
    url: str,
    *,
    sources: Sequence[str] | None = None,
    partition_size: int = DEFAULT_PARTITION_SIZE,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> DataFrame:
    """The retained Redis journal at ``url`` (every source, or ``sources``) as a DataFrame.

    Read in parallel: one task per ``partition_size`` absolute numbers of a source.
    """
    register_journal_source(spark)
    reader = (
        spark.read.format(FORMAT_NAME)
        .option("url", url)
        .option("partition_size", str(partition_size))
        .option("page_size", str(page_size))
    )
    if sources is not None:
        reader = reader.option("sources", ",".join(sources))
    return reader.load()


def archive_files(root: str) -> list[str]:
    """Every archive file under ``root`` (``<root>/<source>/seq-<first>-<last>.parquet``)."""
    return sorted(glob.glob(os.path.join(glob.escape(root), "*", "seq-*.parquet")))


def read_archive(spark: SparkSession, root: str) -> DataFrame:
    """The Parquet archive under ``root`` as a DataFrame (empty when there is none).

    Rows are as archived: overlapping archive files show up as duplicates (the audit counts
    them).
    """
    files = archive_files(root)
    log.info("archive files", root=root, count=len(files))
    if not files:
        return spark.createDataFrame([], JOURNAL_SCHEMA)
    return spark.read.schema(JOURNAL_SCHEMA).parquet(*files).select(*JOURNAL_COLUMNS)


def read_journals(
    spark: SparkSession,
    *,
    url: str | None = None,
    archive: str | None = None,
    partition_size: int = DEFAULT_PARTITION_SIZE,
) -> DataFrame:
    """The archive and the Redis journal as one DataFrame, each (source, seq) once.

    Where both hold a number (an archive written before trimming, the journal not yet
    trimmed), the journal's row is kept: archive rows of a source at or after the first number
    the journal still holds are filtered out (a plain filter, no shuffle).
    """
    if url is None and archive is None:
        raise ValueError("give a journal url, an archive folder, or both")
    if url is None:
        assert archive is not None
        return read_archive(spark, archive)
    journal = read_journal(spark, url, partition_size=partition_size)
    if archive is None:
        return journal
    held = [r for r in source_ranges(url) if r.first <= r.last]
    overlap = F.lit(False)
    for r in held:
        overlap = overlap | ((F.col("source") == r.source) & (F.col("seq") >= r.first))
    older = read_archive(spark, archive).where(~overlap)
    return older.unionByName(journal)
