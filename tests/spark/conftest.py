"""Shared fixtures for the Spark tests: one local SparkSession for the whole run, and a real
redis-server (per test module) with a flushed journal per test for those that read Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402  (after the importorskip guard)

from seqrepair.journal import EmbeddedRedis, Journal  # noqa: E402
from seqrepair.spark.session import spark_session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] session shared by every Spark test (starting Spark costs seconds)."""
    session = spark_session("local[2]", app_name="seqrepair-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A private redis-server for the test module."""
    with EmbeddedRedis() as server:
        yield server.url


@pytest.fixture
def journal(redis_url: str) -> Iterator[Journal]:
    """The journal at ``redis_url``, emptied for the test."""
    with Journal.from_url(redis_url) as j:
        j.client.flushdb()
        yield j
