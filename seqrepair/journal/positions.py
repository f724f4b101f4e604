"""Durable subscriber positions, kept in Redis next to the journal (a JetStream ack floor).

A *durable* is a subscription whose position outlives its subscriber: a subscription queue
(``sub/<id>``) or a named link that asked for it (``link/<name>``). Its position is, per
source, the last absolute number its application has **taken** (acknowledged with ``ACK``);
a subscriber that attaches again, anywhere, resumes right after it.

``seqrepair:position:<durable>`` is a hash: field = source, value = the absolute number
(decimal text), plus the field ``{created}`` (a name no source can have) holding the time
the position was made. A source the hash does not name was born after the position was
made: everything of it is owed.

:class:`PositionStore` keeps every durable it has seen in memory (the authority while the
component lives) and writes what advanced in one pipeline per :meth:`~PositionStore.flush`
(the component's timer, a link's close): never one Redis call per ``ACK``. A flush Redis does
not take keeps what it held and is tried again later (longer after a call that held the event
loop, as the journal's quiet rule does), so a Redis outage costs no position the process
holds. What a component killed between two flushes had not written comes back as duplicates
(at most one flush interval of acknowledgements), never as loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from seqrepair.core.errors import InvalidMessageError
from seqrepair.journal.errors import JournalError, map_redis_errors
from seqrepair.journal.format import (
    KEY_PREFIX,
    MAX_JOURNAL_SEQ,
    META_HIGH_WATER,
    SOURCES_KEY,
    can_name_journal,
    meta_key,
)
from seqrepair.logs import get_logger

log = get_logger("seqrepair.journal.positions")

POSITION_PREFIX = f"{KEY_PREFIX}:position:"
CREATED_FIELD = "{created}"
"""The hash field that marks a position as made (braces: no source name holds them)."""

STALL = 0.5
"""Seconds a failed flush must have held the caller to leave Redis untried twice as long."""

RETRY = 0.5
"""Seconds at least between a failed flush and the next try."""


def position_key(durable: str) -> str:
    """The hash holding the position of ``durable``."""
    return POSITION_PREFIX + durable


def queue_durable(sub_id: str) -> str:
    """The durable name of subscription queue ``/subscriptions/<sub_id>``."""
    return f"sub/{sub_id}"


def link_durable(link_name: str) -> str:
    """The durable name of the named link ``link_name``."""
    return f"link/{link_name}"


def _decode(raw: Mapping[bytes | str, bytes | str]) -> dict[str, int]:
    position: dict[str, int] = {}
    for field, value in raw.items():
        name = field.decode() if isinstance(field, bytes) else str(field)
        if name == CREATED_FIELD:
            continue
        try:
            number = int(value)
        except ValueError:
            log.error("stored position unreadable; source ignored", source=name, value=value)
            continue
        position[name] = number
    return position


def _check(taken: Mapping[str, int]) -> dict[str, int]:
    checked: dict[str, int] = {}
    for source, number in taken.items():
        if not can_name_journal(source):
            raise InvalidMessageError("a position names journaled sources", got=source)
        if type(number) is not int or not 0 <= number <= MAX_JOURNAL_SEQ:
            raise InvalidMessageError(
                f"a position is an absolute number 0..{MAX_JOURNAL_SEQ}",
                expected=f"0..{MAX_JOURNAL_SEQ}", got=number,
            )
        checked[source] = number
    return checked


def create_position(client: redis.Redis, durable: str, start: Mapping[str, int]) -> bool:
    """Make the position of ``durable`` (``start``: per source, the number it starts after)
    unless it exists; True when it was made. One transaction: a position is made whole or
    not at all. Raises redis-py's errors, as the subscription store does."""
    start = _check(start)
    key = position_key(durable)
    if client.hexists(key, CREATED_FIELD):
        return False
    mapping: dict[Any, Any] = {source: str(n) for source, n in start.items()}
    mapping[CREATED_FIELD] = repr(time.time())
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(key)  # what a write raced in after a removal is no position
        pipe.hset(key, mapping=mapping)
        pipe.execute()
    return True


def high_waters_now(client: redis.Redis) -> dict[str, int]:
    """The journal's high-water of every source (redis-py's errors raised as they come)."""
    members: set[bytes] = client.smembers(SOURCES_KEY)  # type: ignore[assignment]
    sources = sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)
    sources = [s for s in sources if can_name_journal(s)]
    with client.pipeline(transaction=False) as pipe:
        for source in sources:
            pipe.hget(meta_key(source), META_HIGH_WATER)
        replies = pipe.execute()
    return {s: int(hw or 0) for s, hw in zip(sources, replies, strict=True)}


