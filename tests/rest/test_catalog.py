"""The topic catalog shared by the component's event loop, which learns topics, and the REST
API's threads, which list them.

A new topic is listed at once and stored by a thread of the catalog's own: the event loop
never waits for the store, and a store that fails leaves the topic listed and is tried again
until it takes it. Topics declared on the command line are listed, not stored; topics declared
or deleted through the API are stored or taken out of the store at once, before the list
changes, and a deletion never races the writer's save of the same topic.
"""

from __future__ import annotations

import threading
import time

import pytest
import structlog
from polling import wait_for

from seqrepair.core.catalog import TopicCatalog, TopicInfo
from seqrepair.core.errors import (
    InvalidConfigError,
    InvalidTopicPatternError,
    TopicConflictError,
    TopicNotFoundError,
)
from seqrepair.rest.catalog import SharedCatalog


class MemoryTopicStore:
    """A TopicStore in two sets (``stored``: published, ``declared``); while ``failure`` is
    set, every call raises it; while ``gate`` is clear, save waits for it (a Redis that
    hangs)."""

    def __init__(self, *topics: str) -> None:
        self.stored = set(topics)
        self.declared: set[str] = set()
        self.saves: list[list[str]] = []
        self.failure: BaseException | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.saving = threading.Event()
        """Set once a save has begun."""

    def load(self) -> list[str]:
        if self.failure is not None:
            raise self.failure
        return sorted(self.stored)

    def load_declared(self) -> list[str]:
        if self.failure is not None:
            raise self.failure
        return sorted(self.declared)

    def declare(self, topic: str) -> None:
        if self.failure is not None:
            raise self.failure
        self.declared.add(topic)

    def remove(self, topic: str) -> None:
        if self.failure is not None:
            raise self.failure
        self.stored.discard(topic)
        self.declared.discard(topic)

    def save(self, topics: list[str]) -> None:
        self.saving.set()
        self.gate.wait(10)
        self.saves.append(list(topics))
        if self.failure is not None:
            raise self.failure
        self.stored.update(topics)


@pytest.fixture
def store() -> MemoryTopicStore:
    return MemoryTopicStore()


def test_a_new_topic_is_listed_at_once_and_stored_in_the_background(
    store: MemoryTopicStore,
) -> None:
    with SharedCatalog(store=store) as catalog:
        assert catalog.learn("/weather/wind/LEMD")
        assert catalog.topics() == ["/weather/wind/LEMD"]
        assert "/weather/wind/LEMD" in catalog.known
        assert wait_for(lambda: store.stored == {"/weather/wind/LEMD"})
        assert wait_for(lambda: catalog.unsaved == [])
        assert not catalog.learn("/weather/wind/LEMD")
        time.sleep(0.05)
    assert store.saves == [["/weather/wind/LEMD"]]  # a known topic is not stored again


def test_the_stored_topics_are_listed_from_the_start_and_not_stored_again(
    store: MemoryTopicStore,
) -> None:
    store.stored = {"/b", "/a"}
    with SharedCatalog(store=store) as catalog:
        assert catalog.topics() == ["/a", "/b"]
        assert catalog.known == {"/a", "/b"}
        assert not catalog.learn("/a")
    assert store.saves == []


def test_the_event_loop_does_not_wait_for_a_store_that_hangs(store: MemoryTopicStore) -> None:
    store.gate.clear()
    with SharedCatalog(store=store) as catalog:
        started = time.monotonic()
        for n in range(100):
            assert catalog.learn(f"/load/{n}")
        # a save waits 10 s for the gate: one learn() waiting for it would take that; the
        # bound only has to tell it from a loaded machine's stalls
        assert time.monotonic() - started < 5
        assert len(catalog.topics()) == 100
        store.gate.set()
        assert wait_for(lambda: len(store.stored) == 100)
    assert sum(len(batch) for batch in store.saves) == 100  # batched as they came


