"""``seqrepair rebuild`` and ``seqrepair audit``: the Spark jobs from the command line.

Their options (:mod:`seqrepair.spark.options`) import no pyspark; the jobs
(:mod:`seqrepair.spark.jobs`) are imported when a command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from seqrepair.extras import run_body
from seqrepair.spark import options

SPARK = ("pyspark", "pyarrow", "pandas")


def register(subparsers: Any) -> None:
    """Add ``rebuild`` and ``audit`` to the ``seqrepair`` parser (each sets ``func``)."""
    rebuild = subparsers.add_parser(
        "rebuild",
        help="rebuild every item's image from the journal with Spark",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    options.add_input_arguments(rebuild)
    options.add_rebuild_arguments(rebuild)
    rebuild.set_defaults(func=_rebuild)

    audit = subparsers.add_parser(
        "audit",
        help="audit the journal with Spark: gaps, duplicates, trims, per-item counts",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    options.add_input_arguments(audit)
    audit.set_defaults(func=_audit)


def _needs(args: argparse.Namespace) -> tuple[str, ...]:
    return (*SPARK, "redis") if args.journal else SPARK


def _rebuild(args: argparse.Namespace) -> int:
    return run_body(args, "seqrepair.spark.jobs:rebuild_main", *_needs(args))


def _audit(args: argparse.Namespace) -> int:
    return run_body(args, "seqrepair.spark.jobs:audit_main", *_needs(args))
