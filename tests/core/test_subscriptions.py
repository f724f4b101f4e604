"""Subscriptions: the JSON form, the registry's create / retrieve / query / update / delete, and
what each change means for the links attached to a subscription's queue.

The object follows the CloudEvents Subscriptions API (§3.2.1) with the SWIM subscription model's
status, qos and durability; delivery is pull only: a subscriber attaches a receiving link to
``/subscriptions/<id>``. A proposal needs only ``topic``; read-only members are accepted when
they agree; anything else the model does not allow is ``invalid`` (InvalidSubscriptionError),
a taken id or a full registry is a ``conflict``, an unknown id is ``notfound``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from seqrepair.core.errors import (
    InvalidConfigError,
    InvalidSubscriptionError,
    SeqRepairError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
)
from seqrepair.core.filters import MAX_FILTERS, BasicFilter, MatchType
from seqrepair.core.subscriptions import (
    MAX_PROTOCOL_SETTINGS,
    LinkAction,
    Subscription,
    SubscriptionRegistry,
    SubscriptionStatus,
    link_action,
)
from seqrepair.core.topics import TopicPattern

SUFFIX_LEMD = {"dialect": "basic", "type": "suffix", "property": "subject", "value": "/LEMD"}

# --- the JSON form ------------------------------------------------------------------------


def test_a_proposal_needs_only_a_topic_and_gets_every_default() -> None:
    sub = Subscription.from_json({"topic": "/weather/wind/*"}, id="wind")
    assert sub.to_json() == {
        "id": "wind",
        "topic": "/weather/wind/*",
        "protocol": "AMQP",
        "protocolsettings": {},
        "sink": "/subscriptions/wind",
        "queue": "/subscriptions/wind",
        "filters": [],
        "config": {},
        "subscription_status": "ACTIVE",
        "qos": "EXACTLY_ONCE",
        "durable": True,
        "permtokens": None,
        "configured": False,
        "owner": None,
    }
    assert sub == Subscription("wind", "/weather/wind/*")
    assert sub.queue == "/subscriptions/wind"
    assert not sub.paused


def test_the_documented_example_reads_and_writes_back_unchanged() -> None:
    example = {"id": "wind-lemd", "topic": "/weather/wind/*", "protocol": "AMQP",
               "protocolsettings": {}, "sink": "/subscriptions/wind-lemd",
               "queue": "/subscriptions/wind-lemd", "filters": [SUFFIX_LEMD], "config": {},
               "subscription_status": "ACTIVE", "qos": "EXACTLY_ONCE", "durable": True,
               "permtokens": None, "configured": False, "owner": "alice"}
    sub = Subscription.from_json(example)
    assert sub.id == "wind-lemd"
    assert sub.topic == TopicPattern("/weather/wind/*")
    assert sub.filters == (BasicFilter("suffix", "subject", "/LEMD"),)
    assert sub.to_json() == example


def test_every_member_is_read() -> None:
    sub = Subscription.from_json({
        "topic": "/weather/#", "filters": [SUFFIX_LEMD], "subscription_status": "PAUSED",
        "permtokens": ["6747", "1234", "6747"], "protocolsettings": {"linkname": "wind"},
        "config": {}, "configured": False, "durable": True, "qos": "EXACTLY_ONCE",
        "protocol": "AMQP", "sink": "/subscriptions/s1", "queue": "/subscriptions/s1",
    }, id="s1")
    assert sub.status is SubscriptionStatus.PAUSED
    assert sub.paused
    assert sub.permtokens == frozenset({"1234", "6747"})
    assert sub.to_json()["permtokens"] == ["1234", "6747"]  # sorted, once each
    assert dict(sub.protocolsettings) == {"linkname": "wind"}
    assert sub.to_json()["protocolsettings"] == {"linkname": "wind"}


def test_null_optional_members_take_their_defaults() -> None:
    sub = Subscription.from_json({"topic": "/a", "filters": None, "permtokens": None,
                                  "protocolsettings": None, "config": None, "id": None}, id="x")
    assert sub == Subscription("x", "/a")


def test_an_empty_permtokens_list_is_not_the_same_as_none() -> None:
    """None: whoever attaches keeps their grant; []: no tokenised data at all."""
    sub = Subscription.from_json({"topic": "/a", "permtokens": []}, id="x")
    assert sub.permtokens == frozenset()
    assert sub.to_json()["permtokens"] == []
    assert sub != Subscription("x", "/a")


def test_the_proposal_names_its_own_id_or_takes_the_one_given() -> None:
    assert Subscription.from_json({"topic": "/a", "id": "mine"}).id == "mine"
    assert Subscription.from_json({"topic": "/a"}, id="given").id == "given"
    assert Subscription.from_json({"topic": "/a", "id": "same"}, id="same").id == "same"


def test_protocolsettings_take_part_in_equality_but_not_in_the_hash() -> None:
    plain = Subscription("x", "/a")
    named = Subscription("x", "/a", protocolsettings={"linkname": "n", "list": [1, 2]})
    assert plain != named
    assert named == Subscription.from_json(named.to_json())
    assert hash(named) == hash(plain)  # hashable although a value is a list


def test_a_subscription_is_immutable() -> None:
    sub = Subscription.from_json({"topic": "/a", "protocolsettings": {"k": "v"}}, id="x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        sub.topic = TopicPattern("/b")  # type: ignore[misc]
    with pytest.raises(TypeError):
        sub.protocolsettings["k"] = "w"  # type: ignore[index]


ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,20}", fullmatch=True)
_word = st.text(st.characters(blacklist_categories=["Cc", "Cs", "Zs", "Zl", "Zp"],
                              blacklist_characters="/*#"), min_size=1, max_size=6)
patterns = st.lists(st.one_of(_word, st.sampled_from(["*", "#"])), min_size=1, max_size=4).map(
    lambda words: "/" + "/".join(words)
)
basic_filters = st.builds(BasicFilter, st.sampled_from(list(MatchType)),
                          st.sampled_from(["source", "type", "subject", "topic", "permtoken"]),
                          st.text(max_size=20))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)
subscriptions = st.builds(
    Subscription,
    id=ids,
    topic=patterns,
    filters=st.lists(basic_filters, max_size=4),
    status=st.sampled_from(list(SubscriptionStatus)),
    permtokens=st.one_of(st.none(), st.frozensets(st.text(min_size=1, max_size=8), max_size=3)),
    protocolsettings=st.dictionaries(st.text(max_size=10), json_values, max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(subscriptions)
def test_what_a_get_returns_can_be_put_back_unchanged(sub: Subscription) -> None:
    assert Subscription.from_json(sub.to_json()) == sub
    assert Subscription.from_json(sub.to_json(), id=sub.id) == sub
    through_text = json.loads(json.dumps(sub.to_json()))
    assert Subscription.from_json(through_text) == sub
    assert Subscription.from_json(through_text).to_json() == sub.to_json()


def test_a_subscription_may_select_a_topic_its_pattern_and_topic_filters_pass() -> None:
    sub = Subscription("rain", "/weather/#", filters=[
        {"dialect": "basic", "type": "prefix", "property": "subject", "value": "/weather/rain/"},
        {"dialect": "basic", "type": "suffix", "property": "topic", "value": "/LEMD"},
        {"dialect": "basic", "type": "exact", "property": "source", "value": "feed.a"},
    ])
    # the source filter depends on each publication, not on the topic
    assert sub.may_select("/weather/rain/LEMD")
    assert not sub.may_select("/weather/rain/LFPG")
    assert not sub.may_select("/weather/wind/LEMD")
    assert not sub.may_select("/flight/rain/LEMD")
    assert Subscription("all", "/#").may_select("/flight/LEMD")


# --- every refusal ------------------------------------------------------------------------


def invalid(call: Callable[[], object]) -> InvalidSubscriptionError:
    with pytest.raises(InvalidSubscriptionError) as excinfo:
        call()
    assert excinfo.type is InvalidSubscriptionError
    return excinfo.value


@pytest.mark.parametrize("proposal", [None, [], ["topic", "/a"], "{\"topic\": \"/a\"}", 1])
def test_a_proposal_that_is_not_an_object_is_refused(proposal: object) -> None:
    assert invalid(lambda: Subscription.from_json(proposal, id="x")).got == proposal


@pytest.mark.parametrize("member", ["subscription_id", "status", "Topic", "types", "ttl", ""])
def test_an_unknown_member_is_refused(member: str) -> None:
    error = invalid(lambda: Subscription.from_json({"topic": "/a", member: 1}, id="x"))
    assert error.got == [member]


@pytest.mark.parametrize(
    "bad_id",
    ["", "-a", ".a", "_a", "~a", "a/b", "a b", "a\n", "caf\u00e9", "a%20", "a" * 129, 7, None,
     ["a"]],
)
def test_a_bad_id_is_refused(bad_id: object) -> None:
    given = invalid(lambda: Subscription.from_json({"topic": "/a"}, id=bad_id))  # type: ignore[arg-type]
    assert given.got == bad_id
    if bad_id is not None:
        assert invalid(lambda: Subscription.from_json({"topic": "/a", "id": bad_id})).got == bad_id


def test_the_longest_id_and_every_allowed_character_are_accepted() -> None:
    assert Subscription.from_json({"topic": "/a"}, id="a" * 128).id == "a" * 128
    assert Subscription.from_json({"topic": "/a"}, id="0aZ.-_~9").id == "0aZ.-_~9"


def test_a_proposal_naming_another_id_than_the_one_given_is_refused() -> None:
    error = invalid(lambda: Subscription.from_json({"topic": "/a", "id": "b"}, id="a"))
    assert (error.expected, error.got) == ("a", "b")


def test_a_proposal_without_a_topic_is_refused() -> None:
    assert invalid(lambda: Subscription.from_json({"id": "x"})).expected == "a topic pattern"
    assert invalid(lambda: Subscription.from_json({}, id="x")).expected == "a topic pattern"


@pytest.mark.parametrize("topic", [None, "", "/", "weather", "/weather/", "/weather//wind",
                                   "/wea*ther", "/weather/wind#", "/a b", 7, ["/a"]])
def test_a_bad_topic_pattern_is_refused(topic: object) -> None:
    assert invalid(lambda: Subscription.from_json({"topic": topic}, id="x")).got == topic


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("protocol", "HTTP"), ("protocol", "amqp"), ("protocol", "MQTT5"), ("protocol", None),
        ("qos", "AT_LEAST_ONCE"), ("qos", "exactly_once"), ("qos", None), ("qos", 2),
        ("durable", False), ("durable", None), ("durable", 1), ("durable", "true"),
        ("configured", True), ("configured", 0), ("configured", "false"),
        ("sink", "/subscriptions/other"), ("sink", "amqp://host/subscriptions/x"),
        ("sink", "http://example.com/event-processor"), ("sink", None),
        ("queue", "/subscriptions/other"), ("queue", "/subscriptions/x/"), ("queue", None),
        ("config", {"interval": 5}), ("config", []), ("config", ""), ("config", 0),
        ("config", False), ("config", "x"),
        ("protocolsettings", []), ("protocolsettings", ""), ("protocolsettings", 0),
        ("protocolsettings", False), ("protocolsettings", "x"), ("protocolsettings", {1: 2}),
        ("protocolsettings", {"k": "x" * MAX_PROTOCOL_SETTINGS}),
        ("permtokens", "6747"), ("permtokens", b"6747"), ("permtokens", {"6747": True}),
        ("permtokens", [""]), ("permtokens", [6747]), ("permtokens", ["a", None]),
        ("permtokens", 6747),
        ("subscription_status", "paused"), ("subscription_status", "DELETED"),
        ("subscription_status", None), ("subscription_status", 1),
        ("subscription_status", ["ACTIVE"]),
        ("filters", {"dialect": "basic"}), ("filters", [{"dialect": "cesql"}]),
        ("filters", [SUFFIX_LEMD] * (MAX_FILTERS + 1)),
        ("filters", [{**SUFFIX_LEMD, "property": "sbject"}]),
    ],
)
def test_a_member_the_model_does_not_allow_is_refused(member: str, value: object) -> None:
    error = invalid(lambda: Subscription.from_json({"topic": "/a", member: value}, id="x"))
    assert error.message


@pytest.mark.parametrize(
    ("member", "value"),
    [("protocol", "AMQP"), ("qos", "EXACTLY_ONCE"), ("durable", True), ("configured", False),
     ("sink", "/subscriptions/x"), ("queue", "/subscriptions/x"), ("config", {}),
     ("protocolsettings", {}), ("filters", []), ("subscription_status", "ACTIVE")],
)
def test_a_read_only_or_default_member_is_accepted_when_it_agrees(member: str,
                                                                  value: object) -> None:
    assert Subscription.from_json({"topic": "/a", member: value}, id="x") == \
        Subscription("x", "/a")


# --- the registry: create -----------------------------------------------------------------


def registry_with(*subs: Subscription, **kwargs: Any) -> SubscriptionRegistry:
    registry = SubscriptionRegistry(**kwargs)
    registry.load(subs)
    return registry


def test_create_gives_the_new_id_when_the_proposal_names_none() -> None:
    registry = SubscriptionRegistry()
    sub = registry.create({"topic": "/weather/#"}, new_id="n1")
    assert sub == Subscription("n1", "/weather/#")
    assert registry.get("n1") is sub
    assert registry.create({"topic": "/a", "id": None}, new_id="n2").id == "n2"


def test_create_keeps_the_id_the_proposal_names() -> None:
    registry = SubscriptionRegistry()
    sub = registry.create({"topic": "/weather/#", "id": "mine"}, new_id="unused")
    assert sub.id == "mine"
    assert "unused" not in registry
    assert registry.query() == [sub]


def test_create_returns_the_realized_subscription() -> None:
    sub = SubscriptionRegistry().create({"topic": "/a", "filters": [SUFFIX_LEMD]}, new_id="n")
    assert sub.to_json()["sink"] == "/subscriptions/n"
    assert sub.to_json()["filters"] == [SUFFIX_LEMD]


def test_create_with_a_taken_id_is_a_conflict() -> None:
    registry = SubscriptionRegistry()
    first = registry.create({"topic": "/a", "id": "s"}, new_id="n1")
    with pytest.raises(SubscriptionConflictError) as excinfo:
        registry.create({"topic": "/b", "id": "s"}, new_id="n2")
    assert excinfo.type is SubscriptionConflictError
    assert excinfo.value.got == "s"
    with pytest.raises(SubscriptionConflictError):
        registry.create({"topic": "/b"}, new_id="s")  # a generated id that is taken, too
    assert registry.query() == [first]


def test_create_beyond_max_subscriptions_is_a_conflict() -> None:
    registry = SubscriptionRegistry(max_subscriptions=2)
    registry.create({"topic": "/a"}, new_id="a")
    registry.create({"topic": "/b"}, new_id="b")
    with pytest.raises(SubscriptionConflictError) as excinfo:
        registry.create({"topic": "/c"}, new_id="c")
    assert (excinfo.value.expected, excinfo.value.got) == (2, 3)
    assert [s.id for s in registry.query()] == ["a", "b"]
    registry.delete("a")
    assert registry.create({"topic": "/c"}, new_id="c").id == "c"


def test_an_invalid_proposal_is_invalid_even_when_the_registry_is_full() -> None:
    registry = SubscriptionRegistry(max_subscriptions=1)
    registry.create({"topic": "/a"}, new_id="a")
    assert invalid(lambda: registry.create({"topic": "nope"}, new_id="b")).got == "nope"


@pytest.mark.parametrize("limit", [0, -1, True, 1.0, "10", None])
def test_max_subscriptions_must_be_a_positive_integer(limit: object) -> None:
    with pytest.raises(InvalidConfigError) as excinfo:
        SubscriptionRegistry(max_subscriptions=limit)  # type: ignore[arg-type]
    assert excinfo.type is InvalidConfigError


# --- retrieve, find, query ------------------------------------------------------------------


def test_get_find_and_query() -> None:
    registry = SubscriptionRegistry()
    for new_id in ["m", "b", "z", "a"]:
        registry.create({"topic": f"/{new_id}"}, new_id=new_id)
    assert [s.id for s in registry.query()] == ["a", "b", "m", "z"]  # by id, not by age
    assert registry.get("m") == Subscription("m", "/m")
    assert registry.find("m") == Subscription("m", "/m")
    assert registry.find("q") is None
    with pytest.raises(SubscriptionNotFoundError) as excinfo:
        registry.get("q")
    assert excinfo.type is SubscriptionNotFoundError
    assert isinstance(excinfo.value, LookupError)
    assert excinfo.value.got == "q"
    assert len(registry) == 4
    assert "m" in registry
    assert "q" not in registry


def test_query_of_an_empty_registry_is_empty() -> None:
    assert SubscriptionRegistry().query() == []
    assert len(SubscriptionRegistry()) == 0


def test_query_returns_a_copy() -> None:
    registry = registry_with(Subscription("a", "/a"))
    registry.query().clear()
    assert len(registry) == 1


# --- update --------------------------------------------------------------------------------


def test_update_replaces_the_whole_subscription() -> None:
    """Members left out of the proposal take their defaults: PUT, not PATCH."""
    registry = SubscriptionRegistry()
    before = registry.create({"topic": "/weather/#", "filters": [SUFFIX_LEMD],
                              "subscription_status": "PAUSED", "permtokens": ["6747"],
                              "protocolsettings": {"linkname": "n"}}, new_id="s")
    previous, current = registry.update("s", {"topic": "/weather/wind/*"})
    assert previous == before
    assert current == Subscription("s", "/weather/wind/*")
    assert registry.get("s") == current


def test_update_with_what_get_returned_and_one_change() -> None:
    registry = SubscriptionRegistry()
    sub = registry.create({"topic": "/weather/#", "filters": [SUFFIX_LEMD]}, new_id="s")
    proposal = {**sub.to_json(), "subscription_status": "PAUSED"}
    _, current = registry.update("s", proposal)
    assert current == attrs.evolve(sub, status=SubscriptionStatus.PAUSED)


def test_update_of_an_unknown_id_is_not_found() -> None:
    with pytest.raises(SubscriptionNotFoundError):
        SubscriptionRegistry().update("nope", {"topic": "/a"})


def test_update_naming_another_id_is_refused() -> None:
    """The id is immutable (§3.2.1): the proposal's must be the one updated."""
    registry = registry_with(Subscription("a", "/a"), Subscription("b", "/b"))
    before = registry.query()
    error = invalid(lambda: registry.update("a", {"topic": "/c", "id": "b"}))
    assert (error.expected, error.got) == ("a", "b")
    invalid(lambda: registry.update("a", {"topic": "/c", "sink": "/subscriptions/b"}))
    assert registry.query() == before


