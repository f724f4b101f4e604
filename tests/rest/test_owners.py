"""Owner-only subscriptions and the access policy in the REST binding (sans-IO): another
principal's subscription is 404 like an id nobody has, a refused operation 403, and neither
changes anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from seqrepair.access import Access, load_policy
from seqrepair.core.catalog import TopicCatalog
from seqrepair.core.policy import InvalidPolicyError, Operation, Policy
from seqrepair.core.subscriptions import Subscription
from seqrepair.rest.api import SubscriptionApi
from seqrepair.rest.catalog import SharedCatalog

from .conftest import FlakyStore, call, new_manager, state

TOKENS = {"alice": "tokA", "bob": "tokB", "ops": "tokO"}
POLICY = Policy.from_json({
    "allow": [
        {"actors": ["alice", "bob"], "operations": ["*"], "topics": ["/weather/#"]},
        {"actors": ["ops"], "operations": ["admin"]},
    ],
    "deny": [{"actors": ["bob"], "operations": ["list-topics"], "topics": ["/weather/secret/#"]}],
})


def as_(principal: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[principal]}"}


@pytest.fixture
def setup() -> tuple[SubscriptionApi, Any, FlakyStore]:
    store = FlakyStore()
    manager = new_manager(store, policy=lambda: POLICY)
    topics = SharedCatalog(TopicCatalog(), declared=["/weather/wind/LEMD", "/weather/secret/x"])
    api = SubscriptionApi(manager, principal_tokens=TOKENS, topics=topics)
    return api, manager, store


def test_a_subscription_is_its_creators_and_others_get_404(
    setup: tuple[SubscriptionApi, Any, FlakyStore],
) -> None:
    api, manager, store = setup
    created = call(api, "POST", "/subscriptions", {"topic": "/weather/#"}, as_("alice"))
    assert created.status == 201
    assert created.json()["owner"] == "alice"
    assert store.saved["sub-1"]["owner"] == "alice"  # kept with it
    before = state(manager)
    for method, body in [("GET", None), ("PUT", {"topic": "/weather/wind/#"}),
                         ("PUT", {**created.json(), "subscription_status": "PAUSED"}),
                         ("DELETE", None)]:
        theirs = call(api, method, "/subscriptions/sub-1", body, as_("bob"))
        nobodys = call(api, method, "/subscriptions/sub-9", body, as_("bob"))
        assert theirs.status == nobodys.status == 404
        assert theirs.json()["error"] == "notfound"
        assert theirs.json()["message"].replace("sub-1", "X") == nobodys.json()[
            "message"].replace("sub-9", "X")
    assert state(manager) == before
    assert call(api, "GET", "/subscriptions", None, as_("bob")).json() == []
    assert [s["id"] for s in call(api, "GET", "/subscriptions", None, as_("alice")).json()] == [
        "sub-1"]
    assert call(api, "GET", "/subscriptions/sub-1", None, as_("ops")).status == 200  # admin
    # an owner cannot be claimed or changed
    assert call(api, "POST", "/subscriptions", {"topic": "/weather/#", "owner": "alice"},
                as_("bob")).status == 400
    assert call(api, "PUT", "/subscriptions/sub-1", {"topic": "/weather/#", "owner": "bob"},
                as_("alice")).status == 400
    assert call(api, "PUT", "/subscriptions/sub-1", {**created.json(), "topic": "/weather/a"},
                as_("alice")).json()["owner"] == "alice"
    assert call(api, "DELETE", "/subscriptions/sub-1", None, as_("alice")).status == 200


def test_the_policy_refuses_with_403_and_changes_nothing(
    setup: tuple[SubscriptionApi, Any, FlakyStore],
) -> None:
    api, manager, store = setup
    assert call(api, "POST", "/subscriptions", {"topic": "/#"}, as_("alice")).status == 403
    assert state(manager) == []
    assert store.saved == {}
    assert call(api, "POST", "/subscriptions", {"topic": "/weather/a"}, as_("alice")).status == 201
    refused = call(api, "PUT", "/subscriptions/sub-2", {"topic": "/sports/a"}, as_("alice"))
    assert refused.status == 403
    assert refused.json()["error"] == "forbidden"
    assert [s["topic"] for s in state(manager)] == ["/weather/a"]
    assert call(api, "GET", "/subscriptions", None, {"Authorization": "Bearer nope"}).status == 401
    assert call(api, "GET", "/subscriptions").status == 401


def test_topics_show_only_what_the_caller_may_list_and_its_own_ids(
    setup: tuple[SubscriptionApi, Any, FlakyStore],
) -> None:
    api, _, _ = setup
    call(api, "POST", "/subscriptions", {"id": "a", "topic": "/weather/#"}, as_("alice"))
    call(api, "POST", "/subscriptions", {"id": "b", "topic": "/weather/#"}, as_("bob"))
    assert call(api, "GET", "/topics", None, as_("alice")).json()["topics"] == [
        "/weather/secret/x", "/weather/wind/LEMD"]
    assert call(api, "GET", "/topics", None, as_("bob")).json()["topics"] == [
        "/weather/wind/LEMD"]
    assert call(api, "GET", "/topics//weather/secret/x", None, as_("bob")).status == 404
    assert call(api, "GET", "/topics//weather/wind/LEMD", None, as_("bob")).json()[
        "subscriptions"] == ["b"]
    assert call(api, "GET", "/topics//weather/wind/LEMD", None, as_("ops")).json()[
        "subscriptions"] == ["a", "b"]


def test_without_a_policy_everyone_may_and_unowned_subscriptions_are_everyones() -> None:
    # a configured queue is seen by whom its configuration names: "op" names nobody
    manager = new_manager(configured=[Subscription("op", "/#", configured=True),
                                      Subscription("open", "/#", configured=True,
                                                   attachers=["*"])])
    manager.registry.load([Subscription("legacy", "/a")])  # stored before owners
    api = SubscriptionApi(manager)
    assert call(api, "POST", "/subscriptions", {"topic": "/#"}).json()["owner"] == "anonymous"
    assert [s["id"] for s in call(api, "GET", "/subscriptions").json()] == [
        "legacy", "open", "sub-1"]


def test_the_policy_file_loads_reloads_and_keeps_the_old_one_on_a_bad_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[[allow]]\nactors = ["*"]\noperations = ["subscribe"]\n')
    access = Access(path)
    assert access().decide("x", Operation.SUBSCRIBE, "/a")
    assert not access().decide("x", Operation.PUBLISH, "/a")
    first = access()
    heard: list[Policy] = []
    access.on_change(heard.append)
    path.write_text("not = [toml")
    assert access.reload() is False
    assert access() is first
    assert heard == []
    (tmp_path / "p.json").write_text('{"allow": [{"actors": ["a"], "operations": ["admin"]}]}')
    assert load_policy(tmp_path / "p.json").is_admin("a")
    path.write_text('[[allow]]\nactors = ["a"]\noperations = ["admin"]\n')
    assert access.reload() is True
    assert access().is_admin("a")
    assert heard == [access()]
    with pytest.raises(InvalidPolicyError, match=r"nope\.toml"):
        Access(tmp_path / "nope.toml")
    assert Access(None)().permissive
    assert Access(None).reload() is False
