"""The subscription manager: the registry shared by the REST API's threads and the component.

A change is validated, then stored, and only then visible and announced; a change the store
refuses is undone and raises, so what the API confirmed survives a restart. Listeners hear every
change, in order, as ``(previous, current)``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import structlog

from seqrepair.core.errors import (
    InvalidSubscriptionError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
)
from seqrepair.core.subscriptions import Subscription, SubscriptionRegistry
from seqrepair.rest.manager import SubscriptionManager

Change = tuple[Subscription | None, Subscription | None]


class MemoryStore:
    """A store in a dict that records its calls and refuses them with OSError when told to."""

    def __init__(self, *subs: Subscription) -> None:
        self.saved: dict[str, Subscription] = {s.id: s for s in subs}
        self.calls: list[tuple[str, str]] = []
        self.failing = False

    def load(self) -> list[Subscription]:
        return list(self.saved.values())

    def save(self, subscription: Subscription) -> None:
        self.calls.append(("save", subscription.id))
        if self.failing:
            raise OSError("disk full")
        self.saved[subscription.id] = subscription

    def remove(self, sub_id: str) -> None:
        self.calls.append(("remove", sub_id))
        if self.failing:
            raise OSError("disk full")
        self.saved.pop(sub_id, None)


def counter() -> Callable[[], str]:
    numbers = iter(range(1, 1_000_000))
    return lambda: f"sub-{next(numbers)}"


def recorder(manager: SubscriptionManager) -> list[Change]:
    heard: list[Change] = []
    manager.listen(lambda previous, current: heard.append((previous, current)))
    return heard


CONFIGURED = Subscription("ops", "/weather/#", permtokens=["6747"], configured=True)


# --- changes are stored ---------------------------------------------------------------------


def test_create_update_and_delete_reach_the_store() -> None:
    store = MemoryStore()
    manager = SubscriptionManager(store=store, new_id=counter())
    created = manager.create({"topic": "/weather/wind/*"})
    assert created == Subscription("sub-1", "/weather/wind/*")
    assert store.saved == {"sub-1": created}
    updated = manager.update("sub-1", {"topic": "/weather/#", "subscription_status": "PAUSED"})
    assert store.saved == {"sub-1": updated}
    assert manager.delete("sub-1") == updated
    assert store.saved == {}
    assert store.calls == [("save", "sub-1"), ("save", "sub-1"), ("remove", "sub-1")]


def test_the_proposals_own_id_is_kept() -> None:
    store = MemoryStore()
    manager = SubscriptionManager(store=store, new_id=counter())
    assert manager.create({"topic": "/a", "id": "mine"}).id == "mine"
    assert list(store.saved) == ["mine"]


def test_get_find_and_query() -> None:
    manager = SubscriptionManager(new_id=counter())
    b = manager.create({"topic": "/b", "id": "b"})
    a = manager.create({"topic": "/a", "id": "a"})
    assert manager.query() == [a, b]
    assert manager.get("a") == a
    assert manager.find("a") == a
    assert manager.find("c") is None
    with pytest.raises(SubscriptionNotFoundError):
        manager.get("c")


def test_without_a_store_changes_are_kept_in_memory() -> None:
    manager = SubscriptionManager(new_id=counter())
    sub = manager.create({"topic": "/a"})
    assert manager.query() == [sub]
    manager.delete(sub.id)
    assert manager.query() == []


def test_the_default_ids_are_distinct_uuids() -> None:
    manager = SubscriptionManager()
    ids = {manager.create({"topic": "/a"}).id for _ in range(20)}
    assert len(ids) == 20
    assert all(len(i) == 36 and i.count("-") == 4 for i in ids)


def test_the_registry_given_is_used_with_its_limit() -> None:
    manager = SubscriptionManager(registry=SubscriptionRegistry(max_subscriptions=1),
                                  new_id=counter())
    manager.create({"topic": "/a"})
    with pytest.raises(SubscriptionConflictError):
        manager.create({"topic": "/b"})
    assert len(manager.query()) == 1


# --- what the registry refuses never reaches the store ---------------------------------------


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda m: m.create({"topic": "/x", "protocol": "HTTP"}), InvalidSubscriptionError),
        (lambda m: m.create({"topic": "/x", "id": "a"}), SubscriptionConflictError),
        (lambda m: m.update("a", {"topic": "/x", "durable": False}), InvalidSubscriptionError),
        (lambda m: m.update("nope", {"topic": "/x"}), SubscriptionNotFoundError),
        (lambda m: m.update("ops", {"topic": "/x"}), SubscriptionConflictError),
        (lambda m: m.delete("nope"), SubscriptionNotFoundError),
        (lambda m: m.delete("ops"), SubscriptionConflictError),
    ],
)
def test_a_refused_change_touches_neither_the_store_nor_the_listeners(
    call: Callable[[SubscriptionManager], object], error: type[Exception]
) -> None:
    store = MemoryStore(Subscription("a", "/a"))
    manager = SubscriptionManager(configured=[CONFIGURED], store=store, new_id=counter())
    heard = recorder(manager)
    before = manager.query()
    with pytest.raises(error) as excinfo:
        call(manager)
    assert excinfo.type is error
    assert manager.query() == before
    assert store.calls == []
    assert heard == []


# --- a change the store refuses is undone -----------------------------------------------------


STORED = Subscription("a", "/weather/#", filters=[{"dialect": "basic", "type": "suffix",
                                                   "property": "subject", "value": "/LEMD"}],
                      permtokens=["6747"], protocolsettings={"linkname": "a"})


@pytest.mark.parametrize(
    ("call", "operation"),
    [
        (lambda m: m.create({"topic": "/b"}), "save"),
        (lambda m: m.create({"topic": "/b", "id": "b"}), "save"),
        (lambda m: m.update("a", {"topic": "/weather/wind/*"}), "save"),
        (lambda m: m.update("a", {**STORED.to_json(), "subscription_status": "PAUSED"}), "save"),
        (lambda m: m.update("a", {**STORED.to_json(), "protocolsettings": {}}), "save"),
        (lambda m: m.delete("a"), "remove"),
    ],
)
def test_a_change_the_store_refuses_raises_and_is_undone(
    call: Callable[[SubscriptionManager], object], operation: str
) -> None:
    store = MemoryStore(STORED)
    manager = SubscriptionManager(store=store, new_id=counter())
    heard = recorder(manager)
    before = manager.query()
    store.failing = True
    with pytest.raises(OSError, match="disk full"):
        call(manager)
    assert [name for name, _ in store.calls] == [operation]
    assert manager.query() == before
    assert [s.to_json() for s in manager.query()] == [STORED.to_json()]
    assert store.saved == {"a": STORED}
    assert heard == []  # nothing happened, so nothing is announced

    store.failing = False  # the store is back: the same change now goes through
    call(manager)
    assert manager.query() != before
    assert sorted(store.saved.values(), key=lambda s: s.id) == manager.query()
    assert len(heard) == 1


def test_a_generated_id_refused_by_the_store_is_not_taken() -> None:
    store = MemoryStore()
    manager = SubscriptionManager(store=store, new_id=lambda: "same")
    store.failing = True
    with pytest.raises(OSError, match="disk full"):
        manager.create({"topic": "/a"})
    store.failing = False
    assert manager.create({"topic": "/a"}).id == "same"


# --- listeners -------------------------------------------------------------------------------


def test_listeners_hear_every_change_in_order_as_previous_and_current() -> None:
    manager = SubscriptionManager(store=MemoryStore(), new_id=counter())
    heard = recorder(manager)
    a = manager.create({"topic": "/a"})
    b = manager.create({"topic": "/b"})
    a2 = manager.update(a.id, {"topic": "/a", "subscription_status": "PAUSED"})
    a3 = manager.update(a.id, {"topic": "/a"})
    manager.delete(b.id)
    assert heard == [(None, a), (None, b), (a, a2), (a2, a3), (b, None)]


def test_every_listener_hears_each_change_and_only_changes_after_it_listens() -> None:
    manager = SubscriptionManager(new_id=counter())
    early = recorder(manager)
    a = manager.create({"topic": "/a"})
    late = recorder(manager)
    manager.delete(a.id)
    assert early == [(None, a), (a, None)]
    assert late == [(a, None)]


def test_unlisten_stops_the_calls() -> None:
    manager = SubscriptionManager(new_id=counter())
    heard: list[Change] = []

    def listener(previous: Subscription | None, current: Subscription | None) -> None:
        heard.append((previous, current))

    manager.listen(listener)
    a = manager.create({"topic": "/a"})
    manager.unlisten(listener)
    manager.delete(a.id)
    manager.unlisten(listener)  # no longer listening: nothing happens
    assert heard == [(None, a)]


def test_a_listener_that_raises_neither_fails_the_change_nor_silences_the_others() -> None:
    store = MemoryStore()
    manager = SubscriptionManager(store=store, new_id=counter())

    def broken(previous: Subscription | None, current: Subscription | None) -> None:
        raise RuntimeError("listener bug")

    manager.listen(broken)
    heard = recorder(manager)
    with structlog.testing.capture_logs() as logs:
        sub = manager.create({"topic": "/a"})
    assert manager.query() == [sub]
    assert store.saved == {sub.id: sub}
    assert heard == [(None, sub)]
    failures = [e for e in logs if e["event"] == "subscription listener failed"]
    assert len(failures) == 1
    assert failures[0]["subscription"] == sub.id
    assert failures[0]["log_level"] == "error"


# --- configured and stored subscriptions at start ---------------------------------------------


def test_configured_subscriptions_are_loaded_and_cannot_be_changed() -> None:
    store = MemoryStore()
    manager = SubscriptionManager(configured=[CONFIGURED], store=store, new_id=counter())
    heard = recorder(manager)
    assert manager.query() == [CONFIGURED]
    assert manager.get("ops").to_json()["configured"] is True
    with pytest.raises(SubscriptionConflictError):
        manager.update("ops", {"topic": "/other"})
    with pytest.raises(SubscriptionConflictError):
        manager.delete("ops")
    with pytest.raises(SubscriptionConflictError):
        manager.create({"topic": "/other", "id": "ops"})
    assert manager.query() == [CONFIGURED]
    assert store.saved == {}  # the command line is their home, not the store
    assert store.calls == []
    assert heard == []


def test_stored_subscriptions_load_after_the_configured_ones() -> None:
    twin = Subscription("ops", "/stolen/#")  # stored under the id of a configured one
    api = Subscription("api", "/weather/wind/*", status="PAUSED")
    store = MemoryStore(twin, api)
    manager = SubscriptionManager(configured=[CONFIGURED], store=store, new_id=counter())
    assert manager.query() == [api, CONFIGURED]
    assert manager.get("ops") == CONFIGURED
    assert store.saved == {"ops": twin, "api": api}  # loading changes nothing in the store
    assert store.calls == []


def test_stored_subscriptions_can_be_changed() -> None:
    store = MemoryStore(Subscription("api", "/a"))
    manager = SubscriptionManager(store=store, new_id=counter())
    assert manager.update("api", {"topic": "/b"}) == Subscription("api", "/b")
    assert store.saved == {"api": Subscription("api", "/b")}


# --- threads ------------------------------------------------------------------------------------


class SlowStore(MemoryStore):
    """Yields to other threads in the middle of every save, to open any race there is."""

    def save(self, subscription: Subscription) -> None:
        time.sleep(0)
        super().save(subscription)


def test_concurrent_creates_all_land_with_distinct_ids() -> None:
    threads, each = 8, 25
    issued = [0]

    def racy_new_id() -> str:
        """Not thread-safe on its own: the manager must call it under its lock."""
        n = issued[0]
        time.sleep(0)
        issued[0] = n + 1
        return f"sub-{n}"

    store = SlowStore()
    manager = SubscriptionManager(store=store, new_id=racy_new_id)
    heard = recorder(manager)
    start = threading.Barrier(threads)
    created: list[Subscription] = []
    errors: list[BaseException] = []

    def work(t: int) -> None:
        start.wait()
        for i in range(each):
            try:
                created.append(manager.create({"topic": f"/t{t}/n{i}"}))
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert not any(w.is_alive() for w in workers)
    assert errors == []
    assert len(created) == threads * each
    assert len({s.id for s in created}) == threads * each
    assert len({str(s.topic) for s in created}) == threads * each
    assert len(manager.query()) == threads * each
    assert len(store.saved) == threads * each
    # announced in the order they were stored, each once
    assert [current.id for _, current in heard if current is not None] == \
        [sub_id for _, sub_id in store.calls]


def test_concurrent_updates_and_deletes_leave_store_and_manager_agreeing() -> None:
    store = SlowStore()
    manager = SubscriptionManager(store=store, new_id=counter())
    for n in range(40):
        manager.create({"topic": f"/t/{n}", "id": f"s{n}"})
    start = threading.Barrier(4)

    not_found: list[str] = []

    def pause_all() -> None:
        start.wait()
        for n in range(40):
            try:
                manager.update(f"s{n}", {"topic": f"/t/{n}", "subscription_status": "PAUSED"})
            except SubscriptionNotFoundError as exc:  # deleted by the other thread first
                not_found.append(exc.got)

    def delete_evens() -> None:
        start.wait()
        for n in range(0, 40, 2):
            manager.delete(f"s{n}")

    def read() -> None:
        start.wait()
        for _ in range(40):
            assert len(manager.query()) >= 20

    outcomes: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # reported below, not lost in the thread
            outcomes.append(exc)

    workers = [threading.Thread(target=run, args=(job,))
               for job in (pause_all, delete_evens, read, read)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert not any(w.is_alive() for w in workers)
    assert outcomes == []
    assert set(not_found) <= {f"s{n}" for n in range(0, 40, 2)}
    assert [s.id for s in manager.query()] == sorted(f"s{n}" for n in range(1, 40, 2))
    assert all(s.paused for s in manager.query())
    assert sorted(store.saved.values(), key=lambda s: s.id) == manager.query()


class HeldStore(MemoryStore):
    """A store whose save waits until the test lets it go (a Redis slow to answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()

    def save(self, subscription: Subscription) -> None:
        self.entered.set()
        assert self.go.wait(10)
        super().save(subscription)


def test_find_never_waits_for_a_change_being_stored_and_sees_it_once_stored() -> None:
    store = HeldStore()
    manager = SubscriptionManager(store=store, new_id=counter())
    creating = threading.Thread(target=manager.create, args=({"id": "slow", "topic": "/#"},))
    creating.start()
    try:
        assert store.entered.wait(10)
        started = time.monotonic()
        assert manager.find("slow") is None  # not stored yet: not there for the component
        assert time.monotonic() - started < 5  # and it did not wait for the store
    finally:
        store.go.set()
        creating.join(10)
    assert manager.find("slow") == Subscription("slow", "/#")


def test_find_does_not_see_a_change_the_store_refused() -> None:
    store = MemoryStore()
    manager = SubscriptionManager(store=store, new_id=counter())
    made = manager.create({"id": "kept", "topic": "/#"})
    store.failing = True
    with pytest.raises(OSError, match="disk full"):
        manager.update("kept", {"topic": "/weather/#"})
    with pytest.raises(OSError, match="disk full"):
        manager.delete("kept")
    assert manager.find("kept") == made
