"""The topics of the catalog, kept in Redis next to the journal (``GET /topics`` lists them
again after a restart).

``seqrepair:topics`` is a set of the topics the component has published, UTF-8;
``seqrepair:topics:declared`` one of the topics declared through the REST API
(``PUT /topics/<topic>``) ahead of any publication. Published topics are added as the
component learns them; a topic leaves both sets only when it is deleted
(``DELETE /topics/<topic>``: the journal keeps its publications, retention governs them).
Topics declared on the command line (``serve --topic``) are not stored.
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
DECLARED_SUFFIX = ":declared"
"""The declared topics' set is the published topics' key with this suffix."""
SAVE_CHUNK = 1000
"""Most topics one SADD carries (a first store after a long outage may hold many)."""

log = get_logger("seqrepair.journal.topicstore")


class RedisTopicStore:
    """Load, add and remove topics in two Redis sets, the published and the declared ones
    (``key`` and ``key + ":declared"``; redis-py is thread-safe)."""

    def __init__(self, client: redis.Redis, *, key: str = TOPICS_KEY) -> None:
        self.client = client
        self.key = key
        self.declared_key = key + DECLARED_SUFFIX

    @classmethod
    def from_url(cls, url: str, **client_kwargs: Any) -> RedisTopicStore:
        """A store on a new client for ``url``."""
        return cls(bounded_client(url, 5.0, **client_kwargs))

    def load(self) -> list[str]:
        """Every stored published topic, sorted. A member that is no topic (written by hand,
        say) is logged and left in Redis, so nothing is lost and the rest still load."""
        return self._members(self.key)

    def load_declared(self) -> list[str]:
        """Every stored declared topic, sorted (unreadable members as for :meth:`load`)."""
        return self._members(self.declared_key)

    def _members(self, key: str) -> list[str]:
        members: set[bytes] = self.client.smembers(key)  # type: ignore[assignment]
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

    def declare(self, topic: str) -> None:
        """Add ``topic`` to the declared topics."""
        self.client.sadd(self.declared_key, topic.encode("utf-8", "surrogatepass"))

    def remove(self, topic: str) -> None:
        """Take ``topic`` out of both sets, at once (one MULTI/EXEC)."""
        member = topic.encode("utf-8", "surrogatepass")
        with self.client.pipeline(transaction=True) as pipe:
            pipe.srem(self.key, member)
            pipe.srem(self.declared_key, member)
            pipe.execute()

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
