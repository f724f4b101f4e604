"""The HTTP binding of the subscription interface, driven without sockets (SubscriptionApi).

Routes of the SWIM guidance and CloudEvents §3.3, every error status with its JSON ``error``
code, and the promise that a refused request changes nothing.
"""

from __future__ import annotations

import email.message
import json
from collections.abc import Callable
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.subscriptions import Subscription, SubscriptionRegistry
from seqrepair.rest.api import MAX_DETAIL, SubscriptionApi, error_response

from .conftest import JSON, FlakyStore, call, new_manager, state

Created = Callable[..., dict[str, Any]]
WIND = {"topic": "/weather/wind/*"}


def error_of(response: Any) -> str:
    body = response.json()
    assert set(body) == {"error", "message", "expected", "got"}
    assert response.header("Content-Type") == "application/json; charset=utf-8"
    return str(body["error"])


# --- the routes -----------------------------------------------------------------------------


def test_an_empty_collection_lists_as_an_empty_array(api: SubscriptionApi) -> None:
    response = call(api, "GET", "/subscriptions")
    assert (response.status, response.json()) == (200, [])
    assert response.header("Content-Type") == "application/json; charset=utf-8"
    assert response.header("Content-Length") == str(len(response.body)) == "2"


def test_post_creates_and_answers_the_realized_object_with_its_location(
    api: SubscriptionApi, store: FlakyStore
) -> None:
    response = call(api, "POST", "/subscriptions", WIND)
    assert response.status == 201
    assert response.header("Location") == "/subscriptions/sub-1"
    assert response.json() == {
        "id": "sub-1", "topic": "/weather/wind/*", "protocol": "AMQP", "protocolsettings": {},
        "sink": "/subscriptions/sub-1", "queue": "/subscriptions/sub-1", "filters": [],
        "config": {}, "subscription_status": "ACTIVE", "qos": "EXACTLY_ONCE",
        "durable": True, "permtokens": None, "configured": False, "owner": "anonymous",
    }
    assert store.saved["sub-1"] == response.json()


def test_post_keeps_the_id_the_proposal_names(api: SubscriptionApi) -> None:
    response = call(api, "POST", "/subscriptions", {"id": "wind-lemd", **WIND})
    assert (response.status, response.header("Location")) == (201, "/subscriptions/wind-lemd")


def test_body_is_compact_utf8(api: SubscriptionApi, created: Created) -> None:
    created("/météo/vent")
    body = call(api, "GET", "/subscriptions/sub-1").body
    assert '"topic":"/météo/vent"'.encode() in body
    assert b", " not in body
    assert b": " not in body


def test_get_lists_every_subscription_by_id(api: SubscriptionApi, created: Created) -> None:
    created(id="zulu")
    created(id="alpha")
    listed = call(api, "GET", "/subscriptions")
    assert [sub["id"] for sub in listed.json()] == ["alpha", "zulu"]


def test_get_one_subscription(api: SubscriptionApi, created: Created) -> None:
    sub = created()
    response = call(api, "GET", "/subscriptions/sub-1")
    assert (response.status, response.json()) == (200, sub)


def test_put_replaces_the_subscription(api: SubscriptionApi, created: Created) -> None:
    created()
    filters = [{"dialect": "basic", "type": "suffix", "property": "subject", "value": "/LEMD"}]
    response = call(api, "PUT", "/subscriptions/sub-1",
                    {"topic": "/weather/#", "filters": filters})
    assert response.status == 200
    assert (response.json()["topic"], response.json()["filters"]) == ("/weather/#", filters)
    assert call(api, "GET", "/subscriptions/sub-1").json() == response.json()