CONFIGURED = Subscription("ops", "/weather/#", permtokens=["6747"], configured=True)


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update("ops", {"topic": "/other"}),
        lambda r: r.update("ops", {**CONFIGURED.to_json(), "configured": False}),
        lambda r: r.update("ops", {"topic": "not a pattern"}),  # the conflict is said first
        lambda r: r.delete("ops"),
    ],
)
def test_a_configured_subscription_cannot_be_changed(
    change: Callable[[SubscriptionRegistry], object]
) -> None:
    registry = registry_with(CONFIGURED)
    with pytest.raises(SubscriptionConflictError) as excinfo:
        change(registry)
    assert excinfo.type is SubscriptionConflictError
    assert excinfo.value.got == "ops"
    assert registry.query() == [CONFIGURED]


def test_a_configured_subscription_reads_back_as_configured() -> None:
    registry = registry_with(CONFIGURED)
    assert registry.get("ops").to_json()["configured"] is True
    with pytest.raises(SubscriptionConflictError):
        registry.create({"topic": "/a", "id": "ops"}, new_id="n")


def test_a_proposal_cannot_make_a_subscription_configured() -> None:
    registry = registry_with(Subscription("a", "/a"))
    invalid(lambda: registry.update("a", {"topic": "/a", "configured": True}))
    invalid(lambda: registry.create({"topic": "/a", "configured": True}, new_id="b"))
    assert registry.query() == [Subscription("a", "/a")]


