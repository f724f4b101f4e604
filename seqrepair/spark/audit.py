"""Audit a journal: per source gaps, duplicates, out-of-order arrivals, trimmed ranges and
publish-type counts; per item corrections, drops and whether it was ever imaged.

``audit(spark, journal)`` returns an :class:`AuditReport` of DataFrames; ``report.summary()``
is a plain-text table for people and ``report.write(path)`` writes Parquet tables plus a
``summary.json`` for machines.

Definitions
-----------
gap
    absolute numbers missing between a source's first and last held number, and numbers
    missing before the first held one, that were *not* removed by retention.
trimmed
    missing numbers at or below the source's ``trimmed_through`` (retention removed them and
    no archive supplied them); reported apart from gaps because nothing was lost unexpectedly.
    That includes numbers after the last held one up to ``trimmed_through``, and for a source
    with no rows at all (retention removed every entry) the whole range 1..trimmed_through.
    The trim record comes from the ``trimmed_through`` argument or, when that is not given,
    from the journal DataFrame itself (:func:`~seqrepair.spark.reading.read_journal` and
    :func:`~seqrepair.spark.reading.read_journals` record it in the ``seq`` column's
    metadata), so ``audit(spark, read_journal(spark, url))`` reports trimmed ranges as such.
not-selected
    numbers a relay's journal holds as *not selected* (:mod:`seqrepair.journal.selection`):
    each marker row (:data:`~seqrepair.spark.schema.NOT_SELECTED_PTYPE`) is one range of this
    kind, ``seq`` .. its ``through``, never a gap and never a publication (markers count in
    no publication, type or item column). A number neither held nor covered by a marker in a
    relay's journal is still a gap.
duplicate
    a (source, seq) held more than once (the readers return each number once, so only a
    DataFrame built otherwise, e.g. a union of reads, has any).
out-of-order arrival
    a publication whose timestamp is earlier than that of a lower-numbered publication of the
    same source: it was stamped out of sequence order. The rebuild still applies such a
    source in sequence order, at the running maximum of its timestamps (its *effective time*,
    see :mod:`seqrepair.spark.rebuild`).

Every source of the trim record is a row of ``sources``, also one the DataFrame holds no
rows of (a source retention emptied, or one registered and never published): it shows
``publications`` 0, no ``bits``, ``first_seq`` or ``last_seq``, and its trimmed range. So audit
a frame read for the sources you mean (``read_journal(..., sources=[...])``), not one filtered
afterwards, whose trim record still names every source read.

Numbers after a source's last row *above* ``trimmed_through`` (up to the journal's
high-water) are not examined, and the trim record does not carry the high-water: the journal
readers yield every number from ``trimmed_through + 1`` through the high-water or fail (see
:mod:`seqrepair.spark.reading`), so a frame they read has none missing there, and retention
never trims past the high-water, so a source it emptied has ``trimmed_through`` equal to its
high-water. A frame cut afterwards (``where(seq <= n)``) would otherwise show its cut-off
tail as a gap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import attrs
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from seqrepair.logs import get_logger
from seqrepair.spark.schema import NOT_SELECTED_PTYPE, PUBLISH_TYPES, trim_record

log = get_logger(__name__)

SUMMARY_GAP_LIMIT = 20
"""Gap ranges listed per report in the human summary and in summary.json."""

TABLES = ("sources", "gaps", "duplicates", "out_of_order", "items")
"""The audit's tables, as :meth:`AuditReport.write` names their folders."""


