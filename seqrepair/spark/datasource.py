"""A Spark Python Data Source that reads the Redis journal in parallel.

::

    spark.dataSource.register(JournalDataSource)
    df = (spark.read.format("seqrepair-journal")
          .option("url", "redis://127.0.0.1:6379/0")
          .option("partition_size", "50000")       # sequence numbers per partition
          .load())

Each source's retained range (``trimmed_through + 1`` .. ``high_water``) is cut into
partitions of ``partition_size`` absolute numbers; each partition is read by one task in
pages of the journal's ``READ`` script (``page_size`` entries per round trip, a packed row's
publications each an entry) and yields rows of
:data:`~seqrepair.spark.schema.JOURNAL_SCHEMA`. Options: ``url`` (required), ``sources``
(comma-separated; default every source in ``seqrepair:sources``), ``partition_size``
(default 50000), ``page_size`` (default 2000), ``ranges`` and ``archive`` (below).

Snapshots and retention
-----------------------
Without ``ranges`` the ranges are read from Redis whenever Spark plans a query, so each
action sees the journal as it is then. ``ranges`` (JSON ``[[source, first, last], ...]``, as
:func:`~seqrepair.spark.reading.read_journal` sets it from the ranges held when the DataFrame
is built) fixes them instead: every action reads the same numbers, later appends are not seen.

A partition must yield every number of its range. Numbers retention trimmed after the range
was chosen are read from the Parquet archive under ``archive`` when it holds them (retention
archives before it trims); any still missing fail the task with
:class:`SnapshotTrimmedError` (Spark reports it on the driver as a ``PythonException`` whose
message names it), never a silently shorter result.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from seqrepair.core.config import check_positive_int
from seqrepair.core.errors import InvalidConfigError
from seqrepair.journal.errors import TrimmedRangeError, map_redis_errors
from seqrepair.journal.journal import redis_client
from seqrepair.spark.options import DEFAULT_PARTITION_SIZE as DEFAULT_PARTITION_SIZE
from seqrepair.spark.schema import JOURNAL_COLUMNS, JOURNAL_SCHEMA, NOT_SELECTED_PTYPE

FORMAT_NAME = "seqrepair-journal"
DEFAULT_PAGE_SIZE = 2_000


@attrs.frozen
class SourceRange:
    """The retained absolute range of one source's journal."""

    source: str
    first: int
    last: int
    bits: int | None


class SnapshotTrimmedError(TrimmedRangeError):
    """Numbers a journal DataFrame's range needs were trimmed from Redis after the range was
    chosen, and the archive (if one was given) does not hold them either."""


class RangePartition(InputPartition):
    """Absolute numbers ``first``..``last`` of ``source`` (one Spark task); ``leading``: the
    first partition of the source's range (see :func:`range_rows`)."""

    def __init__(self, source: str, first: int, last: int, leading: bool = False) -> None:
        super().__init__((source, first, last))
        self.source = source
        self.first = first
        self.last = last
        self.leading = leading


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def source_ranges(url: str, sources: Sequence[str] | None = None) -> list[SourceRange]:
    """The retained range of each source (all journaled sources when ``sources`` is None).

    Raises :class:`~seqrepair.journal.errors.JournalUnavailableError` when Redis cannot be
    reached and :class:`InvalidConfigError` when ``url`` is no Redis URL."""
    from seqrepair.journal.format import (
        META_BITS,
        META_HIGH_WATER,
        META_TRIMMED_THROUGH,
        SOURCES_KEY,
        meta_key,
    )

    client = redis_client(url)
    try:
        with map_redis_errors("reading the journal's sources"):
            names = (
                sorted(_text(m) for m in client.smembers(SOURCES_KEY))
                if sources is None
                else list(sources)
            )
            with client.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hmget(meta_key(name), META_HIGH_WATER, META_TRIMMED_THROUGH, META_BITS)
                replies = pipe.execute()
    finally:
        client.close()
    ranges = []
    for name, (high, trimmed, bits) in zip(names, replies, strict=True):
        ranges.append(
            SourceRange(
                source=name,
                first=int(trimmed or 0) + 1,
                last=int(high or 0),
                bits=None if bits is None else int(bits),
            )
        )
    return ranges


def _positive_option(options: dict[str, str], name: str, default: int) -> int:
    text = options.get(name)
    try:
        value = default if text is None else int(text)
    except ValueError:
        raise InvalidConfigError(f"option {name} must be an integer, got {text!r}") from None
    check_positive_int(name, value)
    return value


