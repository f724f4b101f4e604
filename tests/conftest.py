"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, settings

from seqrepair.journal import EmbeddedRedis
from seqrepair.journal.server import PORT_SHARE_ENV

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


_FIRST_GROUPS = ("spark", "tests/test_cli.py")
"""The longest groups, started first so that none of them starts last (Spark's tests and the
end-to-end demo take minutes each on a shared 2-core machine)."""
_LAST_GROUP_PREFIX = "tests/core/"
"""Many quick tests: what fills the workers' last minutes."""


def _group_of(nodeid: str) -> str:
    """The worker group of the test ``nodeid`` under ``pytest -n N --dist loadfile``
    (``bin/test``): every Spark test one group (one SparkSession, one JVM warmed once), else
    the test's file (its module fixtures start once)."""
    path = nodeid.split("::", 1)[0]
    return "spark" if path.startswith("tests/spark/") else path


def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker: free ports from this worker's share only (:data:`PORT_SHARE_ENV`,
    inherited by every process it starts). Each process remembers only its own recent draws,
    so without it the other worker may draw a port that a test here stopped its redis-server
    or component on and starts it again on (journal outages, the demo's component restart):
    the restart finds its port taken, or this test's clients reconnect to the other's server."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # a replacement worker's id may exceed the count: modulo
        index = int(workerinput["workerid"].removeprefix("gw")) % workerinput["workercount"]
        os.environ[PORT_SHARE_ENV] = f"{index}/{workerinput['workercount']}"


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` by :func:`_group_of` (xdist's ``loadgroup`` marks are lost on
    pytest 9.2, which no longer reads the node id xdist 3.8 rewrites)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByGroup(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid)

    return ByGroup(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: the longest groups first and tests/core last (with
    ``--no-loadscope-reorder`` the groups are handed out in this order)."""
    if not hasattr(config, "workerinput"):
        return

    def rank(item: pytest.Item) -> int:
        group = _group_of(item.nodeid)
        if group in _FIRST_GROUPS:
            return _FIRST_GROUPS.index(group)
        return len(_FIRST_GROUPS) + group.startswith(_LAST_GROUP_PREFIX)

    items.sort(key=rank)  # stable: within a rank, the order collected