def test_pause_and_resume_are_a_put_of_subscription_status(
    api: SubscriptionApi, created: Created
) -> None:
    sub = created()
    paused = call(api, "PUT", "/subscriptions/sub-1", {**sub, "subscription_status": "PAUSED"})
    assert (paused.status, paused.json()["subscription_status"]) == (200, "PAUSED")
    resumed = call(api, "PUT", "/subscriptions/sub-1", {**sub, "subscription_status": "ACTIVE"})
    assert (resumed.status, resumed.json()) == (200, sub)


def test_what_get_returned_can_be_put_back_unchanged(
    api: SubscriptionApi, created: Created, store: FlakyStore
) -> None:
    created(permtokens=["6747", "12"], protocolsettings={"prefetch": 10},
            subscription_status="PAUSED",
            filters=[{"dialect": "basic", "type": "prefix", "property": "source",
                      "value": "feed."}])
    shown = call(api, "GET", "/subscriptions/sub-1")
    put = call(api, "PUT", "/subscriptions/sub-1", shown.body, {})
    assert (put.status, put.body) == (200, shown.body)
    assert store.saved["sub-1"] == shown.json()


def test_delete_answers_with_what_was_deleted(
    api: SubscriptionApi, created: Created, store: FlakyStore
) -> None:
    sub = created()
    deleted = call(api, "DELETE", "/subscriptions/sub-1")
    assert (deleted.status, deleted.json()) == (200, sub)
    assert call(api, "GET", "/subscriptions/sub-1").status == 404
    assert store.saved == {}


@pytest.mark.parametrize("path", [
    "/subscriptions/", "/subscriptions?limit=1", "/subscriptions/?x=1#frag",
    "http://example.org/subscriptions",
])
def test_the_collection_takes_a_trailing_slash_a_query_and_an_absolute_url(
    api: SubscriptionApi, created: Created, path: str
) -> None:
    created()
    listed = call(api, "GET", path)
    assert listed.status == 200
    assert [sub["id"] for sub in listed.json()] == ["sub-1"]


@pytest.mark.parametrize("path", [
    "/subscriptions/sub-1/", "/subscriptions/sub-1?fields=all", "/subscriptions/sub%2D1",
    "/subscriptions/%73ub-1/",
])
def test_an_item_takes_a_trailing_slash_a_query_and_percent_encoding(
    api: SubscriptionApi, created: Created, path: str
) -> None:
    created()
    assert call(api, "GET", path).json()["id"] == "sub-1"


@pytest.mark.parametrize(("path", "allow"), [
    ("/subscriptions", "GET, HEAD, POST, OPTIONS"),
    ("/subscriptions/sub-1", "GET, HEAD, PUT, DELETE, OPTIONS"),
])
def test_options_names_the_methods_of_the_resource(
    api: SubscriptionApi, path: str, allow: str
) -> None:
    response = call(api, "OPTIONS", path)
    assert (response.status, response.body, response.headers) == (204, b"", (("Allow", allow),))


def test_head_is_a_get_without_the_body(api: SubscriptionApi, created: Created) -> None:
    created()
    get, head = call(api, "GET", "/subscriptions"), call(api, "HEAD", "/subscriptions")
    assert (head.status, head.headers, head.body) == (200, get.headers, b"")
    missing = call(api, "HEAD", "/subscriptions/nope")
    assert (missing.status, missing.body) == (404, b"")


def test_headers_are_looked_up_whatever_their_case_and_container(api: SubscriptionApi) -> None:
    headers = email.message.Message()
    headers["content-TYPE"] = "application/json"
    headers["ACCEPT"] = "application/json"
    assert api.handle("POST", "/subscriptions", headers, json.dumps(WIND).encode()).status == 201
    lower = {"content-type": "application/json"}
    assert api.handle("POST", "/subscriptions", lower, json.dumps(WIND).encode()).status == 201


# --- errors: status, code and body ----------------------------------------------------------