def plan_partitions(ranges: Sequence[SourceRange], partition_size: int) -> list[RangePartition]:
    """Cut each source's range into partitions of at most ``partition_size`` numbers."""
    check_positive_int("partition_size", partition_size)
    parts = []
    for r in ranges:
        first = r.first
        while first <= r.last:
            last = min(r.last, first + partition_size - 1)
            parts.append(RangePartition(r.source, first, last, first == r.first))
            first = last + 1
    return parts


def _row(source_text: str, seq: int, text: dict[str, str]) -> tuple[tuple[Any, ...], int]:
    """The :data:`JOURNAL_SCHEMA` row of one stream entry and the last number it covers."""
    from seqrepair.journal.format import encode_value, space

    if text.get("ptype") == NOT_SELECTED_PTYPE:
        through = int(text["through"])
        bits = int(text["bits"])
        fields = {"through": str(through), "selection": encode_value(text.get("selection", ""))}
        row = (source_text, seq, space(bits).wire(seq), bits, "", NOT_SELECTED_PTYPE, fields,
               None, None)
        return row, through
    fields = json.loads(text["fields"])
    ts = text.get("ts")
    return (
        text["source"],
        seq,
        int(text["wire"]),
        int(text["bits"]),
        text["topic"],
        text["ptype"],
        {name: encode_value(value) for name, value in fields.items()},
        text.get("permtoken"),
        None if ts is None else float(ts),
    ), seq


def _entries(
    url: str, source: str, first: int, last: int, page_size: int, leading: bool = False
) -> Iterator[tuple[tuple[Any, ...] | None, int, int]]:
    """``(row, first, last)`` per entry of ``source`` Redis holds in ``first``..``last``: a
    not-selected marker covers ``first``..``last`` of its row. A marker beginning before
    ``first`` and reaching into it comes first with row None (its row is the partition's that
    holds its first number: each row is read once), or, when ``leading`` (no partition holds
    its first number: retention trimmed through it and kept it), with its row cut to begin
    at ``first``."""
    from seqrepair.journal import scripts
    from seqrepair.journal.format import meta_key, seq_of, stream_key

    check_positive_int("page_size", page_size)
    client = redis_client(url)
    key = stream_key(source)
    start = f"{first}-0"
    end = f"{last}-0"
    try:
        with map_redis_errors("reading the journal", source):
            if first > 1:
                before: list[Any] = client.xrevrange(key, f"{first - 1}-0", "-", count=1) or []
                for entry_id, values in before:
                    text = {_text(k): _text(v) for k, v in values.items()}
                    if text.get("ptype") == NOT_SELECTED_PTYPE:
                        _, through = _row(source, seq_of(entry_id), text)
                        if through >= first:
                            row = _row(source, first, text)[0] if leading else None
                            yield row, first, min(through, last)
        read = client.register_script(scripts.READ)  # a packed row read as its publications
        while True:
            with map_redis_errors("reading the journal", source):
                _, _, text = read(keys=[key, meta_key(source)],
                                  args=[start, end, page_size, "fwd"])
            page: list[Any] = json.loads(text)
            for entry_id, flat in page:
                seq = seq_of(entry_id)
                pairs = iter(flat)
                row, through = _row(source, seq, dict(zip(pairs, pairs, strict=True)))
                yield row, seq, through
            if len(page) < page_size:
                return
            start = f"({page[-1][0]}"
    finally:
        client.close()


def journal_rows(
    url: str, source: str, first: int, last: int, page_size: int = DEFAULT_PAGE_SIZE
) -> Iterator[tuple[Any, ...]]:
    """Rows (in :data:`JOURNAL_SCHEMA` order) of ``source``'s entries ``first``..``last``
    that Redis holds (numbers trimmed meanwhile are simply absent), a relay's not-selected
    markers beginning there included (:data:`~seqrepair.spark.schema.NOT_SELECTED_PTYPE`)."""
    for row, _, _ in _entries(url, source, first, last, page_size):
        if row is not None:
            yield row


_ARCHIVE_NAME = re.compile(r"seq-(\d+)-(\d+)\.parquet")