# --- delete and restore ----------------------------------------------------------------------


def test_delete_returns_the_subscription_and_frees_its_id() -> None:
    registry = SubscriptionRegistry()
    sub = registry.create({"topic": "/a", "subscription_status": "PAUSED"}, new_id="s")
    assert registry.delete("s") == sub
    assert registry.find("s") is None
    with pytest.raises(SubscriptionNotFoundError):
        registry.get("s")
    with pytest.raises(SubscriptionNotFoundError):
        registry.delete("s")
    assert registry.create({"topic": "/b"}, new_id="s") == Subscription("s", "/b")


def test_restore_undoes_a_create_an_update_and_a_delete() -> None:
    registry = SubscriptionRegistry()
    created = registry.create({"topic": "/a"}, new_id="s")
    registry.restore("s", None)
    assert registry.query() == []
    registry.restore("s", None)  # already absent: nothing happens
    assert registry.query() == []

    registry.load([created])
    previous, _ = registry.update("s", {"topic": "/b"})
    registry.restore("s", previous)
    assert registry.query() == [created]

    deleted = registry.delete("s")
    registry.restore("s", deleted)
    assert registry.query() == [created]


# --- load ------------------------------------------------------------------------------------


def test_load_keeps_a_configured_subscription_against_a_stored_one_of_the_same_id() -> None:
    stored_twin = Subscription("ops", "/stored")
    registry = registry_with(CONFIGURED, stored_twin, Subscription("api", "/api"))
    assert registry.query() == [Subscription("api", "/api"), CONFIGURED]


