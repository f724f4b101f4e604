"""The topics the component has published, kept in Redis next to the journal (``GET /topics``
lists them again after a restart).

``seqrepair:topics`` is a set of topics, UTF-8. Topics are only ever added: the catalog lists
what was published, and the journal may still hold publications of a topic nobody publishes
any more. Topics declared on the command line (``serve --topic``) are not stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis

from seqrepair.core.errors import SeqRepairError
from seqrepair.core.topics import validate_topic
from seqrepair.journal.journal import bounded_client
from seqrepair.logs import get_logger

TOPICS_KEY = "seqrepair:topics"
SAVE_CHUNK = 1000
"""Most topics one SADD carries (a first store after a long outage may hold many)."""

log = get_logger("seqrepair.journal.topicstore")


class RedisTopicStore:
    """Load and add topics in one Redis set (redis-py is thread-safe)."""

    def __init__(self, client: redis.Redis, *, key: str = TOPICS_KEY) -> None:
        self.client = client
        self.key = key

    @classmethod
    def from_url(cls, url: str, **client_kwargs: Any) -> RedisTopicStore:
        """A store on a new client for ``url``."""
        return cls(bounded_client(url, 5.0, **client_kwargs))

    def load(self) -> list[str]:
        """Every stored topic, sorted. A member that is no topic (written by hand, say) is
        logged and left in Redis, so nothing is lost and the rest still load."""
        members: set[bytes] = self.client.smembers(self.key)  # type: ignore[assignment]
        topics = []
        for raw in members:
            try:
                topics.append(validate_topic(raw.decode("utf-8")))
            except (UnicodeDecodeError, SeqRepairError) as exc:
                log.error("stored topic unreadable; skipped", topic=repr(raw)[:200],
                          error=getattr(exc, "message", str(exc)))
        return sorted(topics)

    def save(self, topics: Iterable[str]) -> None:
        """Add ``topics`` to the set (those already in it stay as they are)."""
        # surrogatepass: a topic with a lone surrogate must not block the others for good
        # (load then skips it as unreadable)
        batch = [topic.encode("utf-8", "surrogatepass") for topic in topics]
        for first in range(0, len(batch), SAVE_CHUNK):
            self.client.sadd(self.key, *batch[first:first + SAVE_CHUNK])

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
