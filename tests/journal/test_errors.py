"""The adapter boundary: redis-py errors become typed JournalErrors (fast; fakeredis only)."""

from __future__ import annotations

import fakeredis
import pytest
import redis.exceptions as rx

from seqrepair.core.errors import SeqRepairError
from seqrepair.journal import (
    Journal,
    JournalError,
    JournalResponseError,
    JournalTimeoutError,
    JournalUnavailableError,
)
from seqrepair.journal.errors import map_redis_errors


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (rx.TimeoutError("slow"), JournalTimeoutError),
        (rx.ConnectionError("refused"), JournalUnavailableError),
        (rx.BusyLoadingError("loading"), JournalUnavailableError),
        (rx.AuthenticationError("auth"), JournalUnavailableError),
        (rx.ResponseError("WRONGTYPE"), JournalResponseError),
        (rx.ReadOnlyError("replica"), JournalResponseError),
        (rx.RedisError("other"), JournalError),
        (rx.CrossSlotTransactionError("slots"), JournalError),  # a cluster error: no RedisError
        (rx.SlotNotCoveredError("slot 1"), JournalError),
    ],
)
def test_every_redis_error_is_mapped(raised: Exception, expected: type[JournalError]) -> None:
    with pytest.raises(expected) as info, map_redis_errors("append", "feed.a"):
        raise raised
    assert isinstance(info.value, SeqRepairError)
    assert info.value.source == "feed.a"
    assert info.value.operation == "append"
    assert info.value.__cause__ is raised


def test_other_errors_pass_through() -> None:
    with pytest.raises(KeyError), map_redis_errors("read"):
        raise KeyError("not a redis error")


def test_disconnected_server_is_unavailable() -> None:
    server = fakeredis.FakeServer()
    server.connected = False
    journal = Journal(fakeredis.FakeRedis(server=server))
    with pytest.raises(JournalUnavailableError):
        journal.high_water("feed.a")
    with pytest.raises(JournalUnavailableError):
        journal.sources()


def test_meta_reads_on_fakeredis() -> None:
    client = fakeredis.FakeRedis()
    client.hset("seqrepair:{feed.a}:meta", mapping={"high_water": 7, "bits": 16})
    client.sadd("seqrepair:sources", "feed.a")
    journal = Journal(client)
    assert journal.high_water("feed.a") == 7
    assert journal.sources() == ["feed.a"]
    info = journal.info("feed.a")
    assert (info.high_water, info.bits, info.trimmed_through, info.length) == (7, 16, 0, 7)