def test_load_puts_subscriptions_in_as_they_are() -> None:
    subs = [Subscription("a", "/a", status="PAUSED"),
            Subscription("b", "/b", filters=[SUFFIX_LEMD])]
    registry = registry_with(*subs, max_subscriptions=1)  # loading is not limited
    assert registry.query() == subs


def test_load_takes_subscription_objects_only() -> None:
    registry = SubscriptionRegistry()
    error = invalid(lambda: registry.load([{"id": "a", "topic": "/a"}]))  # type: ignore[list-item]
    assert error.expected == "Subscription"
    assert registry.query() == []


# --- a failing call leaves the registry as it was --------------------------------------------


FAILING_CALLS: list[tuple[Callable[[SubscriptionRegistry], object], type[SeqRepairError]]] = [
    (lambda r: r.create({"topic": "/x", "durable": False}, new_id="new"),
     InvalidSubscriptionError),
    (lambda r: r.create({"topic": "/x", "id": "a"}, new_id="new"), SubscriptionConflictError),
    (lambda r: r.create({"topic": "/x"}, new_id="ops"), SubscriptionConflictError),
    (lambda r: r.create({"topic": "/x"}, new_id="bad id"), InvalidSubscriptionError),
    (lambda r: r.create([], new_id="new"), InvalidSubscriptionError),
    (lambda r: r.update("a", {"topic": "/x", "qos": "AT_MOST_ONCE"}), InvalidSubscriptionError),
    (lambda r: r.update("a", {"topic": "/x", "filters": [SUFFIX_LEMD, {}]}),
     InvalidSubscriptionError),
    (lambda r: r.update("a", {"topic": "/x", "id": "b"}), InvalidSubscriptionError),
    (lambda r: r.update("nope", {"topic": "/x"}), SubscriptionNotFoundError),
    (lambda r: r.update("ops", {"topic": "/x"}), SubscriptionConflictError),
    (lambda r: r.delete("nope"), SubscriptionNotFoundError),
    (lambda r: r.delete("ops"), SubscriptionConflictError),
    (lambda r: r.get("nope"), SubscriptionNotFoundError),
    (lambda r: r.load([Subscription("z", "/z"), "not a subscription"]),  # type: ignore[list-item]
     InvalidSubscriptionError),
]


