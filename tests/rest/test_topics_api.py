"""The SWIM ``getTopics`` and ``getTopic`` operations: ``GET /topics`` and ``GET /topics/<topic>``,
driven without sockets (SubscriptionApi with a topic catalog).

``/topics`` answers the catalog in the guidance's "Topic Tree" form, optionally filtered by a
``pattern``; ``/topics/<topic>`` (encoded whole, or as it is after the prefix) answers what the
catalog knows of the topic and which subscriptions' topic patterns match it. ``/topics`` is
read-only; ``/topics/<topic>`` also takes PUT and DELETE (declaring and deleting a topic:
``test_topic_changes``). Both follow the subscription routes' rules for auth, Accept, HEAD,
OPTIONS and 405.
"""

from __future__ import annotations

from typing import Any

import pytest

from seqrepair.rest.api import SubscriptionApi
from seqrepair.rest.catalog import SharedCatalog
from seqrepair.rest.manager import SubscriptionManager

from .conftest import call, new_manager

TOPICS = ["/weather/wind/LFPG", "/weather/precipitation/LEMD", "/weather/wind/LEMD",
          "/weather/precipitation/LFPG", "/flight/LEMD"]
TREE_SYNTAX = {"wordSeparator": "/", "singleWordWildcard": "*", "multiWordWildcard": "#"}
READ_ONLY = "GET, HEAD, OPTIONS"
ONE_TOPIC = "GET, HEAD, PUT, DELETE, OPTIONS"


def error_of(response: Any) -> str:
    body = response.json()
    assert set(body) == {"error", "message", "expected", "got"}
    assert response.header("Content-Type") == "application/json; charset=utf-8"
    return str(body["error"])


@pytest.fixture
def catalog() -> SharedCatalog:
    catalog = SharedCatalog(declared=["/flight/LEMD"])
    for topic in TOPICS:
        catalog.learn(topic)
    return catalog


@pytest.fixture
def manager() -> SubscriptionManager:
    manager = new_manager()
    manager.create({"id": "wind", "topic": "/weather/wind/*"})
    manager.create({"id": "lemd", "topic": "/#/LEMD", "subscription_status": "PAUSED"})
    manager.create({"id": "rain-lfpg", "topic": "/weather/precipitation/LFPG"})
    manager.create({"id": "lfpg-only", "topic": "/weather/#", "filters": [
        {"dialect": "basic", "type": "suffix", "property": "subject", "value": "/LFPG"}]})
    return manager


@pytest.fixture
def api(manager: SubscriptionManager, catalog: SharedCatalog) -> SubscriptionApi:
    return SubscriptionApi(manager, topics=catalog)


# --- getTopics ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/topics", "/topics/", "/topics?limit=1", "/topics/#frag",
                                  "http://example.org/topics/"])
def test_get_topics_answers_the_topic_tree_sorted(api: SubscriptionApi, path: str) -> None:
    response = call(api, "GET", path)
    assert response.status == 200
    assert response.header("Content-Type") == "application/json; charset=utf-8"
    assert response.json() == {"type": "Tree", "patternMatching": TREE_SYNTAX,
                               "topics": sorted(TOPICS)}


def test_an_empty_catalog_is_an_empty_tree(manager: SubscriptionManager) -> None:
    api = SubscriptionApi(manager, topics=SharedCatalog())
    assert call(api, "GET", "/topics").json() == {
        "type": "Tree", "patternMatching": TREE_SYNTAX, "topics": []}


def test_the_catalog_is_read_as_it_is_now(api: SubscriptionApi, catalog: SharedCatalog) -> None:
    catalog.learn("/a/new/topic")
    assert call(api, "GET", "/topics").json()["topics"][0] == "/a/new/topic"


@pytest.mark.parametrize(("query", "listed"), [
    ("pattern=%2Fweather%2Fwind%2F%2A", ["/weather/wind/LEMD", "/weather/wind/LFPG"]),
    ("pattern=/weather/wind/*", ["/weather/wind/LEMD", "/weather/wind/LFPG"]),
    ("pattern=%2F%23%2FLEMD", ["/flight/LEMD", "/weather/precipitation/LEMD",
                               "/weather/wind/LEMD"]),
    ("pattern=/weather/precipitation/LFPG", ["/weather/precipitation/LFPG"]),
    ("pattern=/nowhere/%23", []),
    ("other=1&pattern=/flight/%23&x", ["/flight/LEMD"]),
])
def test_a_pattern_lists_only_the_topics_it_matches(
    api: SubscriptionApi, query: str, listed: list[str]
) -> None:
    for path in ("/topics", "/topics/", "http://example.org/topics"):
        response = call(api, "GET", f"{path}?{query}")
        assert response.status == 200
        assert response.json() == {"type": "Tree", "patternMatching": TREE_SYNTAX,
                                   "topics": listed}


