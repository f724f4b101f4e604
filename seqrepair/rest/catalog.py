"""The topic catalog shared by the component, which learns topics, and the REST API's threads,
which list them (``GET /topics``).

The component's event loop calls :meth:`SharedCatalog.learn` for a topic it fans out that is
not in :attr:`SharedCatalog.known` yet; that test is a set lookup, done without the lock (only
that thread adds published topics). A new topic is kept in Redis (a :class:`TopicStore`) by a
thread of the catalog's own, so the event loop never waits for Redis: when the store fails,
the topic stays listed and the writer tries again with a growing delay (up to
``retry_max``). A topic learned in the instant before a crash may thus not be stored; it is
stored again when it is next published.

Topics declared by the operator (``serve --topic``) are listed but not stored: the command
line is their home, as it is for configured subscriptions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Set
from types import TracebackType
from typing import Any, Protocol

from seqrepair.core.catalog import TopicCatalog, TopicInfo
from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.topics import TopicPattern
from seqrepair.logs import get_logger

log = get_logger("seqrepair.rest.catalog")


class TopicStore(Protocol):
    """Where published topics are kept (see
    :class:`~seqrepair.journal.topicstore.RedisTopicStore`)."""

    def load(self) -> list[str]:
        """Every stored topic."""

    def save(self, topics: list[str]) -> None:
        """Store ``topics`` (those already stored are left as they are)."""


class SharedCatalog:
    """A thread-safe :class:`~seqrepair.core.catalog.TopicCatalog`, kept in a ``store``.

    ``declared`` topics are declared first, then the store's topics are loaded (its errors
    raise from here: the caller decides whether to wait for it). ``retry``: the first delay
    after the store failed, doubled at each failure in a row up to ``retry_max`` seconds.
    """

    def __init__(self, catalog: TopicCatalog | None = None, *, declared: Iterable[str] = (),
                 store: TopicStore | None = None, retry: float = 0.5,
                 retry_max: float = 30.0) -> None:
        if not 0 < retry <= retry_max:
            raise InvalidConfigError("0 < retry <= retry_max is needed",
                                     expected="0 < retry <= retry_max", got=(retry, retry_max))
        self.catalog = catalog if catalog is not None else TopicCatalog()
        self.store = store
        self.retry = retry
        self.retry_max = retry_max
        self._lock = threading.Condition()
        self._unsaved: set[str] = set()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._told_refused = False
        for topic in declared:
            self.catalog.declare(topic)
        if store is not None:
            self.catalog.load(store.load())
            if self.catalog.refused:
                log.warning("topic catalog full: stored topics left out",
                            count=self.catalog.refused, max_topics=self.catalog.max_topics)
        self.known: Set[str] = self.catalog.published
        """The topics learned so far: the component's membership test before :meth:`learn`
        (read it in the thread that calls :meth:`learn` only)."""

    def learn(self, topic: str) -> bool:
        """Add ``topic``, seen in a publication; True when it is new (it is then stored in the
        background). Called from one thread only, the component's."""
        with self._lock:
            added = self.catalog.add(topic)
            if added and self.store is not None and not self._closed:
                self._unsaved.add(topic)
                self._start_writer()
                self._lock.notify_all()
        if not added and not self._told_refused and topic not in self.known:
            self._told_refused = True
            catalog = self.catalog
            log.warning("topic catalog full or topic too long: new topics are not listed",
                        topic=topic[:200], topics=len(catalog), max_topics=catalog.max_topics,
                        max_length=catalog.max_length)
        return added

    def topics(self, pattern: TopicPattern | str | None = None) -> list[str]:
        """Every topic, sorted (those ``pattern`` matches when one is given)."""
        with self._lock:
            return self.catalog.topics(pattern)

    def tree(self, pattern: TopicPattern | str | None = None) -> dict[str, Any]:
        """The SWIM "Topic Tree" answer to ``getTopics``."""
        with self._lock:
            return self.catalog.tree(pattern)

    def get(self, topic: str) -> TopicInfo:
        """What the catalog knows of ``topic`` (TopicNotFoundError when it is not listed)."""
        with self._lock:
            return self.catalog.get(topic)

    @property
    def unsaved(self) -> list[str]:
        """The topics learned but not stored yet, sorted."""
        with self._lock:
            return sorted(self._unsaved)

    # --- the writer ----------------------------------------------------------------------

    def _start_writer(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write, name="topic-store",
                                            daemon=True)
            self._writer.start()

    def _write(self) -> None:
        assert self.store is not None
        delay = self.retry
        failed = False
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._unsaved or self._closed)
                if not self._unsaved:
                    return
                batch = sorted(self._unsaved)
                closing = self._closed
            try:
                self.store.save(batch)
            except Exception as exc:  # whatever the store's failure, the topics stay listed
                failed = True
                if closing:
                    log.error("topics not stored before closing; stored again when next "
                              "published", count=len(batch), error=repr(exc)[:500])
                    return
                log.warning("topics not stored yet; trying again", count=len(batch),
                            retry_in=delay, error=repr(exc)[:500])
                with self._lock:
                    self._lock.wait_for(lambda: self._closed, timeout=delay)
                delay = min(2 * delay, self.retry_max)
                continue
            if failed:
                log.info("topics stored after a failure", count=len(batch))
                failed = False
            delay = self.retry
            with self._lock:
                self._unsaved.difference_update(batch)

    def close(self, timeout: float | None = 10.0) -> None:
        """Store what is unsaved (one last try) and stop the writer (waits ``timeout``)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            writer = self._writer
        if writer is not None:
            writer.join(timeout)

    def __enter__(self) -> SharedCatalog:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