@pytest.mark.parametrize(("call", "error"), FAILING_CALLS)
def test_a_failing_call_leaves_the_registry_unchanged(
    call: Callable[[SubscriptionRegistry], object], error: type[SeqRepairError]
) -> None:
    registry = registry_with(
        CONFIGURED,
        Subscription("a", "/a", filters=[SUFFIX_LEMD], status="PAUSED", permtokens=["t"],
                     protocolsettings={"linkname": "l"}),
        Subscription("b", "/b"),
    )
    before = [s.to_json() for s in registry.query()]
    with pytest.raises(error) as excinfo:
        call(registry)
    assert excinfo.type is error
    assert [s.to_json() for s in registry.query()] == before


# --- what a change means for the links -------------------------------------------------------

BASE = Subscription("s", "/weather/#", filters=[SUFFIX_LEMD], permtokens=["6747"])
PAUSED = attrs.evolve(BASE, status=SubscriptionStatus.PAUSED)
OTHER_FILTER = {**SUFFIX_LEMD, "value": "/LFPG"}
UPDATES = {"dialect": "basic", "type": "exact", "property": "type", "value": "update"}
TWO_FILTERS = attrs.evolve(BASE, filters=[SUFFIX_LEMD, UPDATES])


@pytest.mark.parametrize(
    ("previous", "current", "action"),
    [
        (None, None, LinkAction.NONE),
        (None, BASE, LinkAction.NONE),  # created: nothing is attached yet
        (BASE, None, LinkAction.CLOSE),
        (PAUSED, None, LinkAction.CLOSE),
        (BASE, BASE, LinkAction.NONE),
        (BASE, attrs.evolve(BASE), LinkAction.NONE),
        (BASE, attrs.evolve(BASE, protocolsettings={"linkname": "n"}), LinkAction.NONE),
        (BASE, PAUSED, LinkAction.PAUSE),
        (PAUSED, PAUSED, LinkAction.NONE),
        (PAUSED, BASE, LinkAction.RESUME),
        (BASE, attrs.evolve(BASE, topic="/weather/wind/*"), LinkAction.REATTACH),
        (BASE, attrs.evolve(BASE, filters=[]), LinkAction.REATTACH),
        (BASE, attrs.evolve(BASE, filters=[OTHER_FILTER]), LinkAction.REATTACH),
        (BASE, attrs.evolve(BASE, filters=[SUFFIX_LEMD, OTHER_FILTER]), LinkAction.REATTACH),
        # every filter must pass: their order, or one given twice, selects the same
        (TWO_FILTERS, attrs.evolve(TWO_FILTERS, filters=[UPDATES, SUFFIX_LEMD]), LinkAction.NONE),
        (BASE, attrs.evolve(BASE, filters=[SUFFIX_LEMD, SUFFIX_LEMD]), LinkAction.NONE),
        (BASE, attrs.evolve(BASE, permtokens=None), LinkAction.REATTACH),
        (BASE, attrs.evolve(BASE, permtokens=[]), LinkAction.REATTACH),
        (BASE, attrs.evolve(BASE, permtokens=["6747", "1234"]), LinkAction.REATTACH),
        # what the links may see changed and the status too: they must re-attach either way
        (BASE, attrs.evolve(PAUSED, topic="/weather/wind/*"), LinkAction.REATTACH),
        (PAUSED, attrs.evolve(BASE, filters=[]), LinkAction.REATTACH),
    ],
)
def test_link_action_for_each_kind_of_change(
    previous: Subscription | None, current: Subscription | None, action: LinkAction
) -> None:
    assert link_action(previous, current) is action


