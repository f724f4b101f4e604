"""The Spark adapter: the journal as a DataFrame, image rebuild and audit.

::

    from seqrepair.spark import spark_session, read_journals, rebuild_images, audit

    spark = spark_session("local[*]")
    journal = read_journals(spark, url="redis://127.0.0.1:6379/0", archive="archive/")
    images = rebuild_images(journal)              # topic, fields, provenance, partial, ...
    report = audit(spark, journal); print(report.summary())   # trimmed ranges as trimmed

``journal`` is a snapshot of the numbers held when it was built, each (source, seq) once.
Publications are ordered per source by absolute sequence and across sources by effective time
(see :mod:`seqrepair.spark.rebuild`).
"""

from seqrepair.spark.audit import AuditReport, audit
from seqrepair.spark.datasource import FORMAT_NAME, JournalDataSource, SnapshotTrimmedError
from seqrepair.spark.reading import (
    read_archive,
    read_journal,
    read_journals,
    register_journal_source,
)
from seqrepair.spark.rebuild import (
    IMAGE_COLUMNS,
    as_of,
    collect_images,
    event_keys,
    event_order,
    rebuild_images,
    write_images,
)
from seqrepair.spark.schema import JOURNAL_SCHEMA, trim_record
from seqrepair.spark.session import spark_session

__all__ = [
    "FORMAT_NAME",
    "IMAGE_COLUMNS",
    "JOURNAL_SCHEMA",
    "AuditReport",
    "JournalDataSource",
    "SnapshotTrimmedError",
    "as_of",
    "audit",
    "collect_images",
    "event_keys",
    "event_order",
    "read_archive",
    "read_journal",
    "read_journals",
    "rebuild_images",
    "register_journal_source",
    "spark_session",
    "trim_record",
    "write_images",
]
