"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import HealthCheck, settings

from seqrepair.journal import EmbeddedRedis

# Property tests check behaviour, never speed: no per-example deadline (200 ms by default) and
# no "too slow" health check, both of which a loaded 2-core machine fails at random (CI runs
# the suite once; a failure prints the example and a reproduction blob).
settings.register_profile(
    "seqrepair", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("seqrepair")


@pytest.fixture(autouse=True)
def _structlog_as_it_was() -> Iterator[None]:
    """A test that runs the CLI in process configures structlog (its log level among it): put
    the configuration back, so later tests that capture log lines see what they expect."""
    config = structlog.get_config()
    yield
    structlog.configure(**config)


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of the test's own, for tests that stop, kill or restart it."""
    server = EmbeddedRedis(data_dir=tmp_path / "redis", appendfsync="always")
    try:
        yield server.start()
    finally:
        server.stop()
