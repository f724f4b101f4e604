"""The pure parts of contributions: token buckets, the contribution desk, and the policy's
source rules (own-source, contribute)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.config import InvalidConfigError
from seqrepair.core.contributions import (
    CONTRIBUTION_FIELD,
    CONTRIBUTOR_FIELD,
    Desk,
    ForgedContributionError,
    Outcome,
    TooManyPendingError,
    contributor_of,
)
from seqrepair.core.messages import Publication
from seqrepair.core.policy import InvalidPolicyError, Operation, Policy
from seqrepair.core.throttle import Throttle, TokenBucket

# --------------------------------------------------------------------------------------------
# token buckets


def test_a_bucket_starts_full_refills_at_its_rate_and_never_past_its_burst() -> None:
    bucket = TokenBucket(rate=2.0, burst=3.0)
    assert [bucket.take(10.0) for _ in range(4)] == [True, True, True, False]
    assert not bucket.take(10.4)  # 0.8 of a token
    assert bucket.take(10.5)  # 1.0
    assert not bucket.take(10.5)
    assert bucket.level(1000.0) == 3.0  # capped at the burst
    assert bucket.full(1000.0)


def test_a_bucket_does_not_refill_when_time_goes_backwards() -> None:
    bucket = TokenBucket(rate=1.0, burst=1.0)
    assert bucket.take(5.0)
    assert not bucket.take(4.0)
    assert not bucket.take(5.5)  # the clock that went back gave nothing
    assert bucket.take(6.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), max_size=60),
       st.floats(min_value=0.1, max_value=20), st.floats(min_value=1, max_value=20))
def test_a_bucket_never_grants_more_than_burst_plus_rate_times_elapsed(
    gaps: list[float], rate: float, burst: float,
) -> None:
    bucket = TokenBucket(rate=rate, burst=burst)
    now, granted = 0.0, 0
    for gap in gaps:
        now += gap
        granted += bucket.take(now)
    assert granted <= burst + rate * now + 1e-9


def test_a_bad_rate_or_burst_is_a_config_error() -> None:
    with pytest.raises(InvalidConfigError):
        TokenBucket(rate=0, burst=1)
    with pytest.raises(InvalidConfigError):
        Throttle(rate=1, burst=-1)


def test_a_throttle_holds_one_bucket_per_key_and_counts_refusals() -> None:
    throttle = Throttle(rate=1.0, burst=2.0)
    assert [throttle.take("bob", 0.0) for _ in range(3)] == [True, True, False]
    assert [throttle.take("carol", 0.0) for _ in range(2)] == [True, True]  # bob's is his own
    assert throttle.refused == {"bob": 1}
    assert throttle.refused_total == 1


def test_a_throttle_is_bounded_and_forgets_refilled_buckets_first() -> None:
    throttle = Throttle(rate=1.0, burst=1.0, max_keys=2)
    assert throttle.take("a", 0.0)
    assert throttle.take("b", 5.0)
    assert throttle.take("c", 5.0)  # "a" refilled by now: it goes, "b" stays (still empty)
    assert set(throttle.buckets) == {"b", "c"}
    assert not throttle.take("b", 5.0)  # not forgotten: no fresh burst for the flooder
    for n in range(100):
        throttle.take(f"k{n}", 5.0)
    assert len(throttle.buckets) <= 2


# --------------------------------------------------------------------------------------------
# the desk


def _pub(seq: int, fields: dict[str, object], source: str = "feed.a") -> Publication:
    return Publication("/w/x", source, seq, fields=fields)


def test_a_contribution_published_closes_with_its_number() -> None:
    desk = Desk(timeout=5.0)
    pending = desk.open("feed.a", "bob", "/w/x", now=0.0, handle="h")
    pub = _pub(7, {"v": 1, CONTRIBUTOR_FIELD: "bob", CONTRIBUTION_FIELD: pending.id})
    desk.check_claim(pub)
    closed = desk.published(pub)
    assert closed is not None
    assert (closed.outcome, closed.source_seq, closed.pending.handle) == (
        Outcome.PUBLISHED, 7, "h")
    assert desk.pending == {}
    assert contributor_of(pub) == "bob"
    assert desk.published(pub) is None  # once
    desk.check_claim(pub)  # a resend of it after it closed is still its own


def test_claims_the_desk_did_not_hand_out_are_forged() -> None:
    desk = Desk()
    pending = desk.open("feed.a", "bob", "/w/x", now=0.0)
    for fields in (
        {CONTRIBUTOR_FIELD: "carol", CONTRIBUTION_FIELD: pending.id},  # another contributor
        {CONTRIBUTOR_FIELD: "bob", CONTRIBUTION_FIELD: "nope"},  # an id never given
        {CONTRIBUTOR_FIELD: "bob"},  # no id at all
        {CONTRIBUTION_FIELD: pending.id},  # no contributor
    ):
        with pytest.raises(ForgedContributionError):
            desk.check_claim(_pub(1, fields))
    with pytest.raises(ForgedContributionError):  # another source's owner
        desk.check_claim(_pub(1, {CONTRIBUTOR_FIELD: "bob", CONTRIBUTION_FIELD: pending.id},
                              source="feed.b"))
    desk.check_claim(_pub(1, {"plain": 1}))
    assert list(desk.pending) == [pending.id]  # nothing changed


def test_unanswered_contributions_time_out_taken_ones_wait_for_the_publication_longer() -> None:
    desk = Desk(timeout=2.0)
    late = desk.open("feed.a", "bob", "/w/x", now=0.0)
    taken = desk.open("feed.a", "bob", "/w/x", now=0.0)
    kept = desk.open("feed.a", "bob", "/w/x", now=0.0)
    desk.take(taken.id, now=1.5)
    desk.take(kept.id, now=1.5)
    assert desk.next_deadline == 2.0
    assert desk.expire(1.9) == []
    [closed] = desk.expire(2.0)
    assert (closed.pending.id, closed.outcome) == (late.id, Outcome.TIMED_OUT)
    assert "did not answer" in closed.reason
    assert desk.next_deadline == 3.5
    published = desk.published(_pub(9, {CONTRIBUTOR_FIELD: "bob",
                                         CONTRIBUTION_FIELD: kept.id}))
    assert published is not None
    [gone] = desk.owner_gone("feed.a")
    assert (gone.pending.id, gone.outcome) == (taken.id, Outcome.OWNER_GONE)
    assert desk.next_deadline is None
    assert desk.counts == {"published": 1, "refused": 0, "timed-out": 1, "owner-gone": 1}


def test_a_taken_contribution_never_published_times_out_too() -> None:
    desk = Desk(timeout=2.0)
    taken = desk.open("feed.a", "bob", "/w/x", now=0.0)
    desk.take(taken.id, now=1.0)
    assert desk.expire(2.9) == []
    [closed] = desk.expire(3.0)
    assert (closed.outcome, closed.reason) == (
        Outcome.TIMED_OUT, "the owner of 'feed.a' did not publish it within 2 s")


def test_an_owner_holds_at_most_max_pending_and_a_refusal_frees_room() -> None:
    desk = Desk(max_pending=2)
    first = desk.open("feed.a", "bob", "/w/x", now=0.0)
    desk.open("feed.a", "bob", "/w/x", now=0.0)
    with pytest.raises(TooManyPendingError):
        desk.open("feed.a", "bob", "/w/x", now=0.0)
    desk.open("feed.b", "bob", "/w/x", now=0.0)  # per source
    closed = desk.refuse(first.id, "no")
    assert closed is not None
    assert (closed.outcome, closed.reason) == (Outcome.REFUSED, "no")
    assert desk.refuse(first.id, "again") is None
    desk.open("feed.a", "bob", "/w/x", now=0.0)


def test_the_desk_remembers_a_bounded_number_of_closed_ids() -> None:
    desk = Desk(recent=3)
    ids = []
    for _ in range(10):
        pending = desk.open("feed.a", "bob", "/w/x", now=0.0)
        ids.append(pending.id)
        desk.refuse(pending.id, "no")
    assert len(desk._recent) == 3
    with pytest.raises(ForgedContributionError):
        desk.check_claim(_pub(1, {CONTRIBUTOR_FIELD: "bob", CONTRIBUTION_FIELD: ids[0]}))
    desk.check_claim(_pub(1, {CONTRIBUTOR_FIELD: "bob", CONTRIBUTION_FIELD: ids[-1]}))


# --------------------------------------------------------------------------------------------
# the policy's source rules

POLICY = Policy.from_json({
    "allow": [
        {"actors": ["*@example.com"], "operations": ["publish", "subscribe"]},
        {"actors": ["alice@example.com"], "operations": ["own-source"],
         "sources": ["feed.alice", "feed.alice.*"]},
        {"actors": ["*@partner.org"], "operations": ["contribute"], "sources": ["feed.*"],
         "topics": ["/weather/#"]},
        {"actors": ["ops"], "operations": ["admin"]},
        {"actors": ["root"], "operations": ["*"]},
    ],
    "deny": [
        {"actors": ["mallory@partner.org"], "operations": ["contribute"],
         "sources": ["feed.alice"]},
        {"actors": ["*"], "operations": ["contribute"], "topics": ["/weather/secret/#"]},
        {"actors": ["alice@example.com"], "operations": ["own-source"],
         "sources": ["feed.alice.frozen"]},
    ],
})


@pytest.mark.parametrize(("principal", "source", "allowed"), [
    ("alice@example.com", "feed.alice", True),
    ("alice@example.com", "feed.alice.x", True),
    ("alice@example.com", "feed.alice.frozen", False),  # a deny exception
    ("bob@example.com", "feed.alice", False),  # reserved to alice
    ("bob@example.com", "feed.alice.x", False),
    ("bob@example.com", "feed.bob", True),  # no rule reserves it: anyone's
    ("alice@example.com", "feed.bob", True),
    ("ops", "feed.alice", True),  # an administrator may
    ("root", "feed.alice", False),  # '*' is not own-source
    ("anonymous", "feed.alicex", True),  # the pattern is a whole match
])
def test_a_reserved_source_is_published_only_by_its_owners(
    principal: str, source: str, allowed: bool,
) -> None:
    assert bool(POLICY.may_publish_source(principal, source)) is allowed


def test_admin_and_star_rules_reserve_nothing() -> None:
    assert not POLICY.reserved("anything")
    assert POLICY.reserved("feed.alice.x")
    assert not Policy.from_json({"allow": [{"actors": ["x"], "operations": ["*"]}]}).reserved("a")


@pytest.mark.parametrize(("principal", "source", "topic", "allowed"), [
    ("bob@partner.org", "feed.alice", None, True),
    ("bob@partner.org", "feed.alice", "/weather/wind", True),
    ("bob@partner.org", "feed.alice", "/sports/x", False),  # outside the rule's topics
    ("bob@partner.org", "feed.alice", "/weather/secret/x", False),  # denied topics
    ("bob@partner.org", "other", None, False),  # outside the rule's sources
    ("mallory@partner.org", "feed.alice", None, False),  # denied for that source
    ("mallory@partner.org", "feed.bob", "/weather/x", True),  # ... only that one
    ("alice@example.com", "feed.alice", None, False),  # owning is not contributing
    ("root", "feed.alice", "/weather/x", True),  # '*' holds contribute
    ("ops", "feed.alice", "/weather/x", True),
])
def test_contribute_is_granted_per_source_and_topic(
    principal: str, source: str, topic: str | None, allowed: bool,
) -> None:
    assert bool(POLICY.may_contribute(principal, source, topic)) is allowed


def test_without_a_policy_every_source_is_everyone_s_and_contributions_are_open() -> None:
    policy = Policy.allow_all()
    assert policy.may_publish_source("anyone", "feed.x")
    assert policy.may_contribute("anyone", "feed.x", "/a")


def test_sources_must_be_a_list_of_names() -> None:
    for sources in ("feed.a", [], [""], [1]):
        with pytest.raises(InvalidPolicyError):
            Policy.from_json({"allow": [{"actors": ["a"], "operations": ["own-source"],
                                         "sources": sources}]})
    assert Operation("own-source") is Operation.OWN_SOURCE


PER_PRINCIPAL = Policy.from_json({"allow": [
    {"actors": ["*@example.com"], "operations": ["own-source"], "sources": ["{principal}/*"]},
    {"actors": ["*@partner.org"], "operations": ["contribute"],
     "sources": ["{principal}/inbox"]},
]})


@pytest.mark.parametrize(("principal", "source", "allowed"), [
    ("alice@example.com", "alice@example.com/wind", True),
    ("bob@example.com", "alice@example.com/wind", False),  # alice's
    ("alice@example.com", "alice@example.com", True),  # not of the shape: anyone's ...
    ("bob@example.com", "alice@example.com", True),  # ... as any unreserved source
    ("mallory@other.org", "mallory@other.org/x", True),  # the actors do not name mallory:
    ("alice@example.com", "mallory@other.org/x", True),  # not reserved, anyone's
    ("alice@example.com", "alice.example.com/x", True),  # the name is matched exactly
])
def test_a_source_pattern_per_principal(principal: str, source: str, allowed: bool) -> None:
    assert bool(PER_PRINCIPAL.may_publish_source(principal, source)) is allowed


def test_the_placeholder_binds_contribute_too_and_other_braces_are_refused() -> None:
    assert PER_PRINCIPAL.may_contribute("p@partner.org", "p@partner.org/inbox")
    assert not PER_PRINCIPAL.may_contribute("p@partner.org", "q@partner.org/inbox")
    for sources in (["{user}/*"], ["a}"], ["{principal"]):
        with pytest.raises(InvalidPolicyError):
            Policy.from_json({"allow": [{"actors": ["a"], "operations": ["own-source"],
                                         "sources": sources}]})