def test_link_action_of_what_update_returns() -> None:
    registry = registry_with(BASE)
    assert link_action(*registry.update("s", {**BASE.to_json(), "subscription_status": "PAUSED"})) \
        is LinkAction.PAUSE
    assert link_action(*registry.update("s", {**BASE.to_json(), "subscription_status": "ACTIVE"})) \
        is LinkAction.RESUME
    assert link_action(*registry.update("s", BASE.to_json())) is LinkAction.NONE
    assert link_action(*registry.update("s", {"topic": "/weather/#"})) is LinkAction.REATTACH


# --- the registry against a model -----------------------------------------------------------

POOL = ["a", "b", "c", "ops"]
DROPPABLE = ["protocol", "sink", "queue", "config", "qos", "durable", "configured"]
BREAKS: list[tuple[str, object]] = [
    ("topic", "no-slash"), ("topic", "/a//b"), ("protocol", "HTTP"), ("qos", "AT_MOST_ONCE"),
    ("durable", False), ("configured", True), ("config", {"x": 1}), ("config", []),
    ("subscription_status", "DELETED"), ("permtokens", [""]), ("filters", [{"dialect": "x"}]),
    ("protocolsettings", []), ("bogus", 1), ("sink", "/elsewhere"), ("id", "bad id"),
]