@attrs.frozen
class AuditReport:
    """The audit's tables (Spark DataFrames).

    - ``sources``: source, bits, publications, distinct_seqs, first_seq, last_seq,
      trimmed_through, gap_count, gap_numbers, trimmed_numbers, not_selected_numbers,
      duplicates, out_of_order, and one count column per publish type; one row per source
      held or in the trim record (bits, first_seq and last_seq are null for a source with no
      rows; publications, first_seq and last_seq count publications, not markers).
    - ``gaps``: source, first, last, count, kind (``gap`` | ``trimmed`` | ``not-selected``).
    - ``duplicates``: source, seq, copies.
    - ``out_of_order``: source, seq, timestamp, latest_before (the highest earlier timestamp).
    - ``items``: topic, publications, sources, images, updates, corrections, drops,
      snapshots, never_imaged.
    """

    sources: DataFrame
    gaps: DataFrame
    duplicates: DataFrame
    out_of_order: DataFrame
    items: DataFrame

    def tables(self) -> dict[str, DataFrame]:
        """The tables by name (:data:`TABLES`)."""
        return {name: getattr(self, name) for name in TABLES}

    def to_dict(self, *, gap_limit: int = SUMMARY_GAP_LIMIT) -> dict[str, Any]:
        """A JSON-ready digest: every source row, item totals, the first gap and trimmed
        ranges (``gaps``) and, apart, the first not-selected ranges (``not_selected``)."""
        sources = [r.asDict() for r in self.sources.orderBy("source").collect()]
        totals = self.items.agg(
            F.count("*").alias("items"),
            F.sum(F.col("never_imaged").cast("int")).alias("never_imaged"),
            F.sum(F.when(F.col("corrections") > 0, 1).otherwise(0)).alias("corrected_items"),
            F.sum(F.when(F.col("drops") > 0, 1).otherwise(0)).alias("dropped_items"),
            F.sum("corrections").alias("corrections"),
            F.sum("drops").alias("drops"),
        ).first()
        item_totals = {k: int(v or 0) for k, v in (totals.asDict() if totals else {}).items()}
        def ranges(frame: DataFrame) -> list[dict[str, Any]]:
            return [r.asDict() for r in frame.orderBy("source", "first").limit(gap_limit).collect()]

        is_not_selected = F.col("kind") == NOT_SELECTED_PTYPE
        return {
            "sources": sources,
            "items": item_totals,
            "gaps": ranges(self.gaps.where(~is_not_selected)),
            "not_selected": ranges(self.gaps.where(is_not_selected)),
        }

    def summary(self, *, gap_limit: int = SUMMARY_GAP_LIMIT) -> str:
        """A plain-text summary table for people."""
        return format_summary(self.to_dict(gap_limit=gap_limit))

    def write(self, path: str, *, mode: str = "overwrite") -> dict[str, Any]:
        """Write each table as Parquet under ``path/<table>/`` and ``path/summary.json``;
        returns the summary dict."""
        for name, table in self.tables().items():
            table.write.mode(mode).parquet(os.path.join(path, name))
        digest = self.to_dict()
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "summary.json"), "w", encoding="utf-8") as fh:
            json.dump(digest, fh, indent=2, sort_keys=True)
        log.info("audit written", path=path)
        return digest


