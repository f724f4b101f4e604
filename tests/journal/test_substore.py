"""Subscriptions made through the API, kept in one Redis hash, against a real redis-server.

``seqrepair:subscriptions``: field = id, value = the subscription's JSON form, compact UTF-8.
"""

from __future__ import annotations

import json

import pytest
import redis
import structlog

from seqrepair.core.subscriptions import Subscription
from seqrepair.journal import EmbeddedRedis
from seqrepair.journal.substore import SUBSCRIPTIONS_KEY, RedisSubscriptionStore
from seqrepair.rest.manager import SubscriptionManager

pytestmark = pytest.mark.redis

SUFFIX_LEMD = {"dialect": "basic", "type": "suffix", "property": "subject", "value": "/LEMD"}
WIND = Subscription("wind-lemd", "/weather/wind/*", filters=[SUFFIX_LEMD], status="PAUSED",
                    permtokens=["6747"], protocolsettings={"linkname": "v\u00eda"})
RAIN = Subscription("rain", "/weather/precipitation/#")


def test_save_load_and_remove(redis_client: redis.Redis) -> None:
    store = RedisSubscriptionStore(redis_client)
    assert store.load() == []
    store.save(WIND)
    store.save(RAIN)
    loaded = store.load()
    assert loaded == [RAIN, WIND]  # by id
    assert [s.to_json() for s in loaded] == [RAIN.to_json(), WIND.to_json()]
    store.remove("wind-lemd")
    assert store.load() == [RAIN]
    store.remove("wind-lemd")  # not stored: nothing happens
    store.remove("rain")
    assert store.load() == []
    assert not redis_client.exists(SUBSCRIPTIONS_KEY)


def test_save_replaces_the_subscription_of_the_same_id(redis_client: redis.Redis) -> None:
    store = RedisSubscriptionStore(redis_client)
    store.save(RAIN)
    resumed = Subscription("rain", "/weather/#", status="ACTIVE")
    store.save(resumed)
    assert store.load() == [resumed]
    assert redis_client.hlen(SUBSCRIPTIONS_KEY) == 1


def test_the_hash_holds_the_compact_json_form_in_utf8(redis_client: redis.Redis) -> None:
    RedisSubscriptionStore(redis_client).save(WIND)
    assert redis_client.hkeys(SUBSCRIPTIONS_KEY) == [b"wind-lemd"]
    assert redis_client.hget(SUBSCRIPTIONS_KEY, "wind-lemd") == (
        '{"id":"wind-lemd","topic":"/weather/wind/*","protocol":"AMQP",'
        '"protocolsettings":{"linkname":"v\u00eda"},"sink":"/subscriptions/wind-lemd",'
        '"queue":"/subscriptions/wind-lemd","filters":[{"dialect":"basic","type":"suffix",'
        '"property":"subject","value":"/LEMD"}],"config":{},"subscription_status":"PAUSED",'
        '"qos":"EXACTLY_ONCE","durable":true,"permtokens":["6747"],"configured":false,"owner":null}'
    ).encode()


def test_a_store_keeps_to_its_own_key(redis_client: redis.Redis) -> None:
    default = RedisSubscriptionStore(redis_client)
    other = RedisSubscriptionStore(redis_client, key="tenant-b:subscriptions")
    default.save(WIND)
    other.save(RAIN)
    assert default.load() == [WIND]
    assert other.load() == [RAIN]
    assert redis_client.hkeys("tenant-b:subscriptions") == [b"rain"]


UNREADABLE: dict[str, bytes] = {
    "not-json": b"{not json",
    "not-utf8": b"\xff\xfe\x00",
    "a-list": b"[]",
    "bad-topic": json.dumps({"topic": "weather"}).encode(),
    "other-id": json.dumps({**RAIN.to_json(), "id": "rain"}).encode(),
    "bad-filter": json.dumps({"topic": "/a", "filters": [{**SUFFIX_LEMD, "property": ["x"]}]})
    .encode(),
    "configured": json.dumps({"topic": "/a", "configured": True}).encode(),
    "bad id": json.dumps({"topic": "/a"}).encode(),
}


def test_an_unreadable_entry_is_skipped_and_kept_while_the_others_load(
    redis_client: redis.Redis,
) -> None:
    store = RedisSubscriptionStore(redis_client)
    store.save(WIND)
    store.save(RAIN)
    for sub_id, raw in UNREADABLE.items():  # written by hand, or by some other version
        redis_client.hset(SUBSCRIPTIONS_KEY, sub_id, raw)
    with structlog.testing.capture_logs() as logs:
        assert store.load() == [RAIN, WIND]
    skipped = sorted(e["subscription"] for e in logs
                     if e["event"] == "stored subscription unreadable; skipped")
    assert skipped == sorted(UNREADABLE)
    assert all(e["log_level"] == "error" for e in logs)
    for sub_id, raw in UNREADABLE.items():  # left for the operator to mend, not deleted
        assert redis_client.hget(SUBSCRIPTIONS_KEY, sub_id) == raw


def test_a_manager_sees_what_a_previous_manager_made(
    redis_client: redis.Redis, redis_server: EmbeddedRedis
) -> None:
    first = SubscriptionManager(store=RedisSubscriptionStore(redis_client))
    wind = first.create(WIND.to_json())
    rain = first.create({"topic": "/weather/precipitation/#"})
    gone = first.create({"topic": "/weather/#"})
    rain = first.update(rain.id, {"topic": "/weather/precipitation/LEMD",
                                  "subscription_status": "PAUSED"})
    first.delete(gone.id)

    store = RedisSubscriptionStore.from_url(redis_server.url)  # a new process: a new client
    try:
        again = SubscriptionManager(store=store)
        assert again.query() == first.query() == sorted([wind, rain], key=lambda s: s.id)
        assert [s.to_json() for s in again.query()] == [s.to_json() for s in first.query()]
        assert again.find(gone.id) is None
    finally:
        store.close()


def test_after_a_restart_configured_subscriptions_still_come_first(
    redis_client: redis.Redis,
) -> None:
    configured = Subscription("ops", "/weather/#", configured=True)
    first = SubscriptionManager(store=RedisSubscriptionStore(redis_client))
    first.create({"topic": "/stolen/#", "id": "ops"})  # before the operator configured "ops"
    api = first.create({"topic": "/a", "id": "api"})

    again = SubscriptionManager(configured=[configured],
                                store=RedisSubscriptionStore(redis_client))
    assert again.query() == [api, configured]
    assert redis_client.hexists(SUBSCRIPTIONS_KEY, "ops")  # the stored one stays, unused


def test_a_change_redis_cannot_take_is_undone(private_server: EmbeddedRedis) -> None:
    store = RedisSubscriptionStore.from_url(private_server.url, socket_timeout=1.0,
                                            socket_connect_timeout=0.5)
    try:
        manager = SubscriptionManager(store=store)
        kept = manager.create({"topic": "/a", "id": "kept"})
        private_server.stop()
        with pytest.raises(redis.ConnectionError):
            manager.create({"topic": "/b", "id": "lost"})
        with pytest.raises(redis.ConnectionError):
            manager.delete("kept")
        assert manager.query() == [kept]
        private_server.start()
        assert store.load() == [kept]
        assert SubscriptionManager(store=store).query() == [kept]
    finally:
        store.close()
