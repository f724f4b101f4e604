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

The names are imported on first use (PEP 562): importing the package (as the ``seqrepair``
parser does for :mod:`seqrepair.spark.commands`) imports no pyspark.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from seqrepair.lazy import lazy_exports

if TYPE_CHECKING:
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
    from seqrepair.spark.schema import JOURNAL_SCHEMA, NOT_SELECTED_PTYPE, trim_record
    from seqrepair.spark.session import spark_session

_LAZY = {
    "AuditReport": "seqrepair.spark.audit",
    "FORMAT_NAME": "seqrepair.spark.datasource",
    "IMAGE_COLUMNS": "seqrepair.spark.rebuild",
    "JOURNAL_SCHEMA": "seqrepair.spark.schema",
    "JournalDataSource": "seqrepair.spark.datasource",
    "NOT_SELECTED_PTYPE": "seqrepair.spark.schema",
    "SnapshotTrimmedError": "seqrepair.spark.datasource",
    "as_of": "seqrepair.spark.rebuild",
    "audit": "seqrepair.spark.audit",
    "collect_images": "seqrepair.spark.rebuild",
    "event_keys": "seqrepair.spark.rebuild",
    "event_order": "seqrepair.spark.rebuild",
    "read_archive": "seqrepair.spark.reading",
    "read_journal": "seqrepair.spark.reading",
    "read_journals": "seqrepair.spark.reading",
    "rebuild_images": "seqrepair.spark.rebuild",
    "register_journal_source": "seqrepair.spark.reading",
    "spark_session": "seqrepair.spark.session",
    "trim_record": "seqrepair.spark.schema",
    "write_images": "seqrepair.spark.rebuild",
}
"""Each public name and the module that defines it."""

__all__ = [
    "FORMAT_NAME",
    "IMAGE_COLUMNS",
    "JOURNAL_SCHEMA",
    "NOT_SELECTED_PTYPE",
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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)


class _Package(types.ModuleType):
    """The package: importing its submodule ``audit`` binds the module here, over the name
    ``audit`` the package exports (the function), unless told otherwise."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "audit" and isinstance(value, types.ModuleType):
            value = value.audit
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