def archive_file_range(path: str) -> tuple[int, int] | None:
    """``(first, last)`` from an archive file's name ``seq-<first>-<last>.parquet``, or None."""
    match = _ARCHIVE_NAME.fullmatch(os.path.basename(path))
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def archived_rows(
    root: str, source: str, first: int, last: int
) -> dict[int, tuple[Any, ...] | None]:
    """``source``'s numbers ``first``..``last`` found in the archive under ``root``, by number
    (rows in :data:`JOURNAL_SCHEMA` order; each number once however many files hold it). A
    number a not-selected marker covers is found too: the marker's row at its first number,
    None at the others (and at every one of them when the marker begins before ``first``)."""
    import pyarrow.parquet as pq

    from seqrepair.journal.format import archive_dir

    found: dict[int, tuple[Any, ...] | None] = {}
    folder = str(archive_dir(root, source))
    for path in sorted(glob.glob(os.path.join(glob.escape(folder), "seq-*.parquet"))):
        span = archive_file_range(path)
        if span is not None and (span[1] < first or span[0] > last):
            continue
        # a marker beginning before first may cover it: read from the file's start
        table = pq.read_table(path, filters=[("seq", "<=", last)])
        for row in table.to_pylist():
            seq = row["seq"]
            if row["source"] != source:
                continue
            row["fields"] = dict(row["fields"] or ())
            through = seq
            if row["ptype"] == NOT_SELECTED_PTYPE:
                through = int(row["fields"]["through"])
            if through < first:
                continue
            if seq >= first and found.get(seq) is None:
                found[seq] = tuple(row[c] for c in JOURNAL_COLUMNS)
            for n in range(max(seq + 1, first), min(through, last) + 1):
                found.setdefault(n, None)
    return found


def range_rows(
    url: str,
    source: str,
    first: int,
    last: int,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    archive: str | None = None,
    leading: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """Every number ``first``..``last`` of ``source``, in order: from Redis, and numbers
    Redis no longer holds from the archive under ``archive``. Raises SnapshotTrimmedError
    when a number is in neither. A relay's not-selected marker is one row at its first
    number; ``leading`` (``first`` is where the source's retained range begins): a marker
    beginning before ``first`` is a row too, cut to begin at ``first``."""
    expected = first
    for row, begins, ends in _entries(url, source, first, last, page_size, leading):
        if begins > expected:
            yield from _fill(url, source, expected, begins - 1, archive)
        if row is not None:
            yield row
        expected = max(expected, ends + 1)
    if expected <= last:
        yield from _fill(url, source, expected, last, archive)


def _fill(
    url: str, source: str, first: int, last: int, archive: str | None
) -> Iterator[tuple[Any, ...]]:
    found = archived_rows(archive, source, first, last) if archive is not None else {}
    lost = [n for n in range(first, last + 1) if n not in found]
    if lost:
        trimmed = next((r.first - 1 for r in source_ranges(url, [source]) if r.source == source), 0)
        where = f"nor in the archive under {archive!r}" if archive is not None else "(no archive)"
        raise SnapshotTrimmedError(
            f"{len(lost)} numbers of {source!r} in {first}..{last} (first {lost[0]}) were "
            f"trimmed from the journal after this DataFrame's ranges were chosen and are not "
            f"in Redis {where}; the journal is now trimmed through {trimmed}",
            source=source,
            trimmed_through=trimmed,
            requested=lost[0],
        )
    for n in range(first, last + 1):
        row = found[n]
        if row is not None:  # None: a number a marker's row covers
            yield row


def encode_ranges(ranges: Sequence[SourceRange]) -> str:
    """The ``ranges`` option for ``ranges``."""
    return json.dumps([[r.source, r.first, r.last] for r in ranges])


def decode_ranges(text: str) -> list[SourceRange]:
    """The ranges of a ``ranges`` option."""
    return [SourceRange(str(s), int(a), int(b), None) for s, a, b in json.loads(text)]


class JournalReader(DataSourceReader):
    """Reads the partitions planned from the sources' ranges at planning time."""

    def __init__(self, options: dict[str, str]) -> None:
        self.url = options["url"]
        raw = options.get("sources")
        self.sources = [s for s in raw.split(",") if s] if raw else None
        self.partition_size = _positive_option(options, "partition_size", DEFAULT_PARTITION_SIZE)
        self.page_size = _positive_option(options, "page_size", DEFAULT_PAGE_SIZE)
        self.ranges = decode_ranges(options["ranges"]) if options.get("ranges") else None
        self.archive = options.get("archive") or None

    def partitions(self) -> Sequence[InputPartition]:
        # (runs in a Spark Python worker, which the command's log level does not reach: the
        # driver logs the snapshot instead)
        ranges = self.ranges if self.ranges is not None else source_ranges(self.url, self.sources)
        parts = plan_partitions(ranges, self.partition_size)
        # Spark needs at least one partition; an empty one reads nothing.
        return parts or [RangePartition("", 1, 0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, RangePartition) or partition.first > partition.last:
            return iter(())
        return range_rows(
            self.url,
            partition.source,
            partition.first,
            partition.last,
            page_size=self.page_size,
            archive=self.archive,
            leading=getattr(partition, "leading", False),
        )


class JournalDataSource(DataSource):
    """``spark.read.format("seqrepair-journal")``: the Redis journal as a DataFrame."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return JOURNAL_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if "url" not in self.options:
            raise InvalidConfigError("the seqrepair-journal source needs option url=redis://...")
        return JournalReader(dict(self.options))
