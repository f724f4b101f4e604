"""The topic catalog shared by the component, which learns topics, and the REST API's threads,
which list, declare and delete them (``GET``, ``PUT``, ``DELETE`` of ``/topics``).

The component's event loop calls :meth:`SharedCatalog.learn` for a topic it fans out that is
not in :attr:`SharedCatalog.known` yet; that test is a set lookup, done without the lock (only
that thread adds published topics; :meth:`SharedCatalog.remove` takes one out of the same set,
and a set lookup and a removal are each atomic, so the lookup sees the topic or not, never a
broken set). A new topic is kept in Redis (a :class:`TopicStore`) by a thread of the catalog's
own, so the event loop never waits for Redis: when the store fails, the topic stays listed and
the writer tries again with a growing delay (up to ``retry_max``). A topic learned in the
instant before a crash may thus not be stored; it is stored again when it is next published.

A topic declared through the API (:meth:`SharedCatalog.declare`) or deleted
(:meth:`SharedCatalog.remove`) is stored or taken out of the store at once, by the API's
thread, before the catalog changes: when the store fails, the request fails and nothing
changed. These and the writer's saves take turns (one store lock), so a deletion never races a
save of the same topic: a deleted topic does not come back at the next restart, unless it is
published again (it is then learned again, as any new topic; one deleted while a publication
of it is being fanned out is learned again at its next publication).

Topics declared by the operator (``serve --topic``) are listed but not stored, and cannot be
deleted: the command line is their home, as it is for configured subscriptions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Set
from types import TracebackType
from typing import Any, Protocol

from seqrepair.core.catalog import TopicCatalog, TopicInfo
from seqrepair.core.errors import (
    InvalidConfigError,
    InvalidTopicPatternError,
    TopicConflictError,
)
from seqrepair.core.topics import TopicPattern, validate_topic
from seqrepair.logs import get_logger

log = get_logger("seqrepair.rest.catalog")


class TopicStore(Protocol):
    """Where published and declared topics are kept (see
    :class:`~seqrepair.journal.topicstore.RedisTopicStore`)."""

    def load(self) -> list[str]:
        """Every stored published topic."""

    def load_declared(self) -> list[str]:
        """Every stored declared topic."""

    def save(self, topics: list[str]) -> None:
        """Store ``topics`` as published (those already stored are left as they are)."""

    def declare(self, topic: str) -> None:
        """Store ``topic`` as declared."""

    def remove(self, topic: str) -> None:
        """Take ``topic`` out of the store, published and declared."""


class SharedCatalog:
    """A thread-safe :class:`~seqrepair.core.catalog.TopicCatalog`, kept in a ``store``.

    ``declared`` topics are the operator's (``configured``: declared first, never stored),
    then the store's published and declared topics are loaded (its errors raise from here:
    the caller decides whether to wait for it). ``retry``: the first delay
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
        self._store_lock = threading.Lock()
        """Held for a store write and the catalog change that goes with it (taken before
        ``_lock``, never while waiting on it): saves, declarations and removals take turns."""
        self._unsaved: set[str] = set()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._told_refused = False
        for topic in declared:
            self.catalog.declare(topic, configured=True)
        if store is not None:
            self.catalog.load(store.load(), store.load_declared())
            if self.catalog.refused:
                log.warning("topic catalog full: stored topics left out",
                            count=self.catalog.refused, max_topics=self.catalog.max_topics)
        self.known: Set[str] = self.catalog.published
        """The topics learned so far (the live set): the component's membership test before
        :meth:`learn`, without the lock (a lookup only: do not iterate it, :meth:`remove`
        may take a topic out meanwhile)."""

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

    def declare(self, topic: str) -> tuple[TopicInfo, bool]:
        """Declare ``topic`` (a REST client's ``PUT /topics/<topic>``): stored, then listed.
        Returns what the catalog now knows of it and whether it is new to the catalog (not
        listed before). A topic declared already is left as it is (nothing is stored).
        Raises :class:`~seqrepair.core.errors.InvalidTopicPatternError` for no valid topic
        or one longer than the catalog takes, :class:`~seqrepair.core.errors.
        TopicConflictError` when the catalog is full, and the store's error when it fails
        (nothing changed then)."""
        validate_topic(topic)
        with self._store_lock:
            with self._lock:
                listed = topic in self.catalog
                if listed and self.catalog.get(topic).declared:
                    return self.catalog.get(topic), False
                if not self.catalog.has_room(topic):
                    raise self._no_room(topic)
            if self.store is not None:
                self.store.declare(topic)
            with self._lock:
                self.catalog.declare(topic)
                if topic in self.catalog:
                    return self.catalog.get(topic), not listed
            # the component filled the catalog meanwhile: undo the store's write (the topic
            # was not listed, so not published: neither set is to keep it)
            if self.store is not None:
                self.store.remove(topic)
            raise self._no_room(topic)

    def _no_room(self, topic: str) -> InvalidTopicPatternError | TopicConflictError:
        """Why the catalog cannot take ``topic``: too long, or full."""
        catalog = self.catalog
        if len(topic) > catalog.max_length:
            return InvalidTopicPatternError(
                f"topic longer than the catalog takes ({catalog.max_length} characters)",
                expected=f"at most {catalog.max_length} characters", got=len(topic))
        return TopicConflictError(f"the topic catalog is full ({catalog.max_topics} topics)",
                                  expected=f"at most {catalog.max_topics} topics",
                                  got=len(catalog))

    def remove(self, topic: str) -> TopicInfo:
        """Delete ``topic`` (``DELETE /topics/<topic>``): taken out of the store, then out of
        the catalog (and out of what the writer has still to store); returns what it was.
        Raises :class:`~seqrepair.core.errors.TopicNotFoundError` when it is not listed,
        :class:`~seqrepair.core.errors.TopicConflictError` when it is configured, and the
        store's error when it fails (nothing changed then). Published again, it is learned
        again."""
        validate_topic(topic)
        with self._store_lock:
            with self._lock:
                if self.catalog.get(topic).configured:
                    self.catalog.remove(topic)  # raises TopicConflictError, changes nothing
            if self.store is not None:
                self.store.remove(topic)
            with self._lock:
                self._unsaved.discard(topic)
                return self.catalog.remove(topic)

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
            with self._store_lock:  # the batch is taken and saved with no removal between
                with self._lock:
                    batch = sorted(self._unsaved)
                    closing = self._closed
                if not batch:  # removed meanwhile
                    continue
                try:
                    self.store.save(batch)
                except Exception as exc:  # whatever the store's failure, the topics stay listed
                    error: str | None = repr(exc)[:500]
                else:
                    error = None
                    with self._lock:
                        self._unsaved.difference_update(batch)
            if error is not None:
                failed = True
                if closing:
                    log.error("topics not stored before closing; stored again when next "
                              "published", count=len(batch), error=error)
                    return
                log.warning("topics not stored yet; trying again", count=len(batch),
                            retry_in=delay, error=error)
                with self._lock:
                    self._lock.wait_for(lambda: self._closed, timeout=delay)
                delay = min(2 * delay, self.retry_max)
                continue
            if failed:
                log.info("topics stored after a failure", count=len(batch))
                failed = False
            delay = self.retry

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
