"""Durable subscriber positions in Redis (``seqrepair:position:<durable>``), on a real server."""

from __future__ import annotations

import pytest
import redis

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.subscriptions import Subscription
from seqrepair.journal import EmbeddedRedis, Journal
from seqrepair.journal.errors import JournalError
from seqrepair.journal.positions import (
    CREATED_FIELD,
    PositionStore,
    create_at_high_water,
    link_durable,
    position_key,
    queue_durable,
)
from seqrepair.journal.substore import RedisSubscriptionStore

pytestmark = pytest.mark.redis


def _publish(journal: Journal, source: str, count: int) -> None:
    start = journal.high_water(source)
    pubs = [
        Publication(topic="/t", source=source, source_seq=start + i + 1,
                    ptype=PublishType.UPDATE, fields={"i": i})
        for i in range(count)
    ]
    journal.append(pubs, 32)


def _stored(client: redis.Redis, durable: str) -> dict[str, int]:
    raw = client.hgetall(position_key(durable))
    return {k.decode(): int(v) for k, v in raw.items() if k.decode() != CREATED_FIELD}


def test_a_new_durable_is_made_at_its_start_and_written_at_once(
    redis_client: redis.Redis,
) -> None:
    store = PositionStore(redis_client)
    position, existed = store.position(link_durable("a"), {"feed.a": 7})
    assert (position, existed) == ({"feed.a": 7}, False)
    assert _stored(redis_client, "link/a") == {"feed.a": 7}
    assert redis_client.hexists(position_key("link/a"), CREATED_FIELD)
    # a second component (a restart) finds it, and does not make it again
    again = PositionStore(redis_client)
    assert again.position("link/a", {"feed.a": 99}) == ({"feed.a": 7}, True)


def test_takes_advance_in_memory_and_one_flush_writes_them(
    redis_client: redis.Redis,
) -> None:
    store = PositionStore(redis_client)
    store.position("link/a", {"feed.a": 0})
    store.position("link/b", {})
    for n in range(1, 101):  # a hundred ACKs ...
        store.take("link/a", {"feed.a": n})
    store.take("link/b", {"feed.b": 3, "feed.c": 1})
    assert _stored(redis_client, "link/a") == {"feed.a": 0}  # ... none written yet
    assert store.flush() == 2  # ... one pipeline for all
    assert _stored(redis_client, "link/a") == {"feed.a": 100}
    assert _stored(redis_client, "link/b") == {"feed.b": 3, "feed.c": 1}
    assert store.flush() == 0  # nothing new
    assert store.stats["flushes"] == 1


def test_a_position_never_goes_back(redis_client: redis.Redis) -> None:
    store = PositionStore(redis_client)
    store.position("link/a", {"feed.a": 10})
    assert store.take("link/a", {"feed.a": 5}) == 0
    assert store.take("link/a", {"feed.a": 12}) == 1
    store.flush()
    assert _stored(redis_client, "link/a") == {"feed.a": 12}
    assert store.peek("link/a") == {"feed.a": 12}


def test_a_durable_not_read_is_not_advanced(redis_client: redis.Redis) -> None:
    store = PositionStore(redis_client)
    assert store.take("link/nobody", {"feed.a": 5}) == 0
    assert not store.dirty
    assert not redis_client.exists(position_key("link/nobody"))


def test_bad_numbers_are_refused_and_change_nothing(redis_client: redis.Redis) -> None:
    store = PositionStore(redis_client)
    store.position("link/a", {"feed.a": 1})
    for bad in ({"feed.a": -1}, {"feed.a": 2**60}, {"feed.a": "3"}, {"{x}": 3}):
        with pytest.raises(InvalidMessageError):
            store.take("link/a", bad)  # type: ignore[arg-type]
    assert store.peek("link/a") == {"feed.a": 1}
    assert not store.dirty


def test_a_redis_outage_keeps_the_position_and_a_later_flush_writes_it(
    private_server: EmbeddedRedis,
) -> None:
    client = redis.Redis.from_url(private_server.url, socket_timeout=1.0,
                                  socket_connect_timeout=1.0)
    now = [0.0]
    store = PositionStore(client, clock=lambda: now[0])
    store.position("sub/q", {"feed.a": 0})
    store.take("sub/q", {"feed.a": 40})
    private_server.stop()
    try:
        assert store.flush() == 0  # failed: kept
        assert store.dirty
        store.take("sub/q", {"feed.a": 41})  # advances go on meanwhile
        assert store.stats["flush_failures"] == 1
    finally:
        private_server.start()
    assert store.flush() == 0  # not tried again at once (a Redis down must not be hammered)
    now[0] += 1.0
    assert store.flush() == 1
    assert not store.dirty
    assert _stored(client, "sub/q") == {"feed.a": 41}
    client.close()


def test_a_failed_read_raises_and_remembers_nothing(private_server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(private_server.url, socket_timeout=1.0,
                                  socket_connect_timeout=1.0)
    store = PositionStore(client)
    private_server.stop()
    try:
        with pytest.raises(JournalError):
            store.position("link/a", {"feed.a": 3})
        assert store.peek("link/a") is None
    finally:
        private_server.start()
    assert store.position("link/a", {"feed.a": 3}) == ({"feed.a": 3}, False)
    client.close()


def test_a_rest_subscription_starts_at_the_high_water_of_its_creation(
    redis_client: redis.Redis, journal: Journal,
) -> None:
    _publish(journal, "feed.a", 5)
    _publish(journal, "feed.b", 2)
    subs = RedisSubscriptionStore(redis_client)
    subs.save(Subscription("rain", "/weather/#"))
    assert _stored(redis_client, queue_durable("rain")) == {"feed.a": 5, "feed.b": 2}
    _publish(journal, "feed.a", 3)
    # an update keeps the position; only the first save makes it
    subs.save(Subscription("rain", "/weather/precipitation/#"))
    assert _stored(redis_client, queue_durable("rain")) == {"feed.a": 5, "feed.b": 2}
    # the component reads it as it is
    assert PositionStore(redis_client).position("sub/rain", {"feed.a": 8}) == (
        {"feed.a": 5, "feed.b": 2}, True)
    subs.remove("rain")
    assert not redis_client.exists(position_key("sub/rain"))


def test_a_position_made_on_an_empty_journal_is_still_made(redis_client: redis.Redis) -> None:
    assert create_at_high_water(redis_client, "sub/early")
    assert not create_at_high_water(redis_client, "sub/early")  # made once
    # sources born later are owed from their first number: the position does not name them
    assert PositionStore(redis_client).position("sub/early", {"feed.z": 50}) == ({}, True)


def test_fields_left_without_the_created_mark_are_not_taken_for_a_position(
    redis_client: redis.Redis,
) -> None:
    # a flush that raced a subscription's removal leaves numbers but no {created}
    redis_client.hset(position_key("sub/gone"), "feed.a", "900")
    assert PositionStore(redis_client).position("sub/gone", {"feed.a": 10}) == (
        {"feed.a": 10}, False)
    assert _stored(redis_client, "sub/gone") == {"feed.a": 10}
