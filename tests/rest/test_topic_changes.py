"""Declaring and deleting a topic over the REST API, driven without sockets: ``PUT`` and
``DELETE /topics/<topic>`` (APEX ``pubsub:createtopic`` and ``pubsub:deletetopic``, the policy's
``create-topic`` and ``delete-topic``).

A PUT lists a topic before anything is published on it (201, 200 when it was listed); a
DELETE takes it out of the list (the journal keeps its publications). What the caller may not
list does not exist for it: DELETE answers 404 as for a topic nobody has, PUT 403 with the same
text whether it exists or not. A topic declared on the command line cannot be deleted (409).
"""

from __future__ import annotations

from typing import Any

import pytest

from seqrepair.core.catalog import TopicCatalog, TopicInfo
from seqrepair.core.policy import Policy
from seqrepair.rest.api import SubscriptionApi
from seqrepair.rest.catalog import SharedCatalog
from seqrepair.rest.manager import SubscriptionManager

from .conftest import call, new_manager
from .test_catalog import MemoryTopicStore

TOKENS = {"alice": "tokA", "bob": "tokB", "ops": "tokO", "maker": "tokM"}
POLICY = Policy.from_json({
    "allow": [
        {"actors": ["alice", "bob"], "operations": ["list-topics", "subscribe",
                                                    "create-subscription", "read-subscription"],
         "topics": ["/weather/#"]},
        {"actors": ["alice"], "operations": ["create-topic", "delete-topic"],
         "topics": ["/weather/#"]},
        {"actors": ["maker"], "operations": ["create-topic"], "topics": ["/#"]},
        {"actors": ["ops"], "operations": ["admin"]},
    ],
    "deny": [{"actors": ["alice"], "operations": ["list-topics"],
              "topics": ["/weather/secret/#"]}],
})
WIND = "/weather/wind/LEMD"


def as_(principal: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[principal]}"}


class Setup:
    def __init__(self, max_topics: int = 100) -> None:
        self.store = MemoryTopicStore("/weather/rain/LEMD", "/weather/secret/known")
        self.manager = new_manager(policy=lambda: POLICY)
        self.catalog = SharedCatalog(TopicCatalog(max_topics=max_topics),
                                     declared=["/weather/configured"], store=self.store)
        self.api = SubscriptionApi(self.manager, principal_tokens=TOKENS, topics=self.catalog)

    def __call__(self, principal: str, method: str, topic: str, body: Any = None,
                 headers: dict[str, str] | None = None) -> Any:
        return call(self.api, method, f"/topics/{topic.replace('/', '%2F')}", body,
                    {**as_(principal), **(headers or {})})


@pytest.fixture
def api() -> Setup:
    return Setup()


def test_a_put_declares_a_topic_201_then_200_and_it_is_listed_and_stored(api: Setup) -> None:
    api.manager.create({"id": "wind", "topic": "/weather/wind/*"}, "alice")
    created = api("alice", "PUT", WIND, {})
    assert created.status == 201
    assert created.header("Location") == "/topics/%2Fweather%2Fwind%2FLEMD"
    assert created.json() == {"topic": WIND, "declared": True, "configured": False,
                              "published": False, "subscriptions": ["wind"]}
    assert api.store.declared == {WIND}
    assert WIND in api.catalog.topics()
    again = api("alice", "PUT", WIND, b"", {"Content-Length": "0"})  # no body at all
    assert (again.status, again.json()) == (200, created.json())
    assert again.header("Location") is None
    # a published topic declared: 200, now declared too
    rain = api("alice", "PUT", "/weather/rain/LEMD")
    assert (rain.status, rain.json()["declared"], rain.json()["published"]) == (200, True, True)
    assert api.store.declared == {WIND, "/weather/rain/LEMD"}
    assert call(api.api, "GET", "/topics", None, as_("alice")).json()["topics"] == [
        "/weather/configured", "/weather/rain/LEMD", WIND]


def test_an_empty_body_needs_no_content_type_but_a_body_is_json_and_empty(api: Setup) -> None:
    assert api("alice", "PUT", WIND).status == 201  # call() sends no Content-Type
    for body, headers, status in [
        (b"{}", {"Content-Type": "text/plain"}, 415),
        (b"[]", {"Content-Type": "application/json"}, 400),
        ({"description": "wind"}, None, 400),
        (b"nope", {"Content-Type": "application/json"}, 400),
    ]:
        response = api("alice", "PUT", "/weather/other", body, headers)
        assert response.status == status, (body, response.json())
    assert "/weather/other" not in api.catalog.topics()


@pytest.mark.parametrize("topic", ["/weather/#", "/weather/*/LEMD", "weather", "/a//b", "/a b"])
def test_a_put_of_no_topic_is_400_and_declares_nothing(api: Setup, topic: str) -> None:
    response = api("alice", "PUT", topic, {})
    assert (response.status, response.json()["error"]) == (400, "invalid")
    assert api.store.declared == set()


