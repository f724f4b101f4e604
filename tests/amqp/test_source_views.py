"""Who may learn of a source (the attach reply's ``seqrepair-start-after``, CAPABILITIES'
sources) is decided on the topics the principal is entitled to, however many topics the
source published before them (:mod:`seqrepair.amqp.component.sourceviews`). Before, the
component kept the first 256 topics of a source: a principal entitled only to a later one
never learnt of the source. Over a real ``seqrepair serve`` with a policy, then the rule
(classes, a policy reload) without processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.amqp.component.sourceviews import MAX_TOPICS_PER_SOURCE, SourceViews
from seqrepair.core.policy import Operation, Policy

from .conftest import ComponentProcess, start_after

POLICY = """
[[allow]]
actors = ["anonymous"]
operations = ["publish"]
topics = ["/#"]

[[allow]]
actors = ["anonymous"]
operations = ["subscribe"]
topics = ["/late/#"]
"""



@pytest.mark.amqp
@pytest.mark.redis
def test_a_source_is_shown_to_a_principal_entitled_only_to_topics_past_the_first_256(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    comp = component("--heartbeat", "0.2", "--policy", str(policy))
    early = [(f"/early/{i}", {"n": i}, "update") for i in range(MAX_TOPICS_PER_SOURCE + 44)]
    with Publisher(comp.url, "feed.many") as publisher:
        publisher.publish_many(early)
        publisher.publish("/late/x", {"n": 1})  # the only topic anonymous may subscribe to
        assert publisher.flush(30)
    with Publisher(comp.url, "feed.early") as publisher:
        publisher.publish_many(early[:10])
        assert publisher.flush(30)
    assert start_after(comp.url, "/late/#", timeout=10) == {"feed.many"}
    assert set(query_capabilities(comp.url).source_bits) == {"feed.many"}


def test_one_topic_per_class_decides_and_a_reload_classes_them_again() -> None:
    first = Policy.from_json({"allow": [
        {"actors": ["a"], "operations": ["subscribe"], "topics": ["/x/#"]},
        {"actors": ["b"], "operations": ["subscribe"], "topics": ["/x/late/#"]},
    ]})
    views = SourceViews()
    for i in range(10 * MAX_TOPICS_PER_SOURCE):
        views.learn(first, "s", f"/x/{i}")
    views.learn(first, "s", "/x/late/1")
    views.learn(first, "s", "/y/1")
    kept = list(views.topics(first, "s") or ())
    assert len(kept) == 3  # /x/..., /x/late/..., /y/... : three classes, whatever the count
    for who in ("a", "b"):
        assert any(first.decide(who, Operation.SUBSCRIBE, t) for t in kept), who
    assert not any(first.decide("c", Operation.SUBSCRIBE, t) for t in kept)
    assert views.topics(first, "unknown") is None
    # reloaded: c may subscribe to /y/#, a only to a topic kept among the first 256
    second = Policy.from_json({"allow": [
        {"actors": ["c"], "operations": ["subscribe"], "topics": ["/y/#"]},
        {"actors": ["a"], "operations": ["subscribe"], "topics": ["/x/7"]},
    ]})
    again = list(views.topics(second, "s") or ())
    for who in ("a", "c"):
        assert any(second.decide(who, Operation.SUBSCRIBE, t) for t in again), who
    assert not any(second.decide("b", Operation.SUBSCRIBE, t) for t in again)


def test_the_topics_kept_for_a_publisher_of_many_long_topics_are_few() -> None:
    """A hostile publisher (any principal that may publish, under a policy that restricts
    anyone) publishing distinct topics of the longest kind (1 KiB, ``MAX_TOPIC_BYTES``): the
    topics the component keeps to decide who may learn of its source (the topics kept, the
    cache of their classes) stay under 5 MiB, whatever their number (here 6,000: 6 MiB).
    Before, the cache of classes kept 65,536 topics (about 70 MiB of topics alone) before it
    was emptied."""
    from seqrepair.core.limits import MAX_TOPIC_BYTES

    policy = Policy.from_json({"allow": [
        {"actors": ["a"], "operations": ["subscribe"], "topics": ["/x/#"]},
    ]})
    views = SourceViews()
    padding = "p" * (MAX_TOPIC_BYTES - 16)
    for i in range(6000):
        views.learn(policy, "s", f"/x/{padding}/{i}")
    held = {*views._classed, *views._topic_of.values(),
            *(t for kept in views._kept.values() for t in kept)}
    assert sum(len(t) for t in held) < 5 << 20, len(held)
    assert list(views.topics(policy, "s") or ())  # still decides: one topic of the class
