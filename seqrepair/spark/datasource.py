"""A Spark Python Data Source that reads the Redis journal in parallel.

::

    spark.dataSource.register(JournalDataSource)
    df = (spark.read.format("seqrepair-journal")
          .option("url", "redis://127.0.0.1:6379/0")
          .option("partition_size", "50000")       # sequence numbers per partition
          .load())

Each source's retained range (``trimmed_through + 1`` .. ``high_water``) is cut into
partitions of ``partition_size`` absolute numbers; each partition is read by one task with
``XRANGE`` pages (``page_size`` entries per round trip) and yields rows of
:data:`~seqrepair.spark.schema.JOURNAL_SCHEMA`. Options: ``url`` (required), ``sources``
(comma-separated; default every source in ``seqrepair:sources``), ``partition_size``
(default 50000), ``page_size`` (default 2000).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import structlog
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from seqrepair.spark.schema import JOURNAL_SCHEMA

log = structlog.get_logger(__name__)

FORMAT_NAME = "seqrepair-journal"
DEFAULT_PARTITION_SIZE = 50_000
DEFAULT_PAGE_SIZE = 2_000


@attrs.frozen
class SourceRange:
    """The retained absolute range of one source's journal."""

    source: str
    first: int
    last: int
    bits: int | None


class RangePartition(InputPartition):
    """Absolute numbers ``first``..``last`` of ``source`` (one Spark task)."""

    def __init__(self, source: str, first: int, last: int) -> None:
        super().__init__((source, first, last))
        self.source = source
        self.first = first
        self.last = last


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def source_ranges(url: str, sources: Sequence[str] | None = None) -> list[SourceRange]:
    """The retained range of each source (all journaled sources when ``sources`` is None)."""
    import redis

    from seqrepair.journal.format import (
        META_BITS,
        META_HIGH_WATER,
        META_TRIMMED_THROUGH,
        SOURCES_KEY,
        meta_key,
    )

    client = redis.Redis.from_url(url)
    try:
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


def plan_partitions(ranges: Sequence[SourceRange], partition_size: int) -> list[RangePartition]:
    """Cut each source's range into partitions of at most ``partition_size`` numbers."""
    if partition_size < 1:
        raise ValueError(f"partition_size must be >= 1, got {partition_size}")
    parts = []
    for r in ranges:
        first = r.first
        while first <= r.last:
            last = min(r.last, first + partition_size - 1)
            parts.append(RangePartition(r.source, first, last))
            first = last + 1
    return parts


def journal_rows(
    url: str, source: str, first: int, last: int, page_size: int = DEFAULT_PAGE_SIZE
) -> Iterator[tuple[Any, ...]]:
    """Rows (in :data:`JOURNAL_SCHEMA` order) of ``source``'s entries ``first``..``last``."""
    import redis

    from seqrepair.journal.format import encode_value, seq_of, stream_key

    client = redis.Redis.from_url(url)
    key = stream_key(source)
    start = f"{first}-0"
    end = f"{last}-0"
    try:
        while True:
            page: list[Any] = client.xrange(key, start, end, count=page_size) or []
            for entry_id, values in page:
                seq = seq_of(entry_id)
                text = {_text(k): _text(v) for k, v in values.items()}
                fields = json.loads(text["fields"])
                ts = text.get("ts")
                yield (
                    text["source"],
                    seq,
                    int(text["wire"]),
                    int(text["bits"]),
                    text["topic"],
                    text["ptype"],
                    {name: encode_value(value) for name, value in fields.items()},
                    text.get("permtoken"),
                    None if ts is None else float(ts),
                )
            if len(page) < page_size:
                return
            start = f"({_text(page[-1][0])}"
    finally:
        client.close()


class JournalReader(DataSourceReader):
    """Reads the partitions planned from the sources' ranges at planning time."""

    def __init__(self, options: dict[str, str]) -> None:
        self.url = options["url"]
        raw = options.get("sources")
        self.sources = [s for s in raw.split(",") if s] if raw else None
        self.partition_size = int(options.get("partition_size", DEFAULT_PARTITION_SIZE))
        self.page_size = int(options.get("page_size", DEFAULT_PAGE_SIZE))

    def partitions(self) -> Sequence[InputPartition]:
        parts = plan_partitions(source_ranges(self.url, self.sources), self.partition_size)
        log.info("journal partitions", count=len(parts), url=self.url)
        # Spark needs at least one partition; an empty one reads nothing.
        return parts or [RangePartition("", 1, 0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, RangePartition) or partition.first > partition.last:
            return iter(())
        return journal_rows(
            self.url, partition.source, partition.first, partition.last, self.page_size
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
            raise ValueError("the seqrepair-journal source needs option url=redis://...")
        return JournalReader(dict(self.options))
