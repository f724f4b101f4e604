"""The typed shape of a journal in Spark and in the Parquet archive.

One row per journaled publication. ``fields`` maps each field the publication carried to the
JSON text of its value, so an explicit null is the string ``"null"`` and a field that was not
sent has no key. Both the Redis data source and the Parquet archive produce exactly this
schema, which is what :func:`~seqrepair.spark.rebuild.rebuild_images` and
:func:`~seqrepair.spark.audit.audit` consume.
"""

from __future__ import annotations

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
"""The ``ptype`` values a journal holds (``add`` is journaled as ``image``)."""

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