@pytest.mark.parametrize("path", [
    "/", "", "*", "/subscription", "/Subscriptions", "/topics", "/subscriptions/a/b",
    "/subscriptions//", "/subscriptions/sub-1//",
])
def test_an_unknown_path_is_notfound(api: SubscriptionApi, path: str) -> None:
    response = call(api, "GET", path)
    assert (response.status, error_of(response)) == (404, "notfound")


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_missing_subscription_is_notfound_and_put_does_not_create_it(
    api: SubscriptionApi, manager: Any, method: str
) -> None:
    response = call(api, method, "/subscriptions/nope", WIND if method == "PUT" else None)
    assert (response.status, error_of(response)) == (404, "notfound")
    assert response.json()["got"] == "nope"
    assert state(manager) == []


@pytest.mark.parametrize("segment", ["has%20space", "a%2Fb", "%FF", "-leading", "x" * 129])
def test_an_id_no_subscription_can_have_is_notfound(api: SubscriptionApi, segment: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        response = call(api, method, f"/subscriptions/{segment}",
                        WIND if method == "PUT" else None)
        assert (response.status, error_of(response)) == (404, "notfound")


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("PUT", "/subscriptions", "GET, HEAD, POST, OPTIONS"),
    ("DELETE", "/subscriptions", "GET, HEAD, POST, OPTIONS"),
    ("PATCH", "/subscriptions", "GET, HEAD, POST, OPTIONS"),
    ("POST", "/subscriptions/sub-1", "GET, HEAD, PUT, DELETE, OPTIONS"),
    ("PATCH", "/subscriptions/sub-1", "GET, HEAD, PUT, DELETE, OPTIONS"),
    ("get", "/subscriptions/sub-1", "GET, HEAD, PUT, DELETE, OPTIONS"),
])
def test_a_method_the_resource_does_not_offer_is_405_with_allow(
    api: SubscriptionApi, method: str, path: str, allow: str
) -> None:
    response = call(api, method, path, WIND)
    assert (response.status, error_of(response)) == (405, "method-not-allowed")
    assert response.header("Allow") == allow


