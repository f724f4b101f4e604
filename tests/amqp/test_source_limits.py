"""The sources the component keeps, and the classes of their topics, are bounded before a
publication is journaled (:mod:`seqrepair.amqp.component.sourcelimits`, WIRE.md "Resource
model"). Before, a publisher could invent sources without bound (the component kept state for
each for as long as it ran), and a source whose topics made more than 256 classes of the
access policy was hidden from a principal entitled only to topics of the later classes, its
publications journaled all the same. Over a real ``seqrepair serve`` and redis-server, then
the rule without processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery
from proton.utils import BlockingConnection

from seqrepair.amqp.component.sourcelimits import SourceLimits
from seqrepair.amqp.component.sourceviews import MAX_CLASSES_PER_SOURCE, SourceViews
from seqrepair.amqp.wire.admission import LimitExceededError
from seqrepair.amqp.wire.codec import encode
from seqrepair.core.messages import Publication
from seqrepair.core.policy import Operation, Policy
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, start_after
from .principals import MISSING, WEATHER_FOR_EXAMPLE_COM, amqp_identity, serve_args

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

RESOURCE = "amqp:resource-limit-exceeded"
ALICE, BOB, MALLORY = "alice@example.com", "bob@example.com", "mallory@example.com"


class Sender:
    """A publishing link to ``/#``-like ``address`` as ``principal``; :meth:`send` is one
    numbered publication's outcome (None: accepted, else the rejecting condition)."""

    def __init__(self, url: str, principal: str, address: str) -> None:
        self.conn = BlockingConnection(url, timeout=20, **amqp_identity(principal))
        self.sender = self.conn.create_sender(address)
        self.numbers: dict[str, int] = {}

    def send(self, source: str, topic: str) -> str | None:
        number = self.numbers.get(source, 0) + 1
        delivery = self.sender.send(encode(Publication(topic, source, number, fields={"n": 1})),
                                    error_states=[])
        if delivery.remote_state == Delivery.ACCEPTED:
            self.numbers[source] = number
            return None
        condition = delivery.remote.condition
        return condition.name if condition is not None else str(delivery.remote_state)

    def close(self) -> None:
        self.conn.close()



LIMITS_POLICY = WEATHER_FOR_EXAMPLE_COM


@pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")
def test_a_publisher_inventing_sources_is_refused_and_no_other_source_is(
    component: Callable[..., ComponentProcess], journal: Journal, tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(LIMITS_POLICY)
    comp = component("--heartbeat", "0.2", *serve_args(tmp_path, ALICE, BOB, MALLORY),
                     "--policy", str(policy), "--max-sources-per-principal", "3",
                     "--max-sources", "5")
    alice = Sender(comp.url, ALICE, "/weather/#")
    mallory = Sender(comp.url, MALLORY, "/weather/#")
    try:
        assert alice.send("feed.alice", "/weather/a") is None
        assert [mallory.send(f"made.{i}", "/weather/m") for i in range(3)] == [None] * 3
        assert mallory.send("made.3", "/weather/m") == RESOURCE  # a fourth of its own
        assert journal.high_water("made.3") == 0  # nothing of it journaled
        assert mallory.send("made.0", "/weather/m") is None  # its sources go on
        assert alice.send("feed.alice", "/weather/a") is None  # and everyone else's
        assert alice.send("feed.alice.2", "/weather/a") is None  # alice has her own allowance
    finally:
        alice.close()
        mallory.close()
    bob = Sender(comp.url, BOB, "/weather/#")
    try:  # 5 kept: the component is full (--max-sources), for new sources only
        assert bob.send("feed.bob", "/weather/b") == RESOURCE
        assert bob.send("feed.alice", "/weather/a") is None  # a kept source is never refused
    finally:
        bob.close()
    comp.stop()
    assert comp.stop_counters()["sources_refused"] == 2
    comp.start()  # the journal's sources count as kept after a restart: still full
    bob = Sender(comp.url, BOB, "/weather/#")
    try:
        assert bob.send("feed.bob", "/weather/b") == RESOURCE
        bob.numbers["made.1"] = journal.high_water("made.1")
        assert bob.send("made.1", "/weather/b") is None
    finally:
        bob.close()
    assert journal.high_water("feed.bob") == 0
    comp.stop()
    assert comp.stop_counters()["sources_refused"] == 1


CLASSES_POLICY = "\n".join([
    '[[allow]]\nactors = ["anonymous"]\noperations = ["publish"]\ntopics = ["/#"]\n',
    '[[allow]]\nactors = ["anonymous"]\noperations = ["subscribe"]\ntopics = ["/late/#"]\n',
    *(f'[[allow]]\nactors = ["u{i}"]\noperations = ["subscribe"]\ntopics = ["/t/{i}"]\n'
      for i in range(MAX_CLASSES_PER_SOURCE)),
])


def test_a_source_past_256_classes_is_refused_the_topic_never_hidden(
    component: Callable[..., ComponentProcess], journal: Journal, tmp_path: Path,
) -> None:
    """A policy that makes 257 classes of one source's topics (256 principals each allowed one
    topic, anonymous another): the topics of the first 256 classes are taken, the 257th is
    refused before it is journaled, so nothing anonymous may see of the source exists and
    hiding the source from it hides nothing (before: taken, journaled and fanned out, but the
    class past 256 not kept: anonymous, entitled to it, never learnt of the source)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(CLASSES_POLICY)
    comp = component("--heartbeat", "0.2", "--policy", str(policy))
    pub = Sender(comp.url, "anonymous", "/#")
    try:
        for i in range(MAX_CLASSES_PER_SOURCE):
            assert pub.send("feed.many", f"/t/{i}") is None, i
        late = pub.send("feed.many", "/late/x")
        held = journal.high_water("feed.many")
        assert late == RESOURCE, (late, held)
        assert held == MAX_CLASSES_PER_SOURCE  # nothing of it journaled
        assert pub.send("feed.many", "/t/7") is None  # a topic of a class it has: taken
        assert pub.send("feed.late", "/late/x") is None  # another source's
    finally:
        pub.close()
    assert start_after(comp.url, "/late/#") == {"feed.late"}
    comp.stop()
    assert comp.stop_counters()["classes_refused"] == 1


# --- the rule, without processes -----------------------------------------------------------


def _limits(views: SourceViews, policy: Policy, held: set[str] | None = None,
            **kwargs: Any) -> SourceLimits:
    return SourceLimits(views=views, policy=lambda: policy,
                        journaled=lambda source: source in (held or set()), stats={},
                        **kwargs)


def _pubs(source: str, *topics: str) -> list[Publication]:
    return [Publication(topic, source, n, fields={}) for n, topic in enumerate(topics, 1)]


def test_the_counts_refuse_only_new_sources_of_a_principal_over_its_own() -> None:
    policy = Policy.from_json({"allow": [
        {"actors": ["*"], "operations": ["publish", "subscribe"], "topics": ["/#"]}]})
    limits = _limits(SourceViews(), policy, held={"old.1"}, max_sources=5,
                     max_sources_per_principal=2)
    assert limits.check("m", _pubs("a", "/x"), {"a", "b"}, 0) == {"a", "b"}
    limits.took("m", {"a", "b"})
    with pytest.raises(LimitExceededError) as refused:
        limits.check("m", _pubs("c", "/x"), {"c"}, 2)
    assert (refused.value.expected, refused.value.got) == (2, 3)
    assert "--max-sources-per-principal" in refused.value.message
    assert limits.check("m", _pubs("old.1", "/x"), {"old.1"}, 2) == set()  # the journal's
    assert limits.check("m", _pubs("a", "/x"), set(), 2) == set()  # kept: no count
    assert limits.check("h", _pubs("d", "/x"), {"d"}, 4) == {"d"}  # another's allowance
    with pytest.raises(LimitExceededError, match="--max-sources"):
        limits.check("h", _pubs("e", "/x"), {"e"}, 5)
    assert limits.stats["sources_refused"] == 2


def test_a_class_is_never_dropped_so_the_cap_is_a_refusal() -> None:
    rules = [{"actors": [f"u{i}"], "operations": ["subscribe"], "topics": [f"/t/{i}"]}
             for i in range(MAX_CLASSES_PER_SOURCE + 10)]
    policy = Policy.from_json({"allow": rules})
    views = SourceViews()
    limits = _limits(views, policy)
    for i in range(MAX_CLASSES_PER_SOURCE):
        limits.check("p", _pubs("s", f"/t/{i}"), set(), 0)
        views.learn(policy, "s", f"/t/{i}")
    with pytest.raises(LimitExceededError) as refused:
        limits.check("p", _pubs("s", "/t/1", f"/t/{MAX_CLASSES_PER_SOURCE}"), set(), 0)
    assert refused.value.got == MAX_CLASSES_PER_SOURCE + 1
    limits.check("p", _pubs("s", "/t/3", "/t/4"), set(), 0)  # classes it has
    # learnt another way (a relay's feed): kept all the same, never hidden
    for i in range(MAX_CLASSES_PER_SOURCE, MAX_CLASSES_PER_SOURCE + 10):
        views.learn(policy, "s", f"/t/{i}")
    kept = list(views.topics(policy, "s") or ())
    for i in range(MAX_CLASSES_PER_SOURCE + 10):
        assert any(policy.decide(f"u{i}", Operation.SUBSCRIBE, t) for t in kept), i
