"""The component's durables (amqp/durable.py) over a real redis-server: who is durable, where a
new context starts, what an ACK's ``taken`` may move."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import redis

from seqrepair.amqp.component.durable import Durables, PositionUnavailableError, durable_user
from seqrepair.amqp.wire.security import principal_of
from seqrepair.journal import EmbeddedRedis
from seqrepair.journal.positions import PositionStore

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
    yield c
    c.close()


def make(client: redis.Redis, high: dict[str, int], fanned: dict[str, int]) -> Durables:
    return Durables(PositionStore(client), lambda: high, lambda: fanned)


def test_who_is_durable(client: redis.Redis) -> None:
    durables = make(client, {}, {})
    durable = {"seqrepair-ack": True, "seqrepair-durable": True}
    assert durables.durable_for(durable, "x", None) == "link/x"
    assert durables.durable_for(durable, "x", "rain") == "sub/rain"
    assert durables.durable_for({"seqrepair-ack": True}, "x", "rain") == "sub/rain"
    # no ACKs, no position: a plain AMQP client stays as it was
    assert durables.durable_for({}, "x", "rain") is None
    assert durables.durable_for({"seqrepair-durable": True}, "x", None) is None
    assert durables.durable_for({"seqrepair-ack": True}, "x", None) is None
    # a queue's subscriber may decline
    declined = {"seqrepair-ack": True, "seqrepair-durable": False}
    assert durables.durable_for(declined, "x", "rain") is None
    # an authenticated user's named link is its own: another user's same name is another
    assert durables.durable_for(durable, "x", None, "alice") == "link/alice/x"
    assert durables.durable_for(durable, "x", None, "bob") == "link/bob/x"
    assert durables.durable_for(durable, "x", "rain", "bob") == "sub/rain"  # a queue is shared
    # a component whose journal is not Redis keeps no positions
    assert Durables(None, dict, dict).durable_for(durable, "x", "rain") is None


def test_first_attach_makes_the_position_then_a_new_context_starts_after_it(
    client: redis.Redis,
) -> None:
    fanned = {"feed.a": 10}
    durables = make(client, {"feed.a": 10}, fanned)
    assert durables.start("link/x") is None  # made now, at the high-water: no replay owed
    durables.attached("x", "link/x")
    fanned["feed.a"] = 40
    durables.record(SimpleNamespace(name="x"), {"feed.a": 25})
    assert durables.start("link/x") == {"feed.a": 25}
    durables.flush()
    # a restarted component reads it back from Redis
    assert make(client, {"feed.a": 40}, {"feed.a": 40}).start("link/x") == {"feed.a": 25}


def test_taken_never_passes_what_was_fanned_out_and_bad_numbers_move_nothing(
    client: redis.Redis,
) -> None:
    durables = make(client, {"feed.a": 0}, {"feed.a": 30})
    durables.start("link/x")
    durables.attached("x", "link/x")
    durables.taken("x", {"feed.a": 10**9, "feed.z": 5})  # past the fan-out; a source never seen
    assert durables.store.peek("link/x") == {"feed.a": 30}
    assert durables.taken("x", {"{bad}": 3}) == 0
    assert durables.stats["acks_refused"] == 1
    assert durables.store.peek("link/x") == {"feed.a": 30}
    # a link that is not durable has no position to move
    assert durables.taken("other", {"feed.a": 3}) == 0
    assert durables.stats["acks_ignored"] == 1


def test_redis_down_at_attach_refuses_it_without_a_fatal_condition(tmp_path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path / "r").start()
    c = redis.Redis.from_url(server.url, socket_timeout=1.0, socket_connect_timeout=1.0)
    server.stop()
    durables = make(c, {}, {})
    with pytest.raises(PositionUnavailableError) as refused:
        durables.start("sub/q")
    assert refused.value.condition == "amqp:internal-error"
    c.close()


def test_a_link_gone_for_good_leaves_memory_once_its_position_is_written(
    client: redis.Redis,
) -> None:
    durables = make(client, {"feed.a": 0}, {"feed.a": 50})
    durables.start("link/x")
    durables.attached("x", "link/x")
    durables.taken("x", {"feed.a": 20})
    durables.forget_link("x")
    assert durables.store.peek("link/x") is None
    # written before it left: a later attach reads it back
    assert make(client, {}, {}).start("link/x") == {"feed.a": 20}


def test_while_the_journal_is_quiet_positions_wait_and_attaches_are_refused(
    client: redis.Redis,
) -> None:
    quiet = [True]
    durables = Durables(PositionStore(client), lambda: {}, lambda: {"feed.a": 9},
                        lambda: quiet[0])
    with pytest.raises(PositionUnavailableError):
        durables.start("link/x")  # not read while Redis is left alone
    quiet[0] = False
    durables.start("link/x")
    durables.attached("x", "link/x")
    durables.taken("x", {"feed.a": 9})
    quiet[0] = True
    durables.flush()
    assert durables.store.dirty  # kept, not written
    quiet[0] = False
    durables.flush()
    assert not durables.store.dirty
    assert make(client, {}, {}).start("link/x") == {"feed.a": 9}


def test_only_a_proven_user_names_a_durable() -> None:
    def conn(user: object) -> SimpleNamespace:
        return SimpleNamespace(transport=SimpleNamespace(user=user))

    def user(connection: object) -> str | None:
        return durable_user(principal_of(connection))

    assert user(conn("alice")) == "alice"
    assert user(conn("anonymous")) is None
    assert user(conn(None)) is None
    assert user(SimpleNamespace(transport=None)) is None
