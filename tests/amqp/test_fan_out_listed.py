"""fan_out given every entry as a list (a relay's usual batch: one answer per topic and
permission token per link, not per publication) offers each link exactly what it offers given
the same entries by index, and keeps the same in the replay cache."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace
from typing import Any

import pytest

from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.amqp.component.publishing import fan_out
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.context import LinkContext
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.journal.recent import RecentEntries

TOPICS = ("/load/a", "/load/b", "/other/c")
TOKENS = (None, "t1", "secret")


def _entitlements() -> dict[str, tuple[Entitlement, bool]]:
    filtered = {"dialect": "basic", "type": "exact", "property": "type", "value": "correction"}
    return {
        "all": (Entitlement(topics=("/#",), grant=("*",)), True),
        "load": (Entitlement(topics=("/load/#",), grant=("t1",)), True),
        "not-b": (Entitlement(topics=("/#",), exclude=("/load/b",), grant=("*",),
                              deny=("secret",)), True),
        "none": (Entitlement(topics=("/nothing/#",)), True),
        "filtered": (Entitlement(topics=("/#",), grant=("*",), filters=[filtered]), True),
        "single": (Entitlement(topics=("/load/#",), grant=("*",)), False),
    }


def _component() -> Any:
    links = {
        name: SubscriberLink(
            name=name, address="/#", entitlement=entitlement, sequencer=LinkSequencer(16, 1.0),
            context=LinkContext(16, 100), batch=batch, max_batch=256, max_pending=10**6,
            source_bits=lambda _s: 32)
        for name, (entitlement, batch) in _entitlements().items()
    }
    return SimpleNamespace(
        clock=time.monotonic, links=links, pump_soon=lambda _link: None,
        recent=RecentEntries(1 << 20, lambda _e, _p: True),
        contributions=SimpleNamespace(published=lambda _pubs: None),
        subscriptions=SimpleNamespace(policy=lambda: SimpleNamespace(permissive=True)),
        outgoing_bits=32)


def _state(component: Any) -> tuple[Any, ...]:
    offered = {name: list(link.pending) for name, link in component.links.items()}
    recent = component.recent
    runs = {s: (r.first, r.head, list(r.entries), list(r.keys)) for s, r in recent._runs.items()}
    return offered, runs, recent.bytes


@pytest.mark.parametrize("seed", range(6))
def test_listed_entries_offer_what_indexed_entries_offer(seed: int) -> None:
    rng = random.Random(seed)
    by_index, listed = _component(), _component()
    seq = 0
    for _ in range(40):
        pubs = []
        for _ in range(rng.randrange(1, 60)):
            seq += 1
            pubs.append(Publication(
                rng.choice(TOPICS), "feed", seq,
                rng.choice([PublishType.UPDATE, PublishType.UPDATE, PublishType.CORRECTION]),
                {"n": seq}, permtoken=rng.choice(TOKENS)))
        entries: list[bytes | None] = [encode_entry(p, lambda _s: 32) for p in pubs]
        fan_out(by_index, pubs, dict(enumerate(entries)))
        fan_out(listed, pubs, list(entries))
        assert _state(listed) == _state(by_index)
    offered = _state(listed)[0]
    # every kind of answer was exercised: all, some, none of a batch
    assert offered["all"]
    assert offered["none"] == []
    assert 0 < len(offered["not-b"]) < len(offered["all"])
    assert 0 < len(offered["filtered"]) < len(offered["all"])
    assert all(entry is not None for _pub, entry in offered["load"])
    assert all(entry is None for _pub, entry in offered["single"])
