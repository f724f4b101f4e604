"""The access policy's pure matching: actors, operations, topic patterns, deny exceptions."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.policy import (
    ALL_OPERATIONS,
    Effect,
    InvalidPolicyError,
    Operation,
    Policy,
    Rule,
    covers,
    may_access,
    overlaps,
)
from seqrepair.core.topics import TopicPattern

P = TopicPattern

POLICY = Policy.from_json({
    "allow": [
        {"actors": ["*@example.com"], "operations": ["subscribe", "publish"],
         "topics": ["/weather/#"]},
        {"actors": ["ops"], "operations": ["admin"]},
        {"actors": ["*"], "operations": ["list-topics"], "topics": ["/weather/*"]},
        {"actors": ["alice@example.com"], "operations": ["attach-queue"], "queues": ["wind-*"]},
    ],
    "deny": [
        {"actors": ["mallory@example.com"], "operations": ["subscribe"]},
        {"actors": ["*"], "operations": ["subscribe", "publish"],
         "topics": ["/weather/secret/#"]},
        {"actors": ["*"], "operations": ["attach-queue"], "queues": ["wind-secret"]},
    ],
})

S, PUB, LIST = Operation.SUBSCRIBE, Operation.PUBLISH, Operation.LIST_TOPICS


@pytest.mark.parametrize(("principal", "op", "topic", "allowed"), [
    ("alice@example.com", S, "/weather/#", True),
    ("alice@example.com", S, "/weather/wind/*", True),
    ("alice@example.com", S, "/#", False),  # wider than the grant
    ("alice@example.com", S, "/sports/#", False),
    ("alice@example.com", S, "/weather/secret/#", False),  # denied whole
    ("alice@example.com", S, "/weather/secret/x", False),
    ("bob@example.org", S, "/weather/#", False),  # the actor does not match
    ("example.com", S, "/weather/#", False),
    ("mallory@example.com", S, "/weather/#", False),  # a deny exception for one actor
    ("mallory@example.com", PUB, "/weather/wind", True),  # ... of one operation
    ("alice@example.com", PUB, "/weather/wind", True),
    ("alice@example.com", PUB, "/weather/secret/a", False),
    ("alice@example.com", PUB, "/#", True),  # a publishing link: overlap, then per topic
    ("alice@example.com", PUB, "/sports/#", False),
    ("alice@example.com", PUB, "/weather/secret/#", False),
    ("ops", S, "/#", True),  # admin: everything ...
    ("ops", S, "/weather/secret/x", False),  # ... but a deny of the operation still holds
    ("ops", Operation.DELETE_TOPIC, "/x", True),
    ("anonymous", LIST, "/weather/wind", True),
    ("anonymous", LIST, "/weather/wind/LEMD", False),
    ("anonymous", S, "/weather/wind", False),
])
def test_the_decision_table(principal: str, op: Operation, topic: str, allowed: bool) -> None:
    decision = POLICY.decide(principal, op, topic)
    assert decision.allowed is allowed, decision.why
    assert bool(decision) is allowed
    if not allowed:
        assert principal in decision.why


def test_a_deny_inside_an_allowed_pattern_is_an_exclusion() -> None:
    decision = POLICY.decide("alice@example.com", S, "/weather/#")
    assert decision.exclude == (P("/weather/secret/#"),)
    assert POLICY.decide("alice@example.com", S, "/weather/wind/#").exclude == ()


def test_admin_and_queue_grants() -> None:
    assert POLICY.is_admin("ops")
    assert not POLICY.is_admin("alice@example.com")
    assert POLICY.may_attach_queue("alice@example.com", "wind-lemd")
    assert not POLICY.may_attach_queue("alice@example.com", "rain")
    assert not POLICY.may_attach_queue("alice@example.com", "wind-secret")
    assert POLICY.may_attach_queue("ops", "rain")
    assert not POLICY.may_attach_queue("ops", "wind-secret")  # the deny names it
    assert not POLICY.may_attach_queue("bob@example.com", "wind-lemd")


def test_operations_without_topic() -> None:
    policy = Policy.from_json({
        "allow": [{"actors": ["*"], "operations": ["*"]}],
        "deny": [{"actors": ["guest"], "operations": ["create-subscription"]}]})
    assert policy.decide("x", Operation.READ_SUBSCRIPTION)
    assert not policy.decide("guest", Operation.CREATE_SUBSCRIPTION)
    assert not policy.decide("x", Operation.ADMIN)  # '*' never means admin
    assert not policy.is_admin("x")
    assert not Policy().decide("x", Operation.READ_SUBSCRIPTION)  # no rule: refused


def test_allow_all_is_everything_but_admin_and_attach_queue() -> None:
    policy = Policy.allow_all()
    assert policy.permissive
    for op in ALL_OPERATIONS - {Operation.ATTACH_QUEUE}:
        assert policy.decide("anyone", op, "/#")
        assert policy.decide("anyone", op, "/a/b")
    # a configured queue hands out its tokens: without a policy, only whom it names
    assert not policy.may_attach_queue("anyone", "q")
    assert not may_access(policy, "anyone", sub_id="q", owner=None, configured=True)
    assert may_access(policy, "anyone", sub_id="q", owner=None, configured=True,
                      attachers=["*"])
    assert may_access(policy, "alice@x", sub_id="q", owner=None, configured=True,
                      attachers=["bob", "*@x"])
    assert not may_access(policy, "bob@y", sub_id="q", owner=None, configured=True,
                          attachers=["*@x"])
    assert not policy.is_admin("anyone")


def test_a_queue_names_whom_it_admits_unless_a_deny_of_attach_queue_says_otherwise() -> None:
    policy = Policy.from_json({"deny": [{"actors": ["mallory"], "operations": ["attach-queue"],
                                         "queues": ["q*"]}]})
    assert not may_access(policy, "mallory", sub_id="q1", owner=None, configured=True,
                          attachers=["*"])
    assert may_access(policy, "mallory", sub_id="r1", owner=None, configured=True,
                      attachers=["*"])


def test_exclusions_come_from_the_denies_whatever_the_allows() -> None:
    policy = Policy.from_json({"deny": [{"actors": ["guest"], "operations": ["subscribe"],
                                         "topics": ["/weather/secret/#"]}]})
    assert not policy.decide("guest", Operation.SUBSCRIBE, "/weather/#")  # no allow
    seen = policy.exclusions("guest", Operation.SUBSCRIBE, "/weather/#")
    assert seen
    assert seen.exclude == (TopicPattern("/weather/secret/#"),)
    assert not policy.exclusions("guest", Operation.SUBSCRIBE, "/weather/secret/x/#")
    assert policy.exclusions("other", Operation.SUBSCRIBE, "/weather/#").exclude == ()


def test_actor_wildcards_are_whole_matches_and_escape_everything_else() -> None:
    rule = Rule(Effect.ALLOW, ["*@ex.com", "a.b"], ["publish"])
    assert rule.applies_to("x@ex.com", PUB)
    assert rule.applies_to("@ex.com", PUB)
    assert not rule.applies_to("x@ex.com.evil", PUB)
    assert not rule.applies_to("x@exxcom", PUB)
    assert rule.applies_to("a.b", PUB)
    assert not rule.applies_to("axb", PUB)
    assert not rule.applies_to("x@ex.com", S)


@pytest.mark.parametrize("bad", [
    [],
    {"allow": {"actors": ["*"]}},
    {"allow": [{"actors": ["*"]}]},
    {"allow": [{"operations": ["publish"]}]},
    {"allow": [{"actors": "*", "operations": ["publish"]}]},
    {"allow": [{"actors": [], "operations": ["publish"]}]},
    {"allow": [{"actors": ["*"], "operations": ["fly"]}]},
    {"allow": [{"actors": ["*"], "operations": []}]},
    {"allow": [{"actors": ["*"], "operations": ["publish"], "topics": ["nope"]}]},
    {"allow": [{"actors": ["*"], "operations": ["publish"], "topics": []}]},
    {"allow": [{"actors": ["*"], "operations": ["publish"], "queues": [""]}]},
    {"allow": [{"actors": ["*"], "operations": ["publish"], "extra": 1}]},
    {"grant": []},
])
def test_a_bad_policy_is_refused(bad: object) -> None:
    with pytest.raises(InvalidPolicyError) as info:
        Policy.from_json(bad)
    assert info.value.message


@pytest.mark.parametrize(("outer", "inner", "cover", "overlap"), [
    ("/#", "/a/b", True, True),
    ("/a/#", "/a", True, True),
    ("/a/#", "/b", False, False),
    ("/a/*", "/a/#", False, True),
    ("/a/#", "/a/*", True, True),
    ("/*/b", "/a/*", False, True),
    ("/#/x", "/a/#/x", True, True),
    ("/a/#/x", "/#/x", False, True),
    ("/*", "/#", False, True),
    ("/a/b", "/a/b", True, True),
    ("/a/b", "/a/c", False, False),
    ("/*/*", "/#", False, True),
    ("/#/#", "/#", True, True),
    ("/*/#", "/#", True, True),  # a topic has a word at least
])
def test_covers_and_overlaps(outer: str, inner: str, cover: bool, overlap: bool) -> None:
    assert covers(P(outer), P(inner)) is cover
    assert overlaps(P(outer), P(inner)) is overlap
    assert overlaps(P(inner), P(outer)) is overlap


WORDS = ["a", "b", "*", "#"]
patterns = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(
    lambda ws: P("/" + "/".join(ws)))
# every topic of up to 5 words over a, b and a word neither pattern names
TOPICS = ["/" + "/".join(ws) for n in range(1, 6)
          for ws in itertools.product(["a", "b", "z"], repeat=n)]


@settings(max_examples=1500, deadline=None)
@given(patterns, patterns)
def test_covers_and_overlaps_agree_with_brute_force(a: TopicPattern, b: TopicPattern) -> None:
    in_a = {t for t in TOPICS if a.matches(t)}
    in_b = {t for t in TOPICS if b.matches(t)}
    if covers(a, b):
        assert in_b <= in_a
    elif len(a.words) + len(b.words) <= 5:  # a counterexample is short enough for TOPICS
        assert not in_b <= in_a
    if not overlaps(a, b):
        assert not in_a & in_b
    elif len(a.words) + len(b.words) <= 5:
        assert in_a & in_b
    if covers(a, b) and in_b:
        assert overlaps(a, b)


@settings(max_examples=200, deadline=None)
@given(patterns, st.sampled_from(TOPICS[:40]), st.sampled_from(["alice", "bob"]))
def test_a_deny_always_wins(pattern: TopicPattern, topic: str, who: str) -> None:
    policy = Policy((Rule(Effect.ALLOW, ["*"], ["*"]),
                     Rule(Effect.DENY, ["alice"], ["publish"], [pattern])))
    decision = policy.decide(who, PUB, topic)
    assert decision.allowed is (who == "bob" or not pattern.matches(topic))
