"""Fixtures for journal tests: a real redis-server started for the session and stopped after.

Tests that use them carry ``pytestmark = pytest.mark.redis``. Each test gets an empty database.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from seqrepair.journal import EmbeddedRedis, Journal


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    data = tmp_path_factory.mktemp("redis")
    with EmbeddedRedis(data_dir=data, appendfsync="no") as server:
        yield server
    assert not server.running


@pytest.fixture
def redis_client(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def journal(redis_client: redis.Redis) -> Iterator[Journal]:
    with Journal(redis_client, page_size=50) as journal:
        yield journal
