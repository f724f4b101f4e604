"""Rebuild every item's full image from a journal with native Spark SQL (no Python UDFs).

Semantics (XEP-0040 §3, the same definition as :class:`seqrepair.core.image.ImageCache`):
an *image* replaces all fields of its item, an *update* or *correction* overwrites only the
fields it carries (creating the item, marked partial, when it is unknown), a *drop* deletes the
item and a *snapshot* is a request that changes nothing.

Ordering
--------
Publications of one source are ordered by absolute source sequence. An item may be written by
several sources, so the rebuild uses one total order over all publications, the **event key**::

    (timestamp, source, seq)        a missing timestamp sorts before every present one

i.e. publication time first, then source name, then absolute sequence. For a source whose
timestamps never go backwards (the journal stamps them in sequence order; the audit reports any
source where they do as ``time_regressions``) this is exactly its sequence order, and sources
without timestamps are applied source by source. :func:`event_order` sorts publications in
this order for an in-memory fold (the differential test feeds the core ImageCache with it).

Plan
----
1. Per item, the event-key time of its last image or drop (a hash aggregate on a double over a
   scan that skips the ``fields`` column).
2. A broadcast join keeps only publications at or after that time: everything earlier is
   overwritten by the image or removed by the drop, so the heavy work below touches only each
   item's tail.
3. On that tail, one aggregate over (item, field): each publication's fields are exploded,
   plus one marker row per publication, and the latest value per (item, field) is kept with
   the publication that set it (a struct max on the event key); the marker rows give each
   item's exact last image/drop and last publication.
4. Per item: fields set before the last reset are discarded (array ``filter``), the rest
   become the ``fields`` and ``provenance`` maps. Items whose last reset is a drop with
   nothing after it are gone; items never imaged since creation (or since their last drop)
   are ``partial``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import structlog
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from seqrepair.spark.schema import JOURNAL_COLUMNS

log = structlog.get_logger(__name__)

_NO_TIME = float("-inf")
_RESETS = ("image", "drop")
_MARK = ""  # the marker "field" of a publication; field names are never empty

IMAGE_COLUMNS = ("topic", "fields", "provenance", "partial", "last_source", "last_seq")
"""Columns of a rebuilt image DataFrame.

- ``topic`` string: the item.
- ``fields`` map<string,string>: field name to the JSON text of its value (``"null"`` for an
  explicit null).
- ``provenance`` map<string, struct<source, seq, correction>>: per field the publication that
  last set it and whether that publication was a correction.
- ``partial`` boolean: no image since the item was created (or re-created after a drop).
- ``last_source``, ``last_seq``: the last publication applied to the item.
"""


def event_key(df: DataFrame) -> Column:
    """The total order of publications as a struct column ``(time, source, seq)``."""
    return F.struct(
        F.coalesce(df["timestamp"], F.lit(_NO_TIME)).alias("time"),
        df["source"].alias("source"),
        df["seq"].alias("seq"),
    )


T = TypeVar("T")


def event_order(items: Iterable[T], key: Any = None) -> list[T]:
    """Sort publications (or anything with ``timestamp``, ``source``, ``source_seq``) by the
    rebuild's event key; ``key`` maps an item to such an object when it is not one itself."""

    def sort_key(item: T) -> tuple[float, str, int]:
        pub: Any = key(item) if key is not None else item
        ts = pub.timestamp
        return (_NO_TIME if ts is None else float(ts), pub.source, pub.source_seq)

    return sorted(items, key=sort_key)


def as_of(
    journal: DataFrame,
    *,
    seq: Mapping[str, int] | None = None,
    timestamp: float | None = None,
) -> DataFrame:
    """The journal as it stood at a point in time.

    ``seq`` keeps, for each source it names, publications up to and including that absolute
    sequence (sources it does not name are kept whole). ``timestamp`` keeps publications whose
    event-key time is at or before it (publications without a timestamp are always kept, as
    they order before every timestamped one). Both may be given.
    """
    cond = F.lit(True)
    for source, limit in (seq or {}).items():
        cond = cond & ((F.col("source") != F.lit(source)) | (F.col("seq") <= F.lit(int(limit))))
    if timestamp is not None:
        cond = cond & (
            F.col("timestamp").isNull() | (F.col("timestamp") <= F.lit(float(timestamp)))
        )
    return journal.where(cond)


