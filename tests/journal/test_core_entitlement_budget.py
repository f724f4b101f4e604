"""Core pieces of the gap-fill service: entitlement (topics + tokens) and the resend budget."""

from __future__ import annotations

import pytest

from seqrepair.core.budget import RefusalPolicy, ResendBudget
from seqrepair.core.errors import (
    InvalidConfigError,
    InvalidMessageError,
    InvalidTopicPatternError,
)
from seqrepair.core.messages import Publication
from seqrepair.core.permissions import Entitlement


def pub(topic: str, token: str | None = None) -> Publication:
    return Publication(topic, "feed.a", 1, "update", {}, permtoken=token)


def test_topic_patterns_select() -> None:
    ent = Entitlement(topics=["/weather/#", "/news/*"])
    assert ent.allows(pub("/weather/wind/LEMD"))
    assert ent.allows(pub("/news/uk"))
    assert not ent.allows(pub("/news/uk/sport"))
    assert not ent.allows(pub("/sport"))


def test_untokened_is_visible_tokened_needs_a_grant() -> None:
    ent = Entitlement(topics="/#", grant={"6747"})
    assert ent.allows(pub("/a"))
    assert ent.allows(pub("/a", "6747"))
    assert not ent.allows(pub("/a", "9999"))


def test_deny_overrides_grant_and_wildcard() -> None:
    ent = Entitlement(topics="/#", grant={"*"}, deny={"secret"})
    assert ent.allows(pub("/a", "anything"))
    assert not ent.allows(pub("/a", "secret"))


def test_an_invalid_topic_is_not_visible_and_no_publication_carries_one() -> None:
    assert not Entitlement(topics="/#").allows_topic("no-slash")
    with pytest.raises(InvalidMessageError):
        pub("no-slash")


def test_bad_entitlements_raise_typed_errors() -> None:
    with pytest.raises(InvalidTopicPatternError):
        Entitlement(topics=["/a/b*"])
    with pytest.raises(InvalidConfigError):
        Entitlement(topics="/#", grant="abc")
    with pytest.raises(InvalidConfigError):
        Entitlement(topics="/#", deny={""})
    with pytest.raises(InvalidConfigError):
        Entitlement(topics=5)


def test_budget_spends_refills_and_caps() -> None:
    budget = ResendBudget(capacity=100, refill_per_second=10.0)
    assert budget.try_spend(80, now=0.0)
    assert not budget.try_spend(30, now=0.0)  # refused costs nothing
    assert budget.available(0.0) == 20
    assert budget.try_spend(30, now=1.0)  # 20 + 10 refilled
    assert budget.available(100.0) == 100  # capped
    assert budget.available(50.0) == 100  # time running backwards refills nothing, no error


def test_budget_rejects_bad_input() -> None:
    with pytest.raises(InvalidConfigError):
        ResendBudget(capacity=0, refill_per_second=1.0)
    with pytest.raises(InvalidConfigError):
        ResendBudget(capacity=1, refill_per_second=-1.0)
    with pytest.raises(InvalidConfigError):
        ResendBudget(1, 1.0).try_spend(-1, 0.0)
    with pytest.raises(InvalidConfigError):
        ResendBudget(1, 1.0).available(float("nan"))


def test_policy_refuses_large_range_then_budget() -> None:
    policy = RefusalPolicy(max_range=50, budget_capacity=60, budget_refill_per_second=0.0)
    budget = policy.new_budget()
    assert "exceeds" in (policy.refusal(51, budget, 0.0) or "")
    assert policy.refusal(50, budget, 0.0) is None
    assert "budget" in (policy.refusal(11, budget, 0.0) or "")
    assert policy.refusal(10, budget, 0.0) is None
