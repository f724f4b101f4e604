"""Subscriptions made through the REST API, kept in Redis next to the journal.

``seqrepair:subscriptions`` is a hash: field = subscription id, value = the subscription's JSON
form (:meth:`~seqrepair.core.subscriptions.Subscription.to_json`, compact, UTF-8). Configured
subscriptions (``serve --subscription``) are not stored: the command line is their home.

A subscription saved for the first time gets its durable position
(:mod:`seqrepair.journal.positions`) at the journal's high-waters first, so the queue is owed
everything published from its creation on, attached or not; removing it removes the position.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from seqrepair.core.errors import SeqRepairError
from seqrepair.core.subscriptions import Subscription
from seqrepair.journal.journal import bounded_client
from seqrepair.journal.positions import create_at_high_water, queue_durable, remove_position
from seqrepair.logs import get_logger

SUBSCRIPTIONS_KEY = "seqrepair:subscriptions"

log = get_logger("seqrepair.journal.substore")


class RedisSubscriptionStore:
    """Load, save and remove subscriptions in one Redis hash (redis-py is thread-safe)."""

    def __init__(self, client: redis.Redis, *, key: str = SUBSCRIPTIONS_KEY) -> None:
        self.client = client
        self.key = key

    @classmethod
    def from_url(cls, url: str, **client_kwargs: Any) -> RedisSubscriptionStore:
        """A store on a new client for ``url``."""
        return cls(bounded_client(url, 5.0, **client_kwargs))

    def load(self) -> list[Subscription]:
        """Every stored subscription, by id. One that no longer reads (a hand-edited entry,
        say) is logged and left in Redis, so nothing is lost and the rest still load."""
        stored: dict[Any, Any] = self.client.hgetall(self.key)
        subs = []
        for raw_id, raw in sorted(stored.items()):
            sub_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            try:
                subs.append(Subscription.from_json(json.loads(raw), id=sub_id))
            except (ValueError, SeqRepairError) as exc:
                log.error("stored subscription unreadable; skipped", subscription=sub_id,
                          error=getattr(exc, "message", str(exc)))
        return subs

    def save(self, subscription: Subscription) -> None:
        """Store ``subscription`` (replacing one of the same id)."""
        text = json.dumps(subscription.to_json(), separators=(",", ":"), ensure_ascii=False)
        if not self.client.hexists(self.key, subscription.id):
            create_at_high_water(self.client, queue_durable(subscription.id))
        self.client.hset(self.key, subscription.id, text.encode())

    def remove(self, sub_id: str) -> None:
        """Forget subscription ``sub_id`` (nothing happens when it is not stored)."""
        self.client.hdel(self.key, sub_id)
        remove_position(self.client, queue_durable(sub_id))

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
