"""A hostile principal against the bounds on sources and classes
(:mod:`seqrepair.amqp.component.sourcelimits`): it must not make another principal's
publications refused, nor make the component's bounds cost others their event loop."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from proton import Delivery
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.amqp.component.sourcelimits import SourceLimits
from seqrepair.amqp.component.sourceviews import (
    MAX_CLASSES,
    MAX_CLASSES_PER_SOURCE,
    SourceViews,
)
from seqrepair.amqp.wire.admission import LimitExceededError
from seqrepair.amqp.wire.framing import encode_frames
from seqrepair.core.messages import Publication
from seqrepair.core.policy import Policy
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, start_after
from .principals import MISSING, amqp_identity, serve_args

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

RESOURCE = "amqp:resource-limit-exceeded"
ALICE, MALLORY = "alice@example.com", "mallory@example.com"

WORDS = 17
"""Words of a topic each a pattern decides on alone: 2 ** 17 classes, past MAX_CLASSES."""
assert 1 << (WORDS - 1) <= MAX_CLASSES < 1 << WORDS


def _pattern(i: int) -> str:
    return "/c/" + "*/" * i + "x/#"


def _topic(bits: int) -> str:
    return "/c/" + "/".join("x" if bits >> i & 1 else "y" for i in range(WORDS))


CROSS_POLICY = "\n".join([
    '[[allow]]\nactors = ["*@example.com"]\noperations = ["publish", "subscribe"]\n'
    'topics = ["/#"]\n',
    *(f'[[allow]]\nactors = ["u{i}"]\noperations = ["subscribe"]\ntopics = ["{_pattern(i)}"]\n'
      for i in range(WORDS)),
])
"""Each of 17 principals may subscribe to the topics with ``x`` at its word: every topic's
set of words at ``x`` is its own class."""


def _send(sender: object, pubs: list[Publication]) -> str | None:
    delivery = sender.send(encode_frames(pubs), error_states=[])  # type: ignore[attr-defined]
    if delivery.remote_state == Delivery.ACCEPTED:
        return None
    condition = delivery.remote.condition
    return condition.name if condition is not None else str(delivery.remote_state)


@pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")
def test_one_principal_cannot_use_up_the_classes_of_every_source(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    """mallory publishes topics of 65,536 classes (256 sources of 256 each, within every
    per-source bound): were the global class cap not bounded per principal, alice's next topic
    of a class nobody published yet would be refused, her feed cut by another's traffic."""
    policy = tmp_path / "policy.toml"
    policy.write_text(CROSS_POLICY)
    comp = component("--heartbeat", "0.5", *serve_args(tmp_path, ALICE, MALLORY),
                     "--policy", str(policy))
    def alice_sends(pub: Publication) -> str | None:  # on a connection of its own each time
        alice = BlockingConnection(comp.url, timeout=60, **amqp_identity(ALICE))
        try:
            return _send(alice.create_sender("/c/#"), [pub])
        finally:
            alice.close()

    assert alice_sends(Publication(_topic(0), "feed.alice", 1, fields={})) is None
    mallory = BlockingConnection(comp.url, timeout=60, **amqp_identity(MALLORY))
    refused_at = None
    try:
        m_sender = mallory.create_sender("/c/#")
        per_message = 16  # sources per message: 4,096 publications
        for first in range(0, MAX_CLASSES // MAX_CLASSES_PER_SOURCE, per_message):
            pubs = [Publication(_topic(s * MAX_CLASSES_PER_SOURCE + n), f"m.{s}", n + 1,
                                fields={})
                    for s in range(first, first + per_message)
                    for n in range(MAX_CLASSES_PER_SOURCE)]
            if _send(m_sender, pubs) is not None:
                refused_at = first
                break
    finally:
        mallory.close()
    late = _topic(1 << (WORDS - 1))  # a class nobody published
    assert alice_sends(Publication(late, "feed.alice", 2, fields={})) is None
    assert refused_at is not None, "mallory took every class of the component"
    comp.stop()
    assert comp.stop_counters()["classes_refused"] >= 1


# --- the rule, without processes -----------------------------------------------------------


def test_a_principal_over_its_allowance_costs_one_journal_lookup_not_one_per_source() -> None:
    """Past its allowance, a principal's message of 4,096 new source names asked the journal of
    each of them, one round trip after another on the event loop every link shares, only to
    refuse it: one that the journal does not hold is enough to refuse."""
    policy = Policy.from_json({"allow": [
        {"actors": ["*"], "operations": ["publish", "subscribe"], "topics": ["/#"]}]})
    asked: list[str] = []

    def journaled(source: str) -> bool:
        asked.append(source)
        return False

    limits = SourceLimits(views=SourceViews(), policy=lambda: policy, journaled=journaled,
                          stats={}, max_sources=100, max_sources_per_principal=2)
    limits.took("m", {"a", "b"})
    new = {f"n.{i}" for i in range(4096)}
    with pytest.raises(LimitExceededError):
        limits.check("m", [Publication("/x", s, 1, fields={}) for s in sorted(new)], new, 2)
    assert len(asked) <= 1, len(asked)


RELOAD_BEFORE = """
[[allow]]
actors = ["anonymous"]
operations = ["publish"]
topics = ["/#"]

[[allow]]
actors = ["anonymous"]
operations = ["subscribe"]
topics = ["/w/#"]
"""
RELOAD_AFTER = RELOAD_BEFORE.replace('topics = ["/w/#"]', 'topics = ["/w/a"]')


def test_after_a_policy_reload_a_source_is_shown_on_its_own_topics_not_anothers(
    component: Callable[..., ComponentProcess], tmp_path: Path,
) -> None:
    """feed.a and feed.b publish topics of one class (``/w/#``); a reload entitles anonymous
    only to ``/w/a``, which feed.b never published: feed.b must not be shown to it. Classed
    again on the one topic kept per class for every source (feed.a's), feed.b was."""
    policy = tmp_path / "policy.toml"
    policy.write_text(RELOAD_BEFORE)
    comp = component("--heartbeat", "0.2", "--policy", str(policy))
    for source, topic in (("feed.a", "/w/a"), ("feed.b", "/w/b")):
        with Publisher(comp.url, source) as publisher:
            publisher.publish(topic, {"n": 1})
            assert publisher.flush(30)
    assert start_after(comp.url, "/w/#") == {"feed.a", "feed.b"}
    policy.write_text(RELOAD_AFTER)
    comp.hang_up("access policy reloaded", 1)
    assert start_after(comp.url, "/w/a") == {"feed.a"}



def test_a_message_of_several_sources_past_the_allowance_is_refused_whole(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path,
) -> None:
    """One message, a kept source's next publication among three new sources where the
    allowance has room for two: rejected whole (nothing of it journaled, the kept source's
    number not taken), the refusal naming a new source; sent again without the third, taken."""
    comp = component("--heartbeat", "0.5", "--max-sources-per-principal", "3")
    conn = BlockingConnection(comp.url, timeout=20)
    journal = Journal.from_url(redis_url)
    try:
        sender = conn.create_sender("/m/#")
        assert _send(sender, [Publication("/m/a", "kept.0", 1, fields={})]) is None
        pubs = [Publication("/m/a", "kept.0", 2, fields={}),
                *(Publication("/m/a", f"new.{i}", 1, fields={}) for i in range(3))]
        delivery = sender.send(encode_frames(pubs), error_states=[])
        assert delivery.remote_state == Delivery.REJECTED
        condition = delivery.remote.condition
        assert condition is not None
        assert condition.name == RESOURCE
        assert "new." in str(condition.description), condition.description
        assert [journal.high_water(s) for s in ("kept.0", "new.0", "new.1", "new.2")] == [
            1, 0, 0, 0]
        assert _send(sender, pubs[:3]) is None  # room for two: taken, kept.0 continues at 2
        assert [journal.high_water(s) for s in ("kept.0", "new.0", "new.1")] == [2, 1, 1]
    finally:
        conn.close()
        journal.close()