@pytest.mark.parametrize(("query", "got"), [
    ("pattern=weather", "weather"),
    ("pattern=", ""),
    ("pattern", ""),
    ("pattern=/weather/wi%2Ad", "/weather/wi*d"),
    ("pattern=/weather/#", "/weather/"),  # a raw '#' starts a fragment: encode it
    ("pattern=/a+b", "/a b"),
    ("pattern=/a&pattern=/b", ["/a", "/b"]),
])
def test_a_bad_pattern_is_400_invalid(api: SubscriptionApi, query: str, got: Any) -> None:
    response = call(api, "GET", f"/topics?{query}")
    assert (response.status, error_of(response)) == (400, "invalid")
    assert response.json()["got"] == got


# --- getTopic -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "/topics/%2Fweather%2Fwind%2FLEMD", "/topics//weather/wind/LEMD",
    "/topics//weather/wind/LEMD/", "/topics/%2fweather%2Fwind%2FLEMD?x=1",
    "/topics//weather%2Fwind/LEMD", "http://example.org/topics/%2Fweather%2Fwind%2FLEMD",
])
def test_get_topic_answers_the_topic_and_the_subscriptions_that_match_it(
    api: SubscriptionApi, path: str
) -> None:
    response = call(api, "GET", path)
    assert response.status == 200
    assert response.json() == {"topic": "/weather/wind/LEMD", "declared": False,
                               "configured": False, "published": True,
                               "subscriptions": ["lemd", "wind"]}


def test_a_subscription_whose_topic_filters_refuse_the_topic_is_not_listed(
    api: SubscriptionApi,
) -> None:
    assert call(api, "GET", "/topics//weather/wind/LFPG").json()["subscriptions"] == [
        "lfpg-only", "wind"]
    assert call(api, "GET", "/topics//weather/precipitation/LFPG").json()["subscriptions"] == [
        "lfpg-only", "rain-lfpg"]


def test_a_declared_topic_says_so_and_a_topic_nobody_wants_has_no_subscriptions(
    api: SubscriptionApi, catalog: SharedCatalog, manager: SubscriptionManager
) -> None:
    assert call(api, "GET", "/topics//flight/LEMD").json() == {
        "topic": "/flight/LEMD", "declared": True, "configured": True, "published": True,
        "subscriptions": ["lemd"]}
    manager.delete("lemd")
    assert call(api, "GET", "/topics//weather/precipitation/LEMD").json()["subscriptions"] == []


def test_a_topic_in_utf8_is_found_encoded(api: SubscriptionApi, catalog: SharedCatalog) -> None:
    catalog.learn("/m\u00e9t\u00e9o/vent")
    response = call(api, "GET", "/topics/%2Fm%C3%A9t%C3%A9o%2Fvent")
    assert response.json()["topic"] == "/m\u00e9t\u00e9o/vent"
    assert call(api, "GET", "/topics?pattern=/m%C3%A9t%C3%A9o/%23").json()["topics"] == [
        "/m\u00e9t\u00e9o/vent"]


@pytest.mark.parametrize("path", ["/topics//weather/wind/LEBL", "/topics/%2Fweather",
                                  "/topics//weather/wind/LEMD/x", "/topics/%2F%FF"])
def test_a_topic_the_catalog_does_not_list_is_404_notfound(api: SubscriptionApi,
                                                           path: str) -> None:
    response = call(api, "GET", path)
    assert (response.status, error_of(response)) == (404, "notfound")


@pytest.mark.parametrize(("path", "got"), [
    ("/topics/weather", "weather"),
    ("/topics//weather/%23", "/weather/#"),
    ("/topics/%2Fweather%2Fwind%2F%2A", "/weather/wind/*"),
    ("/topics//", "/"),
    ("/topics///", "/"),  # the raw trailing '/' is the optional one
    ("/topics//weather//wind", "/weather//wind"),
    ("/topics//weather/%2F", "/weather//"),
    ("/topics//a%20b", "/a b"),
])
def test_a_value_that_is_no_topic_is_400_invalid(api: SubscriptionApi, path: str,
                                                 got: str) -> None:
    response = call(api, "GET", path)
    assert (response.status, error_of(response)) == (400, "invalid")
    assert response.json()["got"] == got