@st.composite
def proposals(draw: st.DrawFn, sub_id: str) -> tuple[dict[str, Any], Subscription | None]:
    """A proposal for ``sub_id`` and the subscription it must become (None: it is invalid)."""
    sub = attrs.evolve(draw(subscriptions), id=sub_id)
    proposal = sub.to_json()
    for member in draw(st.sets(st.sampled_from(DROPPABLE))):
        del proposal[member]
    if not sub.filters and draw(st.booleans()):
        del proposal["filters"]
    if sub.permtokens is None and draw(st.booleans()):
        del proposal["permtokens"]
    if not sub.paused and draw(st.booleans()):
        del proposal["subscription_status"]
    if draw(st.booleans()):
        del proposal["id"]
        proposal.pop("sink", None)
        proposal.pop("queue", None)
    if draw(st.integers(0, 3)) == 0:
        member, value = draw(st.sampled_from(BREAKS))
        proposal[member] = value
        return proposal, None
    return proposal, sub


class RegistryAgainstADict(RuleBasedStateMachine):
    """The registry behaves as a dict of subscriptions by id with the documented refusals."""

    def __init__(self) -> None:
        super().__init__()
        self.limit = 5
        self.registry = SubscriptionRegistry(max_subscriptions=self.limit)
        self.registry.load([CONFIGURED])
        self.model: dict[str, Subscription] = {"ops": CONFIGURED}
        self.ids = (f"gen{n}" for n in itertools.count())

    def expect(self, error: type[SeqRepairError] | None, call: Callable[[], Any]) -> Any:
        if error is None:
            return call()
        with pytest.raises(error) as excinfo:
            call()
        assert excinfo.type is error
        return None

    @rule(data=st.data(), named=st.sampled_from(POOL))
    def create(self, data: st.DataObject, named: str) -> None:
        new_id = next(self.ids)
        proposal, expected = data.draw(proposals(named))
        sub_id = named if "id" in proposal else new_id
        if expected is None:
            error: type[SeqRepairError] | None = InvalidSubscriptionError
        elif sub_id in self.model or len(self.model) >= self.limit:
            error = SubscriptionConflictError
        else:
            error = None
        created = self.expect(error, lambda: self.registry.create(proposal, new_id=new_id))
        if error is None:
            assert expected is not None
            assert created == attrs.evolve(expected, id=sub_id)
            self.model[sub_id] = created

    def some_id(self, data: st.DataObject) -> str:
        """Mostly one made through the registry, else one of the pool (held or not)."""
        made = sorted(k for k, sub in self.model.items() if not sub.configured)
        if made and data.draw(st.integers(0, 3)) > 0:
            return data.draw(st.sampled_from(made))
        return data.draw(st.sampled_from(POOL))

    @rule(data=st.data())
    def update(self, data: st.DataObject) -> None:
        sub_id = self.some_id(data)
        proposal, expected = data.draw(proposals(sub_id))
        if sub_id not in self.model:
            error: type[SeqRepairError] | None = SubscriptionNotFoundError
        elif self.model[sub_id].configured:
            error = SubscriptionConflictError
        elif expected is None:
            error = InvalidSubscriptionError
        else:
            error = None
        result = self.expect(error, lambda: self.registry.update(sub_id, proposal))
        if error is None:
            assert expected is not None
            assert result == (self.model[sub_id], expected)
            self.model[sub_id] = expected

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        sub_id = self.some_id(data)
        if sub_id not in self.model:
            error: type[SeqRepairError] | None = SubscriptionNotFoundError
        elif self.model[sub_id].configured:
            error = SubscriptionConflictError
        else:
            error = None
        deleted = self.expect(error, lambda: self.registry.delete(sub_id))
        if error is None:
            assert deleted == self.model.pop(sub_id)

    @rule(data=st.data())
    def get(self, data: st.DataObject) -> None:
        sub_id = self.some_id(data)
        assert self.registry.find(sub_id) == self.model.get(sub_id)
        error = None if sub_id in self.model else SubscriptionNotFoundError
        assert self.expect(error, lambda: self.registry.get(sub_id)) == self.model.get(sub_id)

    @invariant()
    def holds_what_the_model_holds(self) -> None:
        expected = [self.model[k] for k in sorted(self.model)]
        assert self.registry.query() == expected
        assert [s.to_json() for s in self.registry.query()] == [s.to_json() for s in expected]
        assert len(self.registry) == len(self.model) <= self.limit  # the configured one counts


TestRegistryAgainstADict = RegistryAgainstADict.TestCase
TestRegistryAgainstADict.settings = settings(max_examples=50, stateful_step_count=30,
                                             deadline=None)