def rebuild_images(
    journal: DataFrame,
    *,
    as_of_seq: Mapping[str, int] | None = None,
    as_of_time: float | None = None,
    broadcast_items: bool = True,
) -> DataFrame:
    """Rebuild the current image of every item in ``journal`` (the :data:`JOURNAL_SCHEMA`).

    Returns one row per live item with the :data:`IMAGE_COLUMNS`. ``as_of_seq`` and
    ``as_of_time`` rebuild the images as of a point in time (see :func:`as_of`).
    ``broadcast_items`` broadcasts the per-item reset table (one row per item) to prune each
    item's history before the shuffle; turn it off for journals with very many items.
    The journal should hold each (source, seq) once (the readers deduplicate).
    """
    missing = set(JOURNAL_COLUMNS) - set(journal.columns)
    if missing:
        raise ValueError(f"journal lacks columns {sorted(missing)}")
    events = journal.where(F.col("ptype") != "snapshot")
    if as_of_seq or as_of_time is not None:
        events = as_of(events, seq=as_of_seq, timestamp=as_of_time)
    events = events.withColumn("_time", F.coalesce(F.col("timestamp"), F.lit(_NO_TIME)))

    # 1. per item: the time of its last image or drop (lower bound of what still matters)
    bound = (
        events.where(F.col("ptype").isin(*_RESETS))
        .groupBy("topic")
        .agg(F.max("_time").alias("_bound"))
    )
    if broadcast_items:
        bound = F.broadcast(bound)
    # 2. each item's tail: publications at or after that time
    tail = (
        events.join(bound, "topic", "left")
        .where(F.col("_bound").isNull() | (F.col("_time") >= F.col("_bound")))
        .select(
            "topic",
            "source",
            "seq",
            "ptype",
            "fields",
            F.struct(F.col("_time").alias("time"), F.col("source"), F.col("seq")).alias("_key"),
        )
    )
    # 3. one row per (item, field) carried in the tail, plus a marker row per publication
    #    (field "", never a real field name) that stands for the publication itself
    carried = F.when(F.col("ptype") == "drop", F.create_map().cast("map<string,string>"))
    marker_entry = F.create_map(F.lit(_MARK), F.lit("null"))
    cells = (
        tail.select(
            "topic",
            "_key",
            "source",
            "seq",
            (F.col("ptype") == "correction").alias("correction"),
            F.when(F.col("ptype").isin(*_RESETS), F.struct("_key", "ptype")).alias("_r"),
            F.explode(F.map_concat(carried.otherwise(F.col("fields")), marker_entry)).alias(
                "field", "value"
            ),
        )
        .groupBy("topic", "field")
        .agg(
            F.max(F.struct("_key", "value", "source", "seq", "correction")).alias("_w"),
            F.max("_r").alias("_r"),
        )
    )
    # 4. per item: last reset, last publication, and the fields set at or after the reset
    marker = F.col("field") == F.lit(_MARK)
    per_item = cells.groupBy("topic").agg(
        F.max(F.when(marker, F.col("_r"))).alias("_reset"),
        F.max(F.when(marker, F.col("_w._key"))).alias("_last"),
        F.collect_list(F.when(~marker, F.struct("field", "_w"))).alias("_cells"),
    )
    reset = F.col("_reset")
    live = per_item.where(
        reset.isNull() | (reset["ptype"] == "image") | (F.col("_last") > reset["_key"])
    )
    kept = F.array_sort(
        F.filter("_cells", lambda c: reset.isNull() | (c["_w"]["_key"] >= reset["_key"]))
    )
    result = live.select(
        "topic",
        F.map_from_entries(
            F.transform(kept, lambda c: F.struct(c["field"], c["_w"]["value"]))
        ).alias("fields"),
        F.map_from_entries(
            F.transform(
                kept,
                lambda c: F.struct(
                    c["field"],
                    F.struct(
                        c["_w"]["source"].alias("source"),
                        c["_w"]["seq"].alias("seq"),
                        c["_w"]["correction"].alias("correction"),
                    ),
                ),
            )
        ).alias("provenance"),
        (reset.isNull() | (reset["ptype"] == "drop")).alias("partial"),
        F.col("_last.source").alias("last_source"),
        F.col("_last.seq").alias("last_seq"),
    )
    log.debug("rebuild planned", as_of_seq=dict(as_of_seq or {}), as_of_time=as_of_time)
    return result


def collect_images(images: DataFrame) -> dict[str, dict[str, Any]]:
    """Rebuilt images as plain Python, ``{topic: {field: value}}`` with JSON values decoded
    (comparable with :meth:`seqrepair.core.image.ImageCache.snapshot`). Collects to the
    driver: for checks and small journals."""
    return {
        row["topic"]: {name: json.loads(text) for name, text in row["fields"].items()}
        for row in images.select("topic", "fields").collect()
    }


def write_images(images: DataFrame, path: str, *, mode: str = "overwrite") -> None:
    """Write rebuilt images as Parquet at ``path``."""
    images.write.mode(mode).parquet(path)
    log.info("images written", path=path)
