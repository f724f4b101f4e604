"""``seqrepair rebuild`` and ``seqrepair audit``: the Spark jobs from the command line."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``rebuild`` and ``audit`` to the ``seqrepair`` parser (each sets ``func``)."""
    from seqrepair.spark import jobs

    rebuild = subparsers.add_parser(
        "rebuild",
        help="rebuild every item's image from the journal with Spark",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    jobs.add_input_arguments(rebuild)
    jobs.add_rebuild_arguments(rebuild)
    rebuild.set_defaults(func=jobs.rebuild_main)

    audit = subparsers.add_parser(
        "audit",
        help="audit the journal with Spark: gaps, duplicates, trims, per-item counts",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    jobs.add_input_arguments(audit)
    audit.set_defaults(func=jobs.audit_main)
