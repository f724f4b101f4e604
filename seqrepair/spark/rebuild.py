"""Rebuild every item's full image from a journal with native Spark SQL (no Python UDFs).

Semantics (XEP-0040 §3, the same definition as :class:`seqrepair.core.image.ImageCache`):
an *image* replaces all fields of its item, an *update* or *correction* overwrites only the
fields it carries (creating the item, marked partial, when it is unknown), a *drop* deletes the
item and a *snapshot* is a request that changes nothing.

Ordering
--------
Within one source, publications are applied in **absolute source sequence** order, always:
timestamps never reorder a source's own publications (a single-source journal rebuilds
exactly as the core ImageCache applied in sequence order, and as
:meth:`seqrepair.journal.Journal.latest_image`).

An item may be written by several sources, so the rebuild uses one total order over all
publications, the **event key**::

    (effective time, source, seq)

A publication's *effective time* is the running maximum of its source's timestamps in
sequence order: the largest timestamp among the source's journal entries numbered at or below
it (every publish type counts, snapshots included). A publication without a timestamp takes
the running maximum so far, or -infinity when no earlier entry of its source has one. The
effective time never decreases along a source's sequence, so the event key keeps each
source's sequence order and interleaves sources by time; ties go to the source name, then the
sequence. For a source whose timestamps are all present and never go backwards (the journal
stamps them in sequence order; the audit reports any publication stamped earlier than a
lower-numbered one as ``out_of_order``) the effective time is the timestamp itself. (A NaN
or infinite timestamp never reaches a journal: publications refuse them.)
:func:`event_order` sorts publications in this order for an in-memory fold (the differential
test feeds the core ImageCache with it).

As-of rebuilds cut each source at a prefix of its sequence: ``as_of_seq`` at the number
given, ``as_of_time`` on the effective time (a publication is kept when its effective time is
at or before the cut: each source up to, not including, its first publication stamped after
the cut, so a publication stamped before the cut but numbered after a later-stamped one is
cut, and so is an untimed one there). The cut is an aggregate (per source, the first number
stamped after the cut) and a broadcast join: no sort.

Plan
----
1. Per (item, source), the number of the item's last image or drop in that source (an
   aggregate over the narrow columns of images and drops).
2. A broadcast join on (item, source) keeps only each item's tail in each source: its
   publications from that number on (all of them where the source never reset the item).
   What a source published of an item before its own last reset precedes that reset in the
   event order (same source: lower number, never a later effective time), and that reset
   precedes or is the item's last reset overall, so it is overwritten or removed: the heavy
   work below touches only the tails. No time is needed to prune. The join key is a 64-bit
   hash of (item, source), checked against the pair it found: pruning only saves work, so a
   collision merely keeps rows.
3. On that tail, one aggregate over (item, field, source): each publication's fields are
   exploded, plus a marker cell per publication (its last image or drop kept apart), and the
   highest sequence per (item, field, source) is kept with its value. Within a source the
   highest sequence is the latest event key, so no time is needed yet.
4. The exact effective time of those winners only. The journal is cut into blocks of
   ``block_size`` absolute numbers per source; a narrow aggregate gives each block the largest
   timestamp before it, and a window (running maximum over sequence, partitioned by source
   and block) over the narrow columns of only the blocks that hold a winner gives the rest;
   only the winners' own rows are kept (a broadcast semi-join) and joined back on
   (source, seq).
5. Per (item, field), the winner with the largest event key; per item the last reset, the last
   publication and the fields set at or after the reset (array ``filter``). Items whose last
   reset is a drop with nothing after it are gone; items never imaged since creation (or since
   their last drop) are ``partial``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from math import isfinite
from typing import Any, TypeVar

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from seqrepair.core.config import check_positive_int
from seqrepair.core.errors import InvalidConfigError
from seqrepair.logs import get_logger
from seqrepair.spark.schema import JOURNAL_COLUMNS, NOT_SELECTED_PTYPE

log = get_logger(__name__)

_NO_TIME = float("-inf")
_RESETS = ("image", "drop")
_FIELD, _PUBLICATION, _RESET = 0, 1, 2  # kinds of tail cells
_MARK = ""  # the marker "field" of a publication; field names are never empty

DEFAULT_BLOCK_SIZE = 256
"""Absolute numbers per block when bounding effective times (see the module's Plan)."""

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


T = TypeVar("T")


def event_keys(items: Iterable[T], key: Any = None) -> list[tuple[tuple[float, str, int], T]]:
    """``(event key, item)`` for publications (or anything with ``timestamp``, ``source``,
    ``source_seq``; ``key`` maps an item to such an object when it is not one itself), sorted
    by event key ``(effective time, source, seq)``."""
    by_source: dict[str, list[tuple[int, Any, T]]] = {}
    for item in items:
        pub: Any = key(item) if key is not None else item
        by_source.setdefault(pub.source, []).append((pub.source_seq, pub.timestamp, item))
    keyed: list[tuple[tuple[float, str, int], T]] = []
    for source, entries in by_source.items():
        entries.sort(key=lambda e: e[0])
        time = _NO_TIME
        for seq, ts, item in entries:
            if ts is not None and float(ts) > time:
                time = float(ts)
            keyed.append(((time, source, seq), item))
    keyed.sort(key=lambda k: k[0])
    return keyed


def event_order(items: Iterable[T], key: Any = None) -> list[T]:
    """Sort publications (or anything with ``timestamp``, ``source``, ``source_seq``) by the
    rebuild's event key; ``key`` maps an item to such an object when it is not one itself."""
    return [item for _, item in event_keys(items, key)]


def _block(seq: str, block_size: int) -> Column:
    return F.expr(f"`{seq}` div {int(block_size)}").alias("_block")


def _time(*candidates: Column) -> Column:
    return F.coalesce(F.greatest(*candidates), F.lit(_NO_TIME))


def _key(time: Column) -> Column:
    return F.struct(time.alias("time"), F.col("source").alias("source"), F.col("seq").alias("seq"))


def _cell(kind: int, name: Column, seq: Column, value: Column, correction: Column) -> Column:
    """One winner: a field (its name and JSON value), the last publication or the last reset
    (its publish type as the value) of an item in one source."""
    return F.struct(
        F.lit(kind).alias("kind"),
        name.alias("name"),
        seq.cast("long").alias("seq"),
        value.cast("string").alias("value"),
        correction.alias("correction"),
    )


def block_table(journal: DataFrame, block_size: int = DEFAULT_BLOCK_SIZE) -> DataFrame:
    """Per (source, block of ``block_size`` numbers): ``_prev``, the largest timestamp of the
    source before the block, and ``_bmax``, the largest in it (null when none)."""
    check_positive_int("block_size", block_size)
    stats = journal.groupBy("source", _block("seq", block_size)).agg(
        F.max("timestamp").alias("_bmax")
    )
    earlier = (
        Window.partitionBy("source").orderBy("_block").rowsBetween(Window.unboundedPreceding, -1)
    )
    return stats.select("source", "_block", F.max("_bmax").over(earlier).alias("_prev"), "_bmax")


def effective_times(
    journal: DataFrame, points: DataFrame, *, block_size: int = DEFAULT_BLOCK_SIZE
) -> DataFrame:
    """``source, seq, _time``: the effective time of each (source, seq) in ``points``, from
    ``journal`` (only the blocks holding a point are sorted)."""
    blocks = block_table(journal, block_size)
    wanted = points.select("source", _block("seq", block_size)).distinct()
    near = journal.select("source", "seq", "timestamp", _block("seq", block_size)).join(
        F.broadcast(wanted), ["source", "_block"], "left_semi"
    )
    within = (
        Window.partitionBy("source", "_block")
        .orderBy("seq")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    running = near.select("source", "seq", "_block", F.max("timestamp").over(within).alias("_m"))
    # only the points themselves leave: the join after this one then sorts no block's other rows
    exact = F.broadcast(points.select("source", "seq").distinct())
    return (
        running.join(exact, ["source", "seq"], "left_semi")
        .join(F.broadcast(blocks), ["source", "_block"], "left")
        .select("source", "seq", _time(F.col("_prev"), F.col("_m")).alias("_time"))
    )


def as_of(
    journal: DataFrame,
    *,
    seq: Mapping[str, int] | None = None,
    timestamp: float | None = None,
) -> DataFrame:
    """The journal as it stood at a point in time: a prefix of each source's sequence.

    ``seq`` keeps, for each source it names, publications up to and including that absolute
    sequence (sources it does not name are kept whole). ``timestamp`` keeps publications whose
    *effective* time (see the module docstring) is at or before it: each source up to, not
    including, its first publication stamped after ``timestamp`` (untimed publications before
    that are kept, those after it are not). Both may be given.
    """
    if timestamp is not None and not isfinite(timestamp):
        raise InvalidConfigError(
            f"as of time must be a finite number of seconds, got {timestamp!r}", got=timestamp
        )
    cond = F.lit(True)
    for source, limit in (seq or {}).items():
        cond = cond & ((F.col("source") != F.lit(source)) | (F.col("seq") <= F.lit(int(limit))))
    kept = journal.where(cond)
    if timestamp is None:
        return kept
    cuts = (
        kept.where(F.col("timestamp") > F.lit(float(timestamp)))
        .groupBy(F.col("source").alias("_cut_source"))
        .agg(F.min("seq").alias("_cut"))
    )
    return (
        kept.join(F.broadcast(cuts), F.col("source") == F.col("_cut_source"), "left")
        .where(F.col("_cut").isNull() | (F.col("seq") < F.col("_cut")))
        .select(*journal.columns)
    )


def rebuild_images(
    journal: DataFrame,
    *,
    as_of_seq: Mapping[str, int] | None = None,
    as_of_time: float | None = None,
    broadcast_items: bool = True,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> DataFrame:
    """Rebuild the current image of every item in ``journal`` (the :data:`JOURNAL_SCHEMA`).

    Returns one row per live item with the :data:`IMAGE_COLUMNS`. ``as_of_seq`` and
    ``as_of_time`` rebuild the images as of a point in time (see :func:`as_of`).
    ``broadcast_items`` broadcasts the reset table (one row per item and source) to prune each
    item's history before the shuffle; turn it off for journals with very many items.
    ``block_size`` (absolute numbers per block, see the module's Plan) trades the size of the
    broadcast block table (numbers / block_size rows) against the rows sorted to make
    effective times exact; it does not change the result.
    The journal should hold each (source, seq) once (the readers deduplicate). A relay's
    not-selected rows (:data:`~seqrepair.spark.schema.NOT_SELECTED_PTYPE`) are passed over.
    """
    missing = set(JOURNAL_COLUMNS) - set(journal.columns)
    if missing:
        raise InvalidConfigError(f"journal lacks columns {sorted(missing)}", got=sorted(missing))
    check_positive_int("block_size", block_size)
    # a relay's not-selected rows are no publications (schema.NOT_SELECTED_PTYPE)
    journal = journal.where(F.col("ptype") != NOT_SELECTED_PTYPE)
    if as_of_seq or as_of_time is not None:
        journal = as_of(journal, seq=as_of_seq, timestamp=as_of_time)
    events = journal.where(F.col("ptype") != "snapshot")
    # 1. per item and source, the number of its last image or drop there, keyed by a 64-bit
    #    hash of the pair: a long key probes the broadcast far faster than two strings
    pair = F.xxhash64("topic", "source")
    resets = (
        events.where(F.col("ptype").isin(*_RESETS))
        .groupBy("topic", "source")
        .agg(F.max("seq").alias("_reset_seq"))
        .select(
            pair.alias("_pair"),
            F.col("topic").alias("_reset_topic"),
            F.col("source").alias("_reset_source"),
            "_reset_seq",
        )
    )
    if broadcast_items:
        resets = F.broadcast(resets)
    # 2. each item's tail in each source: from its last image or drop there on (what a source
    #    published of an item before its own reset precedes that reset in the event order too).
    #    A row prunes only against its own pair's reset; on a hash collision it is kept (and
    #    may be kept twice), which step 3's maxima do not notice: pruning only saves work
    tail = events.join(resets, pair == F.col("_pair"), "left").where(
        F.col("_reset_seq").isNull()
        | (F.col("seq") >= F.col("_reset_seq"))
        | (F.col("_reset_topic") != F.col("topic"))
        | (F.col("_reset_source") != F.col("source"))
    )
    # 3. per (item, field, source) the highest sequence carrying the field; a marker cell
    #    (field "", never a real field name) per publication gives per (item, source) the last
    #    publication and the last image or drop
    empty = F.create_map().cast("map<string,string>")
    carried = F.when(F.col("ptype") == "drop", empty).otherwise(F.coalesce("fields", empty))
    marker = F.col("field") == F.lit(_MARK)
    per_source = (
        tail.select(
            "topic",
            "source",
            "seq",
            "ptype",
            (F.col("ptype") == "correction").alias("correction"),
            F.explode(F.map_concat(carried, F.create_map(F.lit(_MARK), F.lit("")))).alias(
                "field", "value"
            ),
        )
        .groupBy("topic", "field", "source")
        .agg(
            F.max(F.struct("seq", "value", "correction")).alias("_w"),
            F.max(F.when(marker & F.col("ptype").isin(*_RESETS), F.struct("seq", "ptype"))).alias(
                "_r"
            ),
        )
    )
    # one row per winner: kind, name, seq, value, correction
    winner_rows = F.when(
        marker,
        F.array(
            _cell(_PUBLICATION, F.lit(_MARK), F.col("_w.seq"), F.lit(None), F.lit(False)),
            _cell(_RESET, F.lit(_MARK), F.col("_r.seq"), F.col("_r.ptype"), F.lit(False)),
        ),
    ).otherwise(
        F.array(
            _cell(
                _FIELD, F.col("field"), F.col("_w.seq"), F.col("_w.value"), F.col("_w.correction")
            )
        )
    )
    winners = (
        per_source.select("topic", "source", F.explode(winner_rows).alias("_c"))
        .select("topic", "source", "_c.*")
        .where(F.col("seq").isNotNull())
    )
    # 4. the exact effective time of each winner
    times = effective_times(journal, winners, block_size=block_size)
    keyed = winners.join(times, ["source", "seq"])
    # 5. per (item, field) the winner with the largest event key, then per item
    cells = keyed.groupBy("topic", "kind", "name").agg(
        F.max(
            F.struct(_key(F.col("_time")).alias("_key"), "value", "source", "seq", "correction")
        ).alias("_w")
    )
    kind = F.col("kind")
    per_item = cells.groupBy("topic").agg(
        F.max(
            F.when(
                kind == _RESET,
                F.struct(F.col("_w._key").alias("_key"), F.col("_w.value").alias("ptype")),
            )
        ).alias("_reset"),
        F.max(F.when(kind == _PUBLICATION, F.col("_w._key"))).alias("_last"),
        F.collect_list(
            F.when(kind == _FIELD, F.struct(F.col("name").alias("field"), F.col("_w")))
        ).alias("_cells"),
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
    log.debug(
        "rebuild planned",
        as_of_seq=dict(as_of_seq or {}),
        as_of_time=as_of_time,
        block_size=block_size,
    )
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
