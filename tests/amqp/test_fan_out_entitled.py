"""fan_out given a relay's list of entries offers each link exactly what its entitlement
allows (asked directly, not through the link's remembered answers), with the entry each
publication came with, in order; and the replay cache then serves, for every number it holds,
the bytes that number came with. The links' remembered answers are made to clear mid-batch,
the filtered links read the publish type, and batches mix sources, tokens and gaps."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace
from typing import Any

import pytest

from seqrepair.amqp.component import links as links_module
from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.amqp.component.publishing import fan_out
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.context import LinkContext
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.journal.recent import RecentEntries

CORRECTIONS = {"dialect": "basic", "type": "exact", "property": "type", "value": "correction"}
ENTITLEMENTS = (
    Entitlement(topics=("/#",), grant=("*",)),
    Entitlement(topics=("/t/1", "/t/3"), grant=("a",)),
    Entitlement(topics=("/#",), grant=("*",), deny=("b",), exclude=("/t/2",)),
    Entitlement(topics=("/#",), grant=("*",), filters=[CORRECTIONS]),
    Entitlement(topics=("/t/#",), grant=("a", "b"), filters=[CORRECTIONS]),
)


def _component(max_bytes: int) -> Any:
    links = {
        f"{i}-{batch}": SubscriberLink(
            name=f"{i}-{batch}", address="/#", entitlement=entitlement,
            sequencer=LinkSequencer(16, 1.0), context=LinkContext(16, 100), batch=batch,
            max_batch=256, max_pending=10**7, source_bits=lambda _s: 32)
        for i, entitlement in enumerate(ENTITLEMENTS) for batch in (True, False)
    }
    return SimpleNamespace(
        clock=time.monotonic, links=links, pump_soon=lambda _link: None,
        recent=RecentEntries(max_bytes, lambda _e, _p: True),
        contributions=SimpleNamespace(published=lambda _pubs: None),
        subscriptions=SimpleNamespace(policy=lambda: SimpleNamespace(permissive=True)),
        outgoing_bits=32)


@pytest.mark.parametrize("seed", range(4))
def test_listed_offers_are_what_each_entitlement_allows_and_the_cache_serves_their_bytes(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(links_module, "ALLOWS_CACHE", 3)  # cleared within a batch's keys
    rng = random.Random(seed)
    component = _component(rng.choice([2000, 6000, 10**6]))
    recent = component.recent
    seq: dict[str, int] = {}
    came_with: dict[tuple[str, int], bytes] = {}
    for _ in range(30):
        pubs = []
        for _ in range(rng.randrange(0, 40)):
            source = rng.choice("xy")
            seq[source] = seq.get(source, 0) + rng.choice((1, 1, 1, 2))  # some gaps
            pubs.append(Publication(
                f"/t/{rng.randrange(6)}", source, seq[source],
                rng.choice([PublishType.UPDATE, PublishType.CORRECTION]), {"n": seq[source]},
                permtoken=rng.choice([None, "a", "b", "c"])))
        entries: list[bytes | None] = [
            None if rng.random() < 0.05 else encode_entry(p, lambda _s: 32) for p in pubs]
        for pub, entry in zip(pubs, entries, strict=True):
            if entry is not None:
                came_with[(pub.source, pub.source_seq)] = entry
        before = {name: len(link.pending) for name, link in component.links.items()}
        fan_out(component, pubs, list(entries))
        for name, link in component.links.items():
            assert list(link.pending)[before[name]:] == [
                (pub, entry if link.batch else None)
                for pub, entry in zip(pubs, entries, strict=True)
                if link.entitlement.allows(pub)], name
        assert len(recent._order) == len(recent._sizes)
        assert sum(recent._sizes) == recent.bytes <= recent.max_bytes
        for source in "xy":
            oldest = recent.oldest(source)
            if oldest is None:
                continue
            block = recent.block(source, oldest, 10**9)
            assert block is not None
            for offset, entry in enumerate(block[0]):
                assert entry == came_with[(source, oldest + offset)]
    assert any(link.pending for link in component.links.values())
    assert recent.stats["runs_started"] > 1