def format_summary(digest: Mapping[str, Any]) -> str:
    """Render :meth:`AuditReport.to_dict` output as aligned text tables."""
    cols = [
        ("source", "source"),
        ("bits", "bits"),
        ("publications", "publications"),
        ("first", "first_seq"),
        ("last", "last_seq"),
        ("gaps", "gap_count"),
        ("missing", "gap_numbers"),
        ("trimmed", "trimmed_numbers"),
        ("not-selected", "not_selected_numbers"),
        ("duplicates", "duplicates"),
        ("out-of-order", "out_of_order"),
        *[(p, p) for p in PUBLISH_TYPES],  # publications of each type
    ]
    rows = [[h for h, _ in cols]] + [
        ["" if s.get(k) is None else str(s.get(k)) for _, k in cols] for s in digest["sources"]
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["Sources"]
    for n, r in enumerate(rows):
        lines.append(
            "  ".join(
                c.rjust(w) if n and i else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    items = digest["items"]
    lines.append("")
    lines.append(
        "Items: {items} live or dropped, {never_imaged} never imaged, {corrected_items} "
        "corrected ({corrections} corrections), {dropped_items} dropped ({drops} drops)".format(
            **{
                k: items.get(k, 0)
                for k in (
                    "items",
                    "never_imaged",
                    "corrected_items",
                    "corrections",
                    "dropped_items",
                    "drops",
                )
            }
        )
    )
    if digest["gaps"]:
        lines.append("")
        lines.append("Missing ranges (first {}):".format(len(digest["gaps"])))
        for g in digest["gaps"]:
            lines.append(f"  {g['source']}: {g['first']}..{g['last']} ({g['count']}, {g['kind']})")
    if digest.get("not_selected"):
        lines.append("")
        lines.append("Not selected by a relay (first {}):".format(len(digest["not_selected"])))
        for g in digest["not_selected"]:
            lines.append(f"  {g['source']}: {g['first']}..{g['last']} ({g['count']}, {g['kind']})")
    return "\n".join(lines)


def audit(
    spark: SparkSession,
    journal: DataFrame,
    *,
    trimmed_through: Mapping[str, int] | None = None,
) -> AuditReport:
    """Audit ``journal`` (the :data:`~seqrepair.spark.schema.JOURNAL_SCHEMA`).

    ``trimmed_through`` gives per source the last number retention removed, so that missing
    numbers up to it count as trimmed rather than as gaps. When it is None, the trim record
    the journal readers attach to the ``seq`` column is used (none: every missing number is
    a gap). Every source it names is audited, rows or not (see the module docstring).
    """
    if trimmed_through is None:
        trimmed_through = trim_record(journal)
    trimmed = dict(trimmed_through or {})
    trim_rows = [(s, int(t)) for s, t in trimmed.items()]
    trim_df = spark.createDataFrame(trim_rows, "source string, trimmed_through long")

    marker = F.col("ptype") == NOT_SELECTED_PTYPE
    # the last number an entry covers: its own, or a not-selected marker's through
    ends = F.when(marker, F.col("fields")["through"].cast("long")).otherwise(F.col("seq"))
    held = journal.groupBy("source", "seq").agg(
        F.count("*").alias("copies"),
        F.min("timestamp").alias("timestamp"),
        F.max(ends).alias("_end"),
    )
    duplicates = held.where(F.col("copies") > 1).select("source", "seq", "copies")

    by_seq = Window.partitionBy("source").orderBy("seq")
    before = by_seq.rowsBetween(Window.unboundedPreceding, -1)
    steps = held.select(
        "source",
        "seq",
        "timestamp",
        F.max("_end").over(before).alias("prev"),
        F.max("timestamp").over(before).alias("latest_before"),
    )
    out_of_order = steps.where(F.col("timestamp") < F.col("latest_before")).select(
        "source", "seq", "timestamp", "latest_before"
    )
    # missing ranges: between held numbers (after the last one a marker covers), and before
    # the first held number
    missing = steps.select(
        "source",
        F.coalesce(F.col("prev"), F.lit(0)).alias("after"),
        F.col("seq").alias("before"),
    ).where(F.col("before") - F.col("after") > 1)
    missing = missing.join(trim_df, "source", "left").select(
        "source",
        (F.col("after") + 1).alias("first"),
        (F.col("before") - 1).alias("last"),
        F.coalesce(F.col("trimmed_through"), F.lit(0)).alias("_t"),
    )
    trimmed_part = missing.where(F.col("first") <= F.col("_t")).select(
        "source",
        "first",
        F.least("last", "_t").alias("last"),
        F.lit("trimmed").alias("kind"),
    )
    gap_part = missing.where(F.col("last") > F.col("_t")).select(
        "source",
        F.greatest("first", F.col("_t") + 1).alias("first"),
        "last",
        F.lit("gap").alias("kind"),
    )
    not_selected_part = (
        journal.where(marker)
        .select("source", F.col("seq").alias("first"), ends.alias("last"))
        .withColumn("kind", F.lit(NOT_SELECTED_PTYPE))
    )
    # trimmed numbers after the last held one (all of 1..trimmed_through without rows)
    last_held = held.groupBy("source").agg(F.max("_end").alias("_last"))
    tail_part = (
        trim_df.join(last_held, "source", "left")
        .select(
            "source",
            (F.coalesce(F.col("_last"), F.lit(0).cast("long")) + 1).alias("first"),
            F.col("trimmed_through").alias("last"),
            F.lit("trimmed").alias("kind"),
        )
        .where(F.col("first") <= F.col("last"))
    )
    gaps = (
        trimmed_part.unionByName(gap_part)
        .unionByName(tail_part)
        .unionByName(not_selected_part)
        .withColumn("count", F.col("last") - F.col("first") + 1)
        .select("source", "first", "last", "count", "kind")
    )

    per_type = [F.sum(F.when(F.col("ptype") == p, 1).otherwise(0)).alias(p) for p in PUBLISH_TYPES]
    pub_seq = F.when(~marker, F.col("seq"))  # publications' numbers; null for markers
    base = journal.groupBy("source").agg(
        F.max("bits").alias("bits"),
        F.count(pub_seq).alias("publications"),
        F.countDistinct(pub_seq).alias("distinct_seqs"),
        F.min(pub_seq).alias("first_seq"),
        F.max(pub_seq).alias("last_seq"),
        *per_type,
    )
    gap_totals = gaps.groupBy("source").agg(
        F.sum(F.when(F.col("kind") == "gap", 1).otherwise(0)).alias("gap_count"),
        F.sum(F.when(F.col("kind") == "gap", F.col("count")).otherwise(0)).alias("gap_numbers"),
        F.sum(F.when(F.col("kind") == "trimmed", F.col("count")).otherwise(0)).alias(
            "trimmed_numbers"
        ),
        F.sum(F.when(F.col("kind") == NOT_SELECTED_PTYPE, F.col("count")).otherwise(0)).alias(
            "not_selected_numbers"
        ),
    )
    dup_totals = duplicates.groupBy("source").agg(F.sum(F.col("copies") - 1).alias("duplicates"))
    ooo_totals = out_of_order.groupBy("source").agg(F.count("*").alias("out_of_order"))
    zero = F.lit(0).cast("long")
    sources = (
        base.join(trim_df, "source", "full")  # a source in the trim record may have no rows
        .join(gap_totals, "source", "left")
        .join(dup_totals, "source", "left")
        .join(ooo_totals, "source", "left")
        .select(
            "source",
            "bits",
            F.coalesce("publications", zero).alias("publications"),
            F.coalesce("distinct_seqs", zero).alias("distinct_seqs"),
            "first_seq",
            "last_seq",
            F.coalesce("trimmed_through", zero).alias("trimmed_through"),
            F.coalesce("gap_count", zero).alias("gap_count"),
            F.coalesce("gap_numbers", zero).alias("gap_numbers"),
            F.coalesce("trimmed_numbers", zero).alias("trimmed_numbers"),
            F.coalesce("not_selected_numbers", zero).alias("not_selected_numbers"),
            F.coalesce("duplicates", zero).alias("duplicates"),
            F.coalesce("out_of_order", zero).alias("out_of_order"),
            *[F.coalesce(F.col(p).cast("long"), zero).alias(p) for p in PUBLISH_TYPES],
        )
    )

    counts = {
        "images": "image",
        "updates": "update",
        "corrections": "correction",
        "drops": "drop",
        "snapshots": "snapshot",
    }
    items = (
        journal.where(~marker)
        .groupBy("topic")
        .agg(
            F.count("*").alias("publications"),
            F.countDistinct("source").alias("sources"),
            *[
                F.sum(F.when(F.col("ptype") == p, 1).otherwise(0)).cast("long").alias(name)
                for name, p in counts.items()
            ],
        )
        .withColumn("never_imaged", F.col("images") == 0)
    )
    log.debug("audit planned", trimmed=trimmed)
    return AuditReport(
        sources=sources,
        gaps=gaps,
        duplicates=duplicates,
        out_of_order=out_of_order,
        items=items,
    )
