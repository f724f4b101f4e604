"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from seqrepair.journal import EmbeddedRedis


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of the test's own, for tests that stop, kill or restart it."""
    server = EmbeddedRedis(data_dir=tmp_path / "redis", appendfsync="always")
    try:
        yield server.start()
    finally:
        server.stop()
