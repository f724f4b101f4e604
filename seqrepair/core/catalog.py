"""The topic catalog: the concrete topics a service offers for subscription (SWIM ``getTopics``).

A topic enters the catalog when it is seen in a publication (:meth:`TopicCatalog.add`) or when
it is declared ahead of any publication (:meth:`TopicCatalog.declare`): by the operator on the
command line (``configured``) or through the REST API (``PUT /topics/<topic>``). It leaves
only when removed (:meth:`TopicCatalog.remove`, ``DELETE /topics/<topic>``; a configured topic
cannot be: the command line is its home); a removed topic seen in a publication again is
learned again (removal lists nothing less than what is published from then on). The catalog
is bounded: past ``max_topics`` topics, or for a topic longer than ``max_length`` characters,
a new topic is not added and :attr:`TopicCatalog.refused` counts it (a publication never fails
for it: the catalog only lists).

The component calls :meth:`TopicCatalog.add` for the topics it fans out, so a topic already
seen in a publication costs one set lookup (:attr:`TopicCatalog.published` lets the caller do
that lookup itself and call :meth:`~TopicCatalog.add` only on a miss).

:meth:`TopicCatalog.tree` is the SWIM guidance's "Topic Tree" answer to ``getTopics``::

    {"type": "Tree",
     "patternMatching": {"wordSeparator": "/", "singleWordWildcard": "*",
                         "multiWordWildcard": "#"},
     "topics": ["/weather/precipitation/LEMD", "/weather/wind/LEMD"]}

No I/O and no locking: an adapter that shares a catalog between threads guards it
(:mod:`seqrepair.rest.catalog`).
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from typing import Any

import attrs

from seqrepair.core.config import check_positive_int
from seqrepair.core.errors import TopicConflictError, TopicNotFoundError
from seqrepair.core.topics import (
    ANY_WORDS,
    ONE_WORD,
    SEPARATOR,
    TopicPattern,
    topic_pattern,
    validate_topic,
)

MAX_TOPICS = 100_000
"""Most topics a catalog holds by default."""
MAX_TOPIC_LENGTH = 1024
"""Longest topic, in characters, a catalog takes by default."""

PATTERN_MATCHING = {
    "wordSeparator": SEPARATOR,
    "singleWordWildcard": ONE_WORD,
    "multiWordWildcard": ANY_WORDS,
}
"""The topic-tree syntax (:mod:`seqrepair.core.topics`) in the SWIM guidance's terms."""