# --- the rules every route follows ------------------------------------------------------------


@pytest.mark.parametrize(("path", "allow"), [("/topics", READ_ONLY),
                                            ("/topics//weather/wind/LEMD", ONE_TOPIC),
                                            ("/topics//not/listed", ONE_TOPIC)])
def test_options_names_the_methods(api: SubscriptionApi, path: str, allow: str) -> None:
    response = call(api, "OPTIONS", path)
    assert (response.status, response.body, response.headers) == (
        204, b"", (("Allow", allow),))


@pytest.mark.parametrize("path", ["/topics", "/topics//weather/wind/LEMD",
                                  "/topics//weather/wind/LEBL", "/topics?pattern=x"])
def test_head_is_a_get_without_the_body(api: SubscriptionApi, path: str) -> None:
    get, head = call(api, "GET", path), call(api, "HEAD", path)
    assert (head.status, head.headers, head.body) == (get.status, get.headers, b"")


@pytest.mark.parametrize(("method", "path", "allow"), [
    *((method, "/topics", READ_ONLY) for method in ("POST", "PUT", "DELETE", "PATCH", "get")),
    *((method, "/topics//weather/wind/LEMD", ONE_TOPIC) for method in ("POST", "PATCH", "put")),
])
def test_a_method_not_offered_is_405_with_allow_and_changes_nothing(
    api: SubscriptionApi, catalog: SharedCatalog, method: str, path: str, allow: str
) -> None:
    response = call(api, method, path, {"topic": "/x"})
    assert (response.status, error_of(response)) == (405, "method-not-allowed")
    assert response.header("Allow") == allow
    assert catalog.topics() == sorted(TOPICS)


@pytest.mark.parametrize("accept", ["application/xml", "application/json;q=0"])
def test_an_accept_header_that_admits_no_json_is_406(api: SubscriptionApi, accept: str) -> None:
    for path in ("/topics", "/topics//weather/wind/LEMD"):
        response = call(api, "GET", path, headers={"Accept": accept})
        assert (response.status, error_of(response)) == (406, "not-acceptable")
    # the spec's own example asks for JSON or XML
    response = call(api, "GET", "/topics", headers={"Accept": "application/json, "
                                                              "application/xml"})
    assert response.status == 200


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic czNjcjN0LXQwa2Vu"])
def test_without_the_right_bearer_token_topics_are_401(
    manager: SubscriptionManager, catalog: SharedCatalog, authorization: str | None
) -> None:
    guarded = SubscriptionApi(manager, token="s3cr3t-t0ken", topics=catalog)
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in (("GET", "/topics"), ("GET", "/topics//weather/wind/LEMD"),
                         ("GET", "/topics//nowhere"), ("OPTIONS", "/topics")):
        response = call(guarded, method, path, headers=headers)
        assert (response.status, error_of(response)) == (401, "unauthorized")
        assert response.header("WWW-Authenticate") == 'Bearer realm="seqrepair"'
    good = {"Authorization": "Bearer s3cr3t-t0ken"}
    assert call(guarded, "GET", "/topics", headers=good).json()["topics"] == sorted(TOPICS)


@pytest.mark.parametrize("path", ["/topics", "/topics/", "/topics//weather/wind/LEMD",
                                  "/topics?pattern=/%23"])
def test_without_a_catalog_topics_are_an_unknown_path(
    manager: SubscriptionManager, path: str
) -> None:
    response = call(SubscriptionApi(manager), "GET", path)
    assert (response.status, error_of(response)) == (404, "notfound")
    assert response.json()["expected"] == ["/subscriptions", "/subscriptions/<id>"]


@pytest.mark.parametrize("path", ["/topic", "/topicsx", "/Topics", "/topicsx/%2Fa"])
def test_a_path_near_topics_is_an_unknown_path(api: SubscriptionApi, path: str) -> None:
    response = call(api, "GET", path)
    assert (response.status, error_of(response)) == (404, "notfound")
    assert response.json()["expected"] == ["/subscriptions", "/subscriptions/<id>", "/topics",
                                           "/topics/<topic>"]


def test_the_subscription_routes_are_unchanged_by_a_catalog(api: SubscriptionApi) -> None:
    assert [sub["id"] for sub in call(api, "GET", "/subscriptions").json()] == [
        "lemd", "lfpg-only", "rain-lfpg", "wind"]
    assert call(api, "GET", "/subscriptions/wind").json()["topic"] == "/weather/wind/*"
