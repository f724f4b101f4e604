"""Shared fixtures for the Spark tests: one local SparkSession for the whole run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402  (after the importorskip guard)

from seqrepair.spark.session import spark_session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] session shared by every Spark test (starting Spark costs seconds)."""
    session = spark_session("local[2]", app_name="seqrepair-tests")
    yield session
    session.stop()