def test_a_store_that_fails_leaves_the_topic_listed_and_is_tried_again(
    store: MemoryTopicStore,
) -> None:
    with structlog.testing.capture_logs() as logs, \
            SharedCatalog(store=store, retry=0.01, retry_max=0.05) as catalog:
        store.failure = ConnectionError("Redis is down")
        assert catalog.learn("/weather/wind/LEMD")
        assert wait_for(lambda: len(store.saves) >= 3)
        assert catalog.topics() == ["/weather/wind/LEMD"]
        assert catalog.unsaved == ["/weather/wind/LEMD"]
        assert catalog.learn("/weather/wind/LFPG")  # learning goes on meanwhile
        store.failure = None
        assert wait_for(lambda: catalog.unsaved == [])
    assert store.stored == {"/weather/wind/LEMD", "/weather/wind/LFPG"}
    events = [e["event"] for e in logs]
    assert "topics not stored yet; trying again" in events
    assert "topics stored after a failure" in events


def test_close_makes_a_last_try_and_gives_up_with_an_error_when_the_store_still_fails(
    store: MemoryTopicStore,
) -> None:
    catalog = SharedCatalog(store=store, retry=30.0, retry_max=30.0)
    store.failure = ConnectionError("Redis is down")
    catalog.learn("/a")
    assert wait_for(lambda: len(store.saves) == 1)
    with structlog.testing.capture_logs() as logs:
        started = time.monotonic()
        catalog.close()
        assert time.monotonic() - started < 5  # the 30 s wait is cut short
    assert len(store.saves) == 2
    assert [e["log_level"] for e in logs
            if e["event"].startswith("topics not stored before closing")] == ["error"]
    assert not catalog.learn("/a")  # still listed
    assert catalog.learn("/b")  # listed, but no longer stored
    time.sleep(0.05)
    assert len(store.saves) == 2


def test_close_stores_what_is_unsaved(store: MemoryTopicStore) -> None:
    store.gate.clear()
    catalog = SharedCatalog(store=store)
    catalog.learn("/a")
    catalog.learn("/b")
    store.gate.set()
    catalog.close()
    assert store.stored == {"/a", "/b"}
    assert catalog.unsaved == []


def test_declared_topics_are_listed_but_stored_only_once_published(
    store: MemoryTopicStore,
) -> None:
    with SharedCatalog(store=store, declared=["/weather/wind/LEMD", "/flight/LEMD"]) as catalog:
        assert catalog.topics() == ["/flight/LEMD", "/weather/wind/LEMD"]
        assert catalog.get("/flight/LEMD") == TopicInfo("/flight/LEMD", declared=True,
                                                        configured=True)
        assert "/flight/LEMD" not in catalog.known
        assert catalog.learn("/flight/LEMD")
        assert wait_for(lambda: store.stored == {"/flight/LEMD"})
        assert catalog.get("/flight/LEMD") == TopicInfo("/flight/LEMD", declared=True,
                                                        published=True, configured=True)
    assert store.declared == set()  # the command line is their home


def test_without_a_store_topics_are_listed_in_memory() -> None:
    with SharedCatalog() as catalog:
        assert catalog.learn("/a")
        assert catalog.topics() == ["/a"]
        assert catalog.tree("/#")["topics"] == ["/a"]
        assert catalog.unsaved == []


def test_a_store_that_cannot_be_read_fails_the_construction(store: MemoryTopicStore) -> None:
    store.failure = ConnectionError("Redis is down")
    with pytest.raises(ConnectionError):
        SharedCatalog(store=store)


def test_a_bad_declared_or_stored_topic_is_refused() -> None:
    with pytest.raises(InvalidTopicPatternError):
        SharedCatalog(declared=["/weather/#"])
    with pytest.raises(InvalidTopicPatternError):
        SharedCatalog(store=MemoryTopicStore("/a", "nope"))


@pytest.mark.parametrize(("retry", "retry_max"), [(0, 1), (-1, 1), (2, 1)])
def test_bad_retry_delays_are_refused(retry: float, retry_max: float) -> None:
    with pytest.raises(InvalidConfigError):
        SharedCatalog(retry=retry, retry_max=retry_max)


