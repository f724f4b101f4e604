"""The options of ``seqrepair rebuild|audit`` (and of ``spark-submit``'s entry point,
:mod:`seqrepair.spark.submit`): argparse only, no pyspark, so the ``seqrepair`` parser builds
without the ``spark`` extra."""

from __future__ import annotations

import argparse

from seqrepair.argtypes import finite_float, non_negative_int, positive_int, spark_master

DEFAULT_PARTITION_SIZE = 50_000
"""Journal numbers per Spark partition when reading Redis."""


def add_input_arguments(parser: argparse.ArgumentParser, *, master: bool = True) -> None:
    """The options shared by ``rebuild`` and ``audit``."""
    if master:
        parser.add_argument(
            "--master",
            default="local[*]",
            type=spark_master,
            help="Spark master URL: local, local[N], local[*], spark://HOST:PORT, yarn, "
            "k8s://URL",
        )
    parser.add_argument("--journal", metavar="REDIS_URL", help="read the Redis journal at URL")
    parser.add_argument("--archive", metavar="PATH", help="read the Parquet archive under PATH")
    parser.add_argument(
        "--output",
        metavar="PATH",
        help="write results (Parquet) under PATH: a new or empty folder, or one this command "
        "wrote before (replaced); anything else there is refused, never deleted",
    )
    parser.add_argument(
        "--partition-size",
        type=positive_int,
        default=DEFAULT_PARTITION_SIZE,
        help="journal numbers per Spark partition when reading Redis",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="hide Spark's console progress bar"
    )


def add_rebuild_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rebuild`` beyond the shared ones."""
    parser.add_argument(
        "--as-of-seq",
        action="append",
        default=[],
        metavar="SOURCE=SEQ",
        help="rebuild as of this absolute number of SOURCE (repeatable)",
    )
    parser.add_argument(
        "--as-of-time",
        type=finite_float,
        help="rebuild as of this timestamp (seconds): each source up to its first publication "
        "stamped later (publications are cut on their effective time)",
    )
    parser.add_argument(
        "--show", type=non_negative_int, default=10, help="print this many images"
    )
