"""A SparkSession with quiet logging and defaults that suit one machine."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from seqrepair.logs import get_logger

log = get_logger(__name__)

LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "4g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
}
"""Settings applied unless the caller overrides them."""


def spark_session(
    master: str | None = "local[*]",
    *,
    app_name: str = "seqrepair",
    progress: bool = False,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get (or create) a SparkSession for seqrepair jobs.

    ``master`` is any Spark master URL (``local[2]``, ``spark://host:7077``), or None to take
    it from ``spark-submit``, whose settings then win over the defaults here. ``progress``
    turns on Spark's console progress bar for long jobs. Logging is set to WARN, the UI is off
    and shuffle partitions are few, which suits a single machine; ``conf`` overrides any of
    it. The Python workers use this interpreter, and ``seqrepair`` is put on their path.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = dict(LOCAL_DEFAULTS)
    settings["spark.ui.showConsoleProgress"] = "true" if progress else "false"
    settings["spark.executorEnv.PYTHONPATH"] = _package_parent()
    if master is None:  # under spark-submit: its --conf and spark-defaults.conf win
        for key in _preset(settings):
            del settings[key]
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    log.info("spark session", master=spark.sparkContext.master, version=spark.version,
             progress=spark.conf.get("spark.ui.showConsoleProgress") == "true")
    return spark


def _preset(keys: Iterable[str]) -> list[str]:
    """Of ``keys``, those the launcher already set (spark-submit's ``--conf``, its properties
    file, ``spark-defaults.conf``): the JVM's configuration holds them before any session."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the launcher's JVM, whose SparkConf loads them
    launched = SparkConf()
    return [key for key in keys if launched.contains(key)]


def _package_parent() -> str:
    """The folder holding the ``seqrepair`` package, prepended to workers' PYTHONPATH."""
    parent = str(Path(__file__).resolve().parents[2])
    existing = os.environ.get("PYTHONPATH", "")
    return parent if not existing else f"{parent}{os.pathsep}{existing}"