def test_a_full_catalog_is_logged_once_and_publishing_goes_on(store: MemoryTopicStore) -> None:
    with structlog.testing.capture_logs() as logs, \
            SharedCatalog(TopicCatalog(max_topics=2), store=store) as catalog:
        assert [catalog.learn(t) for t in ("/a", "/b", "/c", "/d", "/c")] == [
            True, True, False, False, False]
        assert catalog.topics() == ["/a", "/b"]
        assert catalog.catalog.refused == 3
        assert wait_for(lambda: store.stored == {"/a", "/b"})
    full = [e for e in logs if e["event"].startswith("topic catalog full")]
    assert len(full) == 1
    assert (full[0]["log_level"], full[0]["topic"], full[0]["max_topics"]) == ("warning", "/c", 2)


def test_stored_topics_past_the_bound_are_left_out_with_a_warning() -> None:
    with structlog.testing.capture_logs() as logs:
        catalog = SharedCatalog(TopicCatalog(max_topics=2), store=MemoryTopicStore("/a", "/b",
                                                                                   "/c"))
    assert catalog.topics() == ["/a", "/b"]
    assert [e["count"] for e in logs if e["event"].startswith("topic catalog full")] == [1]


def test_readers_in_other_threads_see_a_consistent_listing_while_topics_are_learned(
    store: MemoryTopicStore,
) -> None:
    errors: list[BaseException] = []
    done = threading.Event()

    with SharedCatalog(store=store) as catalog:

        def read() -> None:
            try:
                while not done.is_set():
                    listed = catalog.topics()
                    assert listed == sorted(listed)
                    catalog.tree("/load/#")
            except BaseException as exc:  # reported below
                errors.append(exc)

        readers = [threading.Thread(target=read) for _ in range(4)]
        for reader in readers:
            reader.start()
        for n in range(5000):
            if f"/load/{n}" not in catalog.known:
                catalog.learn(f"/load/{n}")
        done.set()
        for reader in readers:
            reader.join(10)
        assert errors == []
        assert len(catalog.topics()) == 5000
        assert wait_for(lambda: len(store.stored) == 5000)


# --- declared and deleted through the API ----------------------------------------------------


def test_a_declared_topic_is_stored_then_listed_and_declaring_it_again_changes_nothing(
    store: MemoryTopicStore,
) -> None:
    with SharedCatalog(store=store) as catalog:
        assert catalog.declare("/weather/wind/LEMD") == (
            TopicInfo("/weather/wind/LEMD", declared=True), True)
        assert store.declared == {"/weather/wind/LEMD"}
        assert catalog.topics() == ["/weather/wind/LEMD"]
        assert "/weather/wind/LEMD" not in catalog.known  # its first publication is news
        store.declared.clear()
        assert catalog.declare("/weather/wind/LEMD") == (
            TopicInfo("/weather/wind/LEMD", declared=True), False)
        assert store.declared == set()  # declared already: not stored again
        catalog.learn("/a")
        assert catalog.declare("/a") == (TopicInfo("/a", declared=True, published=True), False)
        assert store.declared == {"/a"}


def test_a_configured_topic_declared_again_is_not_stored(store: MemoryTopicStore) -> None:
    with SharedCatalog(store=store, declared=["/flight/LEMD"]) as catalog:
        assert catalog.declare("/flight/LEMD") == (
            TopicInfo("/flight/LEMD", declared=True, configured=True), False)
    assert store.declared == set()


def test_declared_topics_are_loaded_from_the_store(store: MemoryTopicStore) -> None:
    store.stored = {"/a"}
    store.declared = {"/a", "/b"}
    with SharedCatalog(store=store) as catalog:
        assert catalog.topics() == ["/a", "/b"]
        assert catalog.get("/a") == TopicInfo("/a", declared=True, published=True)
        assert catalog.get("/b") == TopicInfo("/b", declared=True)
        assert catalog.known == {"/a"}


def test_a_declaration_the_store_refuses_changes_nothing(store: MemoryTopicStore) -> None:
    with SharedCatalog(store=store) as catalog:
        store.failure = ConnectionError("Redis is down")
        with pytest.raises(ConnectionError):
            catalog.declare("/a")
        assert catalog.topics() == []
        store.failure = None
        assert catalog.declare("/a")[1]