def test_a_put_without_create_topic_is_403_and_declares_nothing(api: Setup) -> None:
    response = api("bob", "PUT", "/weather/new", {})
    assert (response.status, response.json()["error"]) == (403, "forbidden")
    assert api("alice", "PUT", "/sports/new", {}).status == 403  # outside its grant
    assert api("bob", "PUT", "/weather/rain/LEMD", {}).status == 403  # listed: still 403
    assert api.store.declared == set()
    assert api.catalog.topics() == ["/weather/configured", "/weather/rain/LEMD",
                                    "/weather/secret/known"]


def test_a_put_of_a_topic_the_caller_may_not_list_is_403_whether_it_exists_or_not(
    api: Setup,
) -> None:
    known = api("alice", "PUT", "/weather/secret/known", {})
    unknown = api("alice", "PUT", "/weather/secret/unknown", {})
    assert known.status == unknown.status == 403
    assert known.json()["message"].replace("known", "X") == unknown.json()[
        "message"].replace("unknown", "X")
    assert known.json()["expected"] == unknown.json()["expected"]
    # create-topic without list-topics: refused too, else 201 or 200 would tell
    assert api("maker", "PUT", "/sports/new", {}).status == 403
    assert api.store.declared == set()
    assert api.catalog.get("/weather/secret/known") == TopicInfo("/weather/secret/known",
                                                                 published=True)


def test_an_administrator_declares_and_deletes_anything(api: Setup) -> None:
    assert api("ops", "PUT", "/sports/new", {}).status == 201
    assert api("ops", "DELETE", "/sports/new").status == 200
    assert api("ops", "DELETE", "/weather/secret/known").status == 200
    assert api.store.stored == {"/weather/rain/LEMD"}


def test_a_delete_takes_the_topic_out_of_the_list_and_the_store(api: Setup) -> None:
    api("alice", "PUT", WIND, {})
    api.catalog.learn(WIND)
    deleted = api("alice", "DELETE", WIND)
    assert (deleted.status, deleted.json()) == (200, {
        "topic": WIND, "declared": True, "configured": False, "published": True,
        "subscriptions": []})
    assert api.store.declared == set()
    assert WIND not in api.catalog.known
    assert api("alice", "GET", WIND).status == 404
    assert api("alice", "DELETE", WIND).status == 404
    assert api.catalog.learn(WIND)  # published again: listed again
    assert api("alice", "GET", WIND).json()["published"] is True


def test_a_delete_of_a_topic_not_listed_or_not_listable_is_404_alike(api: Setup) -> None:
    hidden = api("alice", "DELETE", "/weather/secret/known")
    nowhere = api("alice", "DELETE", "/weather/secret/nowhere")
    assert hidden.status == nowhere.status == 404
    assert hidden.json()["error"] == "notfound"
    assert hidden.json()["message"].replace("known", "X") == nowhere.json()[
        "message"].replace("nowhere", "X")
    assert api.store.stored == {"/weather/rain/LEMD", "/weather/secret/known"}


def test_a_delete_without_delete_topic_is_403(api: Setup) -> None:
    response = api("bob", "DELETE", "/weather/rain/LEMD")
    assert (response.status, response.json()["error"]) == (403, "forbidden")
    assert "/weather/rain/LEMD" in api.store.stored


def test_a_topic_declared_on_the_command_line_cannot_be_deleted_409(api: Setup) -> None:
    response = api("alice", "DELETE", "/weather/configured")
    assert (response.status, response.json()["error"]) == (409, "conflict")
    assert "serve --topic" in response.json()["message"]
    assert "/weather/configured" in api.catalog.topics()
    assert api("alice", "PUT", "/weather/configured", {}).status == 200
    assert api.store.declared == set()  # the command line stays its home


def test_a_full_catalog_refuses_a_declaration_409() -> None:
    api = Setup(max_topics=3)
    response = api("alice", "PUT", "/weather/new", {})
    assert (response.status, response.json()["error"]) == (409, "conflict")
    assert api("alice", "DELETE", "/weather/rain/LEMD").status == 200
    assert api("alice", "PUT", "/weather/new", {}).status == 201


def test_a_store_that_fails_is_503_and_nothing_changed(api: Setup) -> None:
    api.store.failure = ConnectionError("Redis is down")
    api.api.unavailable = (ConnectionError,)
    for method, topic in (("PUT", WIND), ("DELETE", "/weather/rain/LEMD")):
        response = api("alice", method, topic, {} if method == "PUT" else None)
        assert (response.status, response.json()["error"]) == (503, "unavailable")
    api.store.failure = None
    assert api.catalog.topics() == ["/weather/configured", "/weather/rain/LEMD",
                                    "/weather/secret/known"]
    assert (api.store.declared, api.store.stored) == (
        set(), {"/weather/rain/LEMD", "/weather/secret/known"})


def test_without_a_policy_anyone_declares_and_deletes(manager: SubscriptionManager) -> None:
    api = SubscriptionApi(manager, topics=SharedCatalog())
    assert call(api, "PUT", "/topics//a/b", {}).status == 201
    assert call(api, "DELETE", "/topics//a/b").status == 200
    assert call(api, "GET", "/topics").json()["topics"] == []