@pytest.mark.parametrize("content_type", [
    None, "text/plain", "application/xml", "application/json; charset=latin-1",
    "application/jsonx", "application/json-patch+json",
])
def test_a_body_that_is_not_json_by_its_content_type_is_415(
    api: SubscriptionApi, manager: Any, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    for method, path in (("POST", "/subscriptions"), ("PUT", "/subscriptions/sub-1")):
        response = api.handle(method, path, headers, json.dumps(WIND).encode())
        assert (response.status, error_of(response)) == (415, "unsupported-media-type")
    assert state(manager) == []


@pytest.mark.parametrize("content_type", [
    "application/json", "Application/JSON", "application/json; charset=UTF-8",
    'application/json;charset="utf-8"',
])
def test_json_with_parameters_is_taken(api: SubscriptionApi, content_type: str) -> None:
    headers = {"Content-Type": content_type}
    assert api.handle("POST", "/subscriptions", headers, json.dumps(WIND).encode()).status == 201


@pytest.mark.parametrize("accept", [
    "application/xml", "text/html, text/plain", "application/json;q=0", "*/*;q=0",
    "application/json;q=0, */*", "application/*;q=0, */*;q=1", "application/json;q=2",
    "application/json;q=abc",
])
def test_an_accept_header_that_admits_no_json_is_406(api: SubscriptionApi, accept: str) -> None:
    response = call(api, "GET", "/subscriptions", headers={"Accept": accept})
    assert (response.status, error_of(response)) == (406, "not-acceptable")


@pytest.mark.parametrize("accept", [
    "application/json", "application/*", "*/*", "", "application/json, application/xml",
    "application/xml, application/json;q=0.1", "*/*;q=0, application/json",
    "text/html, */*;q=0.8", "APPLICATION/JSON; charset=utf-8; q=1.000",
])
def test_an_accept_header_that_admits_json_is_served(api: SubscriptionApi, accept: str) -> None:
    assert call(api, "GET", "/subscriptions", headers={"Accept": accept}).status == 200


def test_a_body_over_max_body_is_413(manager: Any) -> None:
    api = SubscriptionApi(manager, max_body=64)
    padded = json.dumps(WIND).encode().ljust(64)
    assert call(api, "POST", "/subscriptions", padded, JSON).status == 201
    response = call(api, "POST", "/subscriptions", padded + b" ", JSON)
    assert (response.status, error_of(response)) == (413, "payload-too-large")
    assert (response.json()["expected"], response.json()["got"]) == (64, 65)


@pytest.mark.parametrize("length", ["65", "00000000000000000000000000065", "9" * 5000])
def test_a_content_length_over_max_body_is_413_before_the_body_is_read(
    manager: Any, length: str
) -> None:
    api = SubscriptionApi(manager, max_body=64)
    response = call(api, "POST", "/subscriptions", b"", {**JSON, "Content-Length": length})
    assert (response.status, error_of(response)) == (413, "payload-too-large")


BAD_PROPOSALS: list[tuple[str, bytes]] = [
    ("truncated JSON", b'{"topic": "/a"'),
    ("empty body", b""),
    ("not UTF-8", b'{"topic": "/caf\xe9"}'),
    ("UTF-16", json.dumps(WIND).encode("utf-16")),
    ("a byte-order mark", b"\xef\xbb\xbf" + json.dumps(WIND).encode()),
    ("NaN", b'{"topic": "/a", "protocolsettings": {"x": NaN}}'),
    ("a lone surrogate", b'{"topic": "/a/\\ud800"}'),
    ("deep nesting", b'{"topic": "/a", "protocolsettings": {"x": ' + b"[" * 40 + b"]" * 40
     + b"}}"),
    ("deeper than the parser goes", b"[" * 30_000 + b"]" * 30_000),
    ("an array", b'[{"topic": "/a"}]'),
    ("no topic", b'{"subscription_status": "PAUSED"}'),
    ("a bad topic", b'{"topic": "weather"}'),
    ("an unknown member", b'{"topic": "/a", "colour": "red"}'),
    ("an unknown status", b'{"topic": "/a", "subscription_status": "DELETED"}'),
    ("a push protocol", b'{"topic": "/a", "protocol": "HTTP"}'),
    ("a bad filter", b'{"topic": "/a", "filters": [{"dialect": "basic", "type": "regex", '
     b'"property": "subject", "value": "x"}]}'),
    ("a misspelt filter property", b'{"topic": "/a", "filters": [{"dialect": "basic", '
     b'"type": "exact", "property": "subjekt", "value": "x"}]}'),
]


@pytest.mark.parametrize(("why", "body"), BAD_PROPOSALS, ids=[why for why, _ in BAD_PROPOSALS])
@pytest.mark.parametrize(("method", "path"), [("POST", "/subscriptions"),
                                              ("PUT", "/subscriptions/sub-1")])
def test_a_bad_body_is_400_invalid_and_changes_nothing(
    api: SubscriptionApi, created: Created, store: FlakyStore, manager: Any,
    why: str, body: bytes, method: str, path: str,
) -> None:
    created()
    before, stored = state(manager), dict(store.saved)
    response = api.handle(method, path, {"Content-Type": "application/json"}, body)
    assert (response.status, error_of(response)) == (400, "invalid")
    assert (state(manager), store.saved) == (before, stored)


def test_a_taken_id_is_a_conflict_and_changes_nothing(
    api: SubscriptionApi, created: Created, manager: Any
) -> None:
    created(id="wind")
    before = state(manager)
    response = call(api, "POST", "/subscriptions", {"id": "wind", "topic": "/other"})
    assert (response.status, error_of(response), response.json()["got"]) == (
        409, "conflict", "wind")
    assert state(manager) == before


def test_a_full_registry_is_a_conflict() -> None:
    api = SubscriptionApi(new_manager(registry=SubscriptionRegistry(max_subscriptions=1)))
    assert call(api, "POST", "/subscriptions", WIND).status == 201
    response = call(api, "POST", "/subscriptions", WIND)
    assert (response.status, error_of(response)) == (409, "conflict")


def test_the_operators_subscriptions_can_be_read_but_not_changed() -> None:
    configured = Subscription("ops", "/#", permtokens=["all"], configured=True,
                              attachers=["*"])  # whom the operator lets see it: anyone
    manager = new_manager(configured=[configured])
    api = SubscriptionApi(manager)
    shown = call(api, "GET", "/subscriptions/ops")
    assert (shown.status, shown.json()["configured"]) == (200, True)
    for method in ("PUT", "DELETE"):
        response = call(api, method, "/subscriptions/ops", WIND if method == "PUT" else None)
        assert (response.status, error_of(response)) == (409, "conflict")
    assert state(manager) == [configured.to_json()]


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/subscriptions", WIND),
    ("PUT", "/subscriptions/sub-1", {"topic": "/other", "subscription_status": "PAUSED"}),
    ("DELETE", "/subscriptions/sub-1", None),
])
def test_a_store_that_fails_is_503_and_the_change_is_undone(
    api: SubscriptionApi, created: Created, store: FlakyStore, manager: Any,
    method: str, path: str, body: Any,
) -> None:
    created()
    before, stored = state(manager), dict(store.saved)
    store.failure = ConnectionRefusedError("redis is down")
    response = call(api, method, path, body)
    assert (response.status, error_of(response)) == (503, "unavailable")
    assert (state(manager), store.saved) == (before, stored)