def test_a_full_catalog_or_a_long_topic_refuses_a_declaration_and_stores_nothing(
    store: MemoryTopicStore,
) -> None:
    with SharedCatalog(TopicCatalog(max_topics=1, max_length=8), store=store) as catalog:
        with pytest.raises(InvalidTopicPatternError) as long:
            catalog.declare("/12345678")
        assert long.value.expected == "at most 8 characters"
        catalog.learn("/a")
        with pytest.raises(TopicConflictError) as full:
            catalog.declare("/b")
        assert "full" in full.value.message
        with pytest.raises(InvalidTopicPatternError):
            catalog.declare("/b/#")
        assert catalog.declare("/a")[1] is False  # listed: no room needed
        assert store.declared == {"/a"}
        assert catalog.topics() == ["/a"]


def test_a_removed_topic_leaves_the_store_the_list_and_known_and_is_learned_again(
    store: MemoryTopicStore,
) -> None:
    store.stored = {"/a", "/b"}
    store.declared = {"/a", "/c"}
    with SharedCatalog(store=store) as catalog:
        known = catalog.known
        assert catalog.remove("/a") == TopicInfo("/a", declared=True, published=True)
        assert catalog.remove("/c") == TopicInfo("/c", declared=True)
        assert (store.stored, store.declared) == ({"/b"}, set())
        assert catalog.topics() == ["/b"]
        assert "/a" not in known  # the event loop's lookup sees it gone
        with pytest.raises(TopicNotFoundError):
            catalog.remove("/a")
        assert catalog.learn("/a")  # published again: listed and stored again
        assert wait_for(lambda: store.stored == {"/a", "/b"})
        assert catalog.get("/a") == TopicInfo("/a", published=True)


def test_a_removal_the_store_refuses_changes_nothing(store: MemoryTopicStore) -> None:
    store.stored = {"/a"}
    with SharedCatalog(store=store) as catalog:
        store.failure = ConnectionError("Redis is down")
        with pytest.raises(ConnectionError):
            catalog.remove("/a")
        assert catalog.topics() == ["/a"]
        assert "/a" in catalog.known
        store.failure = None
    assert store.stored == {"/a"}


def test_a_configured_topic_cannot_be_removed_and_stays_stored(
    store: MemoryTopicStore,
) -> None:
    store.stored = {"/flight/LEMD"}
    with SharedCatalog(store=store, declared=["/flight/LEMD"]) as catalog:
        with pytest.raises(TopicConflictError):
            catalog.remove("/flight/LEMD")
        assert catalog.get("/flight/LEMD") == TopicInfo("/flight/LEMD", declared=True,
                                                        published=True, configured=True)
    assert store.stored == {"/flight/LEMD"}


def test_a_removed_topic_is_dropped_from_what_the_writer_has_still_to_store(
    store: MemoryTopicStore,
) -> None:
    catalog = SharedCatalog(store=store, retry=30.0, retry_max=30.0)
    store.failure = ConnectionError("Redis is down")
    catalog.learn("/a")
    catalog.learn("/b")
    assert wait_for(lambda: len(store.saves) == 1)  # failed; the next try is 30 s away
    assert catalog.unsaved == ["/a", "/b"]
    store.failure = None
    catalog.remove("/a")
    assert catalog.unsaved == ["/b"]
    catalog.close()  # the last try stores what is left
    assert store.stored == {"/b"}
    assert store.saves[1:] == [["/b"]]


def test_a_topic_removed_while_the_writer_stores_it_does_not_come_back(
    store: MemoryTopicStore,
) -> None:
    store.gate.clear()  # the writer's save hangs, the topic in its batch
    with SharedCatalog(store=store) as catalog:
        catalog.learn("/a")
        assert store.saving.wait(10)  # the writer is in save(), waiting for the gate
        removal = threading.Thread(target=catalog.remove, args=("/a",))
        removal.start()
        removal.join(0.2)
        assert removal.is_alive()  # it waits for the save in flight
        store.gate.set()
        removal.join(10)
        assert not removal.is_alive()
        assert catalog.topics() == []
        assert catalog.unsaved == []
    assert store.saves == [["/a"]]
    assert store.stored == set()  # removed after the save, not before it
