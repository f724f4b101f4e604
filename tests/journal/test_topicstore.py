"""Published and declared topics, kept in two Redis sets so ``GET /topics`` lists them after a
restart, against a real redis-server.

``seqrepair:topics``: a set of published topics, UTF-8; ``seqrepair:topics:declared``: the
topics declared through the API; a deleted topic leaves both. The shared catalog stores a new
published topic in the background; while Redis is away the topic stays listed and is stored
once Redis is back.
"""

from __future__ import annotations

import pytest
import redis
import structlog
from polling import wait_for

from seqrepair.journal import EmbeddedRedis
from seqrepair.journal.topicstore import (
    DECLARED_SUFFIX,
    SAVE_CHUNK,
    TOPICS_KEY,
    RedisTopicStore,
)
from seqrepair.rest.catalog import SharedCatalog

pytestmark = pytest.mark.redis

WIND = "/weather/wind/LEMD"
RAIN = "/weather/precipitation/LFPG"
METEO = "/m\u00e9t\u00e9o/vent"


def test_save_and_load(redis_client: redis.Redis) -> None:
    store = RedisTopicStore(redis_client)
    assert store.load() == []
    store.save([WIND, RAIN])
    store.save([WIND, METEO])  # a topic stored twice is held once
    store.save([])
    assert store.load() == sorted([WIND, RAIN, METEO])
    assert redis_client.smembers(TOPICS_KEY) == {t.encode() for t in (WIND, RAIN, METEO)}


def test_many_topics_are_stored_in_chunks(redis_client: redis.Redis) -> None:
    topics = [f"/load/{n}" for n in range(2 * SAVE_CHUNK + 7)]
    RedisTopicStore(redis_client).save(topics)
    assert RedisTopicStore(redis_client).load() == sorted(topics)


def test_a_store_keeps_to_its_own_key(redis_client: redis.Redis) -> None:
    default = RedisTopicStore(redis_client)
    other = RedisTopicStore(redis_client, key="tenant-b:topics")
    default.save([WIND])
    other.save([RAIN])
    assert (default.load(), other.load()) == ([WIND], [RAIN])


def test_an_unreadable_member_is_skipped_and_kept_while_the_others_load(
    redis_client: redis.Redis,
) -> None:
    store = RedisTopicStore(redis_client)
    store.save([WIND, RAIN])
    unreadable = [b"\xff\xfe", b"weather", b"/weather/#", b"/a b", b""]
    redis_client.sadd(TOPICS_KEY, *unreadable)  # by hand, or some other version
    with structlog.testing.capture_logs() as logs:
        assert store.load() == [RAIN, WIND]
    assert len([e for e in logs if e["event"] == "stored topic unreadable; skipped"]) == 5
    assert all(e["log_level"] == "error" for e in logs)
    assert redis_client.scard(TOPICS_KEY) == 7  # left for the operator to mend


def test_a_catalog_lists_what_an_earlier_one_learned(
    redis_client: redis.Redis, redis_server: EmbeddedRedis
) -> None:
    with SharedCatalog(store=RedisTopicStore(redis_client), declared=["/declared"]) as first:
        for topic in (WIND, RAIN, METEO, WIND):
            first.learn(topic)
        assert wait_for(lambda: first.unsaved == [])
    store = RedisTopicStore.from_url(redis_server.url)  # a new process: a new client
    try:
        with SharedCatalog(store=store) as again:
            assert again.topics() == sorted([WIND, RAIN, METEO])  # not the declared one
            assert again.known == {WIND, RAIN, METEO}
            assert not again.learn(WIND)
    finally:
        store.close()


def test_while_redis_is_away_a_new_topic_is_listed_and_stored_once_redis_is_back(
    private_server: EmbeddedRedis,
) -> None:
    store = RedisTopicStore.from_url(private_server.url, socket_timeout=1.0,
                                     socket_connect_timeout=0.5)
    try:
        with structlog.testing.capture_logs() as logs, \
                SharedCatalog(store=store, retry=0.05, retry_max=0.2) as catalog:
            assert catalog.learn(WIND)
            assert wait_for(lambda: store.load() == [WIND])
            private_server.stop()
            assert catalog.learn(RAIN)
            assert catalog.topics() == [RAIN, WIND]
            assert wait_for(lambda: any(e["event"] == "topics not stored yet; trying again"
                                        for e in list(logs)))
            assert catalog.unsaved == [RAIN]
            private_server.start()
            assert wait_for(lambda: catalog.unsaved == [], 30)
        assert store.load() == [RAIN, WIND]
        assert SharedCatalog(store=store).topics() == [RAIN, WIND]
    finally:
        store.close()


def test_declared_topics_are_a_set_of_their_own_and_removal_takes_a_topic_from_both(
    redis_client: redis.Redis,
) -> None:
    store = RedisTopicStore(redis_client)
    assert store.load_declared() == []
    store.save([WIND, RAIN])
    store.declare(WIND)
    store.declare(METEO)
    store.declare(METEO)
    assert (store.load(), store.load_declared()) == ([RAIN, WIND], sorted([METEO, WIND]))
    assert redis_client.smembers(TOPICS_KEY + DECLARED_SUFFIX) == {
        t.encode() for t in (WIND, METEO)}
    store.remove(WIND)
    store.remove("/never/stored")
    assert (store.load(), store.load_declared()) == ([RAIN], [METEO])
    other = RedisTopicStore(redis_client, key="tenant-b:topics")
    other.declare(WIND)
    assert (store.load_declared(), other.load_declared()) == ([METEO], [WIND])


def test_a_declared_topic_is_listed_after_a_restart_and_a_deleted_one_is_not(
    redis_client: redis.Redis, redis_server: EmbeddedRedis
) -> None:
    with SharedCatalog(store=RedisTopicStore(redis_client), declared=["/flight/LEMD"]) as first:
        first.learn(WIND)
        first.learn(RAIN)
        first.declare(METEO)
        first.declare("/declared/then/deleted")
        assert wait_for(lambda: first.unsaved == [])
        first.remove(RAIN)
        first.remove("/declared/then/deleted")
    store = RedisTopicStore.from_url(redis_server.url)  # a new process: a new client
    try:
        with SharedCatalog(store=store) as again:
            assert again.topics() == sorted([METEO, WIND])  # not the command line's
            assert again.get(METEO).declared
            assert again.known == {WIND}
    finally:
        store.close()
