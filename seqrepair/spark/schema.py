"""The typed shape of a journal in Spark and in the Parquet archive.

One row per journaled publication. ``fields`` maps each field the publication carried to the
JSON text of its value, so an explicit null is the string ``"null"`` and a field that was not
sent has no key. Both the Redis data source and the Parquet archive produce exactly this
schema, which is what :func:`~seqrepair.spark.rebuild.rebuild_images` and
:func:`~seqrepair.spark.audit.audit` consume.

Readers of the Redis journal also attach a *trim record* to the ``seq`` column's metadata
(:func:`with_trim_record`, :func:`trim_record`), so that an audit of the DataFrame alone can
tell numbers retention removed from numbers that were lost.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

PUBLISH_TYPES = ("update", "correction", "image", "drop", "snapshot")
"""The ``ptype`` values a journal's publications have (``add`` is journaled as ``image``)."""

NOT_SELECTED_PTYPE = "not-selected"
"""The ``ptype`` of a *not-selected* row: one marker of a relay's journal
(:mod:`seqrepair.journal.selection`), numbers ``seq`` .. ``fields["through"]`` of the source
that the relay's upstream selection did not select. Such a row is no publication: its
``topic`` is ``""``, its ``fields`` are ``through`` (the last number it covers) and
``selection`` (the JSON text of the selection it was not selected under), ``wire_seq`` is the
wire number of ``seq``, ``permtoken`` and ``timestamp`` are null. The rebuild passes over
these rows; the audit reports the numbers they cover as ``not-selected``, not as gaps."""

JOURNAL_SCHEMA = StructType(
    [
        StructField("source", StringType(), nullable=False),
        StructField("seq", LongType(), nullable=False),
        StructField("wire_seq", LongType(), nullable=False),
        StructField("bits", IntegerType(), nullable=False),
        StructField("topic", StringType(), nullable=False),
        StructField("ptype", StringType(), nullable=False),
        StructField("fields", MapType(StringType(), StringType(), valueContainsNull=False)),
        StructField("permtoken", StringType(), nullable=True),
        StructField("timestamp", DoubleType(), nullable=True),
    ]
)
"""Spark schema of a journal read from Redis or from the Parquet archive."""

JOURNAL_COLUMNS = tuple(f.name for f in JOURNAL_SCHEMA.fields)

PROVENANCE_TYPE = StructType(
    [
        StructField("source", StringType(), nullable=False),
        StructField("seq", LongType(), nullable=False),
        StructField("correction", BooleanType(), nullable=False),
    ]
)
"""Per field of a rebuilt image: the publication that last set it."""

TRIM_METADATA = "seqrepair.trimmed_through"
"""Key of the trim record in the ``seq`` column's metadata: per source the last absolute
number retention had removed when the journal was read (``{"feed.a": 12}``)."""


def with_trim_record(frame: DataFrame, trimmed: Mapping[str, int]) -> DataFrame:
    """``frame`` with ``trimmed`` (per source the last trimmed number) as the trim record of
    its ``seq`` column, which :func:`~seqrepair.spark.audit.audit` reads."""
    metadata = dict(frame.schema["seq"].metadata)
    metadata[TRIM_METADATA] = {source: int(through) for source, through in trimmed.items()}
    return frame.withMetadata("seq", metadata)


def trim_record(frame: DataFrame) -> dict[str, int] | None:
    """The trim record of ``frame``'s ``seq`` column, or None when it has none (a frame not
    read from a Redis journal)."""
    if "seq" not in frame.columns:
        return None
    record = frame.schema["seq"].metadata.get(TRIM_METADATA)
    if record is None:
        return None
    return {str(source): int(through) for source, through in record.items()}