def test_the_wiring_names_which_store_errors_mean_unavailable(store: FlakyStore) -> None:
    class RedisLikeError(Exception):
        pass

    api = SubscriptionApi(new_manager(store), unavailable=(OSError, RedisLikeError))
    store.failure = RedisLikeError("LOADING")
    assert call(api, "POST", "/subscriptions", WIND).status == 503


def test_an_unexpected_failure_is_500_logged_and_tells_nothing(
    api: SubscriptionApi, store: FlakyStore, manager: Any
) -> None:
    store.failure = RuntimeError("secret detail")
    with structlog.testing.capture_logs() as logs:
        response = call(api, "POST", "/subscriptions", WIND)
    assert (response.status, error_of(response)) == (500, "internal")
    assert b"secret" not in response.body
    assert b"Traceback" not in response.body
    assert [log["event"] for log in logs if log["log_level"] == "error"] == [
        "subscription request failed"]
    assert state(manager) == []


def test_error_details_are_made_json_safe_and_short() -> None:
    response = error_response(400, "invalid", "m" * 5000, expected={1, 2}, got="x" * 5000)
    body = response.json()
    assert body["expected"] == "{1, 2}"
    assert len(body["got"]) == len(body["message"]) == MAX_DETAIL
    assert body["got"].endswith("...")


# --- authentication -------------------------------------------------------------------------