def create_at_high_water(client: redis.Redis, durable: str) -> bool:
    """:func:`create_position` at the journal's high-waters now (a REST subscription is owed
    everything published from its creation on)."""
    return create_position(client, durable, high_waters_now(client))


def remove_position(client: redis.Redis, durable: str) -> None:
    """Forget the position of ``durable`` (its subscription was deleted)."""
    client.delete(position_key(durable))


class PositionStore:
    """The positions of the durables a component serves: in memory, written to Redis in
    batches by :meth:`flush`, read from Redis once per durable by :meth:`position`.

    ``clock`` measures how long a failed flush held the caller (monotonic seconds).
    """

    def __init__(
        self, client: redis.Redis, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = client
        self.clock = clock
        self._positions: dict[str, dict[str, int]] = {}
        self._dirty: dict[str, dict[str, int]] = {}
        self._retry_at: float | None = None
        self.stats = {"taken": 0, "flushes": 0, "written": 0, "flush_failures": 0}

    def position(self, durable: str, start: Mapping[str, int]) -> tuple[dict[str, int], bool]:
        """The position of ``durable`` and whether it existed before; a durable never seen
        is made now at ``start`` (written at once: an attach must not rest on a position a
        crash would lose). Raises :class:`JournalError` when Redis fails; nothing changes."""
        known = self._positions.get(durable)
        if known is not None:
            return dict(known), True
        with map_redis_errors("read_position"):
            raw = self.client.hgetall(position_key(durable))
        if CREATED_FIELD.encode() in raw or CREATED_FIELD in raw:
            stored = _decode(raw)
            self._positions[durable] = stored
            return dict(stored), True
        with map_redis_errors("create_position"):
            create_position(self.client, durable, start)
        # a concurrent maker (another component on this Redis) may have won: read it back
        with map_redis_errors("read_position"):
            raw = self.client.hgetall(position_key(durable))
        made = _decode(raw)
        self._positions[durable] = made
        return dict(made), False

    def take(self, durable: str, taken: Mapping[str, int]) -> int:
        """The application of ``durable`` has taken ``taken`` (source -> absolute number):
        advance its position (never back); return how many sources advanced. In memory
        only: :meth:`flush` writes it. A durable not read by :meth:`position` is ignored."""
        position = self._positions.get(durable)
        if position is None:
            return 0
        advanced = 0
        for source, number in _check(taken).items():
            if number > position.get(source, 0):
                position[source] = number
                self._dirty.setdefault(durable, {})[source] = number
                advanced += 1
        self.stats["taken"] += advanced
        return advanced

    def peek(self, durable: str) -> dict[str, int] | None:
        """The position held in memory for ``durable`` (None when not read yet)."""
        position = self._positions.get(durable)
        return None if position is None else dict(position)

    @property
    def dirty(self) -> bool:
        """Whether some advance is not written yet."""
        return bool(self._dirty)

    def forget(self, durable: str) -> None:
        """Drop ``durable`` from memory (its subscription was deleted); nothing is written."""
        self._positions.pop(durable, None)
        self._dirty.pop(durable, None)

    def flush(self) -> int:
        """Write every advance not written yet, in one pipeline; return how many durables
        were written. On a Redis failure nothing is lost: the advances stay to be written by
        a later flush, not tried before :data:`RETRY` seconds (twice as long as the failed
        call held the caller, when that was :data:`STALL` or more)."""
        if not self._dirty:
            return 0
        started = self.clock()
        if self._retry_at is not None and started < self._retry_at:
            return 0
        batch, self._dirty = self._dirty, {}
        try:
            with map_redis_errors("flush_positions"), self.client.pipeline(
                transaction=False
            ) as pipe:
                for durable, advanced in batch.items():
                    pipe.hset(position_key(durable),
                              mapping={s: str(n) for s, n in advanced.items()})
                pipe.execute()
        except JournalError as exc:
            for durable, advanced in batch.items():  # newer advances win over the batch's
                merged = self._dirty.setdefault(durable, {})
                for source, number in advanced.items():
                    if number > merged.get(source, 0):
                        merged[source] = number
            held = self.clock() - started
            self._retry_at = self.clock() + max(RETRY, 2 * held if held >= STALL else 0.0)
            self.stats["flush_failures"] += 1
            log.warning("positions not written; kept and tried again",
                        durables=len(batch), held=round(held, 3), error=exc.message)
            return 0
        self._retry_at = None
        self.stats["flushes"] += 1
        self.stats["written"] += len(batch)
        return len(batch)