@attrs.frozen
class TopicInfo:
    """What the catalog knows of one topic: ``declared`` ahead of any publication (by the
    operator or a REST client), ``configured`` (declared on the command line: it cannot be
    removed), ``published`` (seen in a publication, now or before a restart when the adapter
    keeps the catalog)."""

    topic: str
    declared: bool = False
    published: bool = False
    configured: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{"topic": ..., "declared": ..., "configured": ..., "published": ...}``."""
        return {"topic": self.topic, "declared": self.declared, "configured": self.configured,
                "published": self.published}


class TopicCatalog:
    """The concrete topics of a service, bounded by ``max_topics`` and ``max_length``.

    Every method raises :class:`~seqrepair.core.errors.InvalidTopicPatternError` for a value
    that is not a concrete topic (a pattern included) and then leaves the catalog as it was.
    """

    def __init__(self, *, max_topics: int = MAX_TOPICS,
                 max_length: int = MAX_TOPIC_LENGTH) -> None:
        check_positive_int("max_topics", max_topics)
        check_positive_int("max_length", max_length)
        self.max_topics = max_topics
        self.max_length = max_length
        self.refused = 0
        """Times a new topic was not added (the catalog full, or the topic too long); a
        refused topic is counted again each time it is offered."""
        self._info: dict[str, TopicInfo] = {}
        self._published: set[str] = set()
        self._sorted: list[str] | None = []

    def __len__(self) -> int:
        return len(self._info)

    def __contains__(self, topic: object) -> bool:
        return topic in self._info

    @property
    def full(self) -> bool:
        """Whether the catalog holds ``max_topics`` topics (a new one is refused)."""
        return len(self._info) >= self.max_topics

    @property
    def published(self) -> Set[str]:
        """The topics seen in a publication: the live set, for a membership test before
        :meth:`add` (not a copy; iterate it only where no :meth:`add` can run meanwhile)."""
        return self._published

    def add(self, topic: str) -> bool:
        """Record ``topic`` as seen in a publication; True when that is news (the topic was
        unknown, or only declared), False when it was known or is refused (:attr:`refused`)."""
        try:
            if topic in self._published:
                return False
        except TypeError:  # unhashable, so no topic: validate_topic says why
            pass
        return self._put(validate_topic(topic), published=True)

    def declare(self, topic: str, *, configured: bool = False) -> bool:
        """Record ``topic`` as declared (and ``configured``: the operator's command line);
        True when that is news (it was not declared, or not configured and now is), False
        when it was or is refused (:attr:`refused`)."""
        info = self._info.get(validate_topic(topic))
        if info is not None and info.declared and (info.configured or not configured):
            return False
        return self._put(topic, published=False, configured=configured)

    def has_room(self, topic: str) -> bool:
        """Whether ``topic`` (valid) is listed or could be: the catalog is not full and the
        topic not longer than ``max_length``."""
        return topic in self._info or (
            len(self._info) < self.max_topics and len(topic) <= self.max_length)

    def remove(self, topic: str) -> TopicInfo:
        """Take ``topic`` out of the catalog and return what it was; :class:`~seqrepair.core.
        errors.TopicNotFoundError` when the catalog does not hold it, :class:`~seqrepair.core.
        errors.TopicConflictError` when it is configured (the catalog is then unchanged).
        Seen in a publication again, it is news again (:meth:`add`)."""
        info = self.get(topic)
        if info.configured:
            raise TopicConflictError(
                f"topic {topic[:200]!r} is declared on the command line (serve --topic): "
                "remove it there", expected="a topic not declared on the command line",
                got=topic)
        del self._info[topic]
        self._published.discard(topic)
        self._sorted = None
        return info

    def _put(self, topic: str, *, published: bool, configured: bool = False) -> bool:
        """Mark ``topic`` (valid) published, or else declared (and maybe configured); False
        when it is refused."""
        info = self._info.get(topic)
        if info is None:
            if len(self._info) >= self.max_topics or len(topic) > self.max_length:
                self.refused += 1
                return False
            info = TopicInfo(topic)
            self._sorted = None
        if published:
            self._info[topic] = attrs.evolve(info, published=True)
            self._published.add(topic)
        else:
            self._info[topic] = attrs.evolve(info, declared=True,
                                             configured=info.configured or configured)
        return True

    def topics(self, pattern: TopicPattern | str | None = None) -> list[str]:
        """Every topic, sorted; only those ``pattern`` (a pattern or its text) matches when
        one is given."""
        if pattern is not None:
            pattern = topic_pattern(pattern)
        if self._sorted is None:
            self._sorted = sorted(self._info)
        if pattern is None:
            return list(self._sorted)
        return [topic for topic in self._sorted if pattern.matches(topic)]

    def get(self, topic: str) -> TopicInfo:
        """What the catalog knows of ``topic``; :class:`~seqrepair.core.errors.
        TopicNotFoundError` when the catalog does not hold it."""
        info = self._info.get(validate_topic(topic))
        if info is not None:
            return info
        raise TopicNotFoundError(f"no topic {topic[:200]!r} in the catalog", got=topic)

    def tree(self, pattern: TopicPattern | str | None = None) -> dict[str, Any]:
        """The SWIM "Topic Tree" form of :meth:`topics` (see the module docstring)."""
        return {"type": "Tree", "patternMatching": dict(PATTERN_MATCHING),
                "topics": self.topics(pattern)}

    def load(self, topics: Iterable[str], declared: Iterable[str] = ()) -> None:
        """Record ``topics`` as published and ``declared`` as declared (what an adapter kept
        from an earlier run), as :meth:`add` and :meth:`declare` would; all are checked
        first, so a refused load changes nothing."""
        topics, declared = list(topics), list(declared)
        for topic in (*topics, *declared):
            validate_topic(topic)
        for topic in topics:
            self.add(topic)
        for topic in declared:
            self.declare(topic)