@pytest.fixture
def guarded(manager: Any) -> SubscriptionApi:
    return SubscriptionApi(manager, token="s3cr3t-t0ken")


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Bearer wrong", "Bearer s3cr3t-t0ke", "Bearer s3cr3t-t0ken2",
    "Basic czNjcjN0LXQwa2Vu", "s3cr3t-t0ken", "Bearer s3cr3t-t0k\u00e9n",
])
def test_without_the_right_bearer_token_a_request_is_401(
    guarded: SubscriptionApi, manager: Any, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in (("GET", "/subscriptions"), ("POST", "/subscriptions"),
                         ("GET", "/nowhere"), ("OPTIONS", "/subscriptions")):
        response = call(guarded, method, path, WIND if method == "POST" else None, headers)
        assert (response.status, error_of(response)) == (401, "unauthorized")
        assert response.header("WWW-Authenticate") == 'Bearer realm="seqrepair"'
    assert state(manager) == []


@pytest.mark.parametrize("authorization", ["Bearer s3cr3t-t0ken", "bearer  s3cr3t-t0ken "])
def test_with_the_bearer_token_a_request_is_served(
    guarded: SubscriptionApi, authorization: str
) -> None:
    headers = {"Authorization": authorization}
    assert call(guarded, "POST", "/subscriptions", WIND, headers).status == 201
    assert call(guarded, "GET", "/subscriptions", None, headers).status == 200


@pytest.mark.parametrize("token", ["", "two words", "caf\u00e9", 42])
def test_a_token_that_cannot_travel_in_a_header_is_refused(manager: Any, token: Any) -> None:
    with pytest.raises(InvalidConfigError):
        SubscriptionApi(manager, token=token)


@pytest.mark.parametrize("kwargs", [{"max_body": 0}, {"max_body": True},
                                    {"unavailable": OSError}, {"unavailable": ("x",)}])
def test_other_bad_settings_are_refused(manager: Any, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        SubscriptionApi(manager, **kwargs)


# --- a model: any sequence of calls agrees with a dict ----------------------------------------

IDS = ["a", "b", "c"]
TOPICS = ["/weather/#", "/weather/wind/*", "no-slash"]  # the last is invalid
STATUSES = ["ACTIVE", "PAUSED"]

proposals = st.fixed_dictionaries(
    {"topic": st.sampled_from(TOPICS)},
    optional={"subscription_status": st.sampled_from(STATUSES)},
)
calls = st.one_of(
    st.tuples(st.just("POST"), st.sampled_from([None, *IDS]), proposals, st.booleans()),
    st.tuples(st.just("PUT"), st.sampled_from(IDS), proposals, st.booleans()),
    st.tuples(st.just("DELETE"), st.sampled_from(IDS), st.none(), st.booleans()),
    st.tuples(st.just("GET"), st.sampled_from(IDS), st.none(), st.booleans()),
)


def expected_status(model: dict[str, tuple[str, str]], method: str, sub_id: str | None,
                    proposal: dict[str, str] | None, store_fails: bool) -> int:
    """What the CloudEvents operations say each call must answer (in the registry's order
    of checks: existence, then validity, then the store)."""
    valid = proposal is None or proposal["topic"] != "no-slash"
    if method == "POST":
        return 400 if not valid else 409 if sub_id in model else 503 if store_fails else 201
    if sub_id not in model:
        return 404
    if method == "GET":
        return 200
    return 400 if not valid else 503 if store_fails else 200


@settings(max_examples=150, deadline=None)
@given(st.lists(calls, max_size=25))
def test_any_sequence_of_calls_agrees_with_a_dict(
    script: list[tuple[str, str | None, dict[str, str] | None, bool]],
) -> None:
    store = FlakyStore()
    api = SubscriptionApi(new_manager(store))
    model: dict[str, tuple[str, str]] = {}
    for method, sub_id, proposal, store_fails in script:
        store.failure = OSError("down") if store_fails else None
        body = None if proposal is None else {**proposal, **({"id": sub_id} if sub_id else {})}
        path = "/subscriptions" if method == "POST" else f"/subscriptions/{sub_id}"
        response = call(api, method, path, body)
        assert response.status == expected_status(model, method, sub_id, proposal, store_fails)
        if response.status in (200, 201):
            shown = response.json()
            if method == "DELETE":
                del model[shown["id"]]
            elif method != "GET":
                model[shown["id"]] = (proposal or {})["topic"], (proposal or {}).get(
                    "subscription_status", "ACTIVE")
            assert method == "DELETE" or model[shown["id"]] == (
                shown["topic"], shown["subscription_status"])
    listed = call(api, "GET", "/subscriptions").json()
    assert {sub["id"]: (sub["topic"], sub["subscription_status"]) for sub in listed} == model
    assert {sid: (s["topic"], s["subscription_status"]) for sid, s in store.saved.items()} == (
        model)
