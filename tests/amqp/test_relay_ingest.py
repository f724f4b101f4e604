"""A relay's fan-out of journaled batches (``Ingest.relayed_journaled``): the usual batch (one
source's, bare, numbers rising past what went out) goes out whole without the per-publication
sorting of ``_fresh``; anything else goes the ``_fresh`` way. Both give the same answer."""

from __future__ import annotations

import random
from typing import Any

from seqrepair.amqp.component.ingest import Ingest
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.messages import Publication

NO_ENTRY = b"\x00"  # the upstream subscriber's "encode it" (not a publication entry)


class Port:
    """What ``Ingest`` asks of its journal here: high-waters, losses, copies read back."""

    def __init__(self) -> None:
        self.lost_journaled: set[str] = set()
        self.held: dict[tuple[str, int], Publication] = {}

    def high_waters(self) -> dict[str, int]:
        return {}

    def read(self, source: str, first: int, last: int) -> list[Publication]:
        return [self.held[(source, n)] for n in range(first, last + 1)
                if (source, n) in self.held]

    def high_water(self, source: str) -> int:
        return max((n for s, n in self.held if s == source), default=0)


def ingest() -> tuple[Ingest, list[tuple[list[Publication], dict[int, Any]]]]:
    out: list[tuple[list[Publication], Any]] = []
    made = Ingest(Port(), Decoder(), lambda pubs, entries: out.append((list(pubs), entries)),
                  {"duplicates": 0, "ingested": 0})
    return made, out


def pub(source: str, seq: int, topic: str = "/t/a", link: int | None = None,
        again: bool = False) -> Publication:
    return Publication(topic, source, seq, "update", {"n": seq}, link_seq=link,
                       retransmit=again)


def test_a_rising_bare_batch_goes_out_whole_with_its_regular_entries() -> None:
    made, out = ingest()
    pubs = [pub("s", n, f"/t/{n % 3}") for n in (3, 4, 9, 10)]
    items = [encode_entry(p, lambda _s: 64) for p in pubs]
    items[2] = NO_ENTRY
    assert made.relayed_journaled(pubs, items) == 4
    assert out == [(pubs, {0: items[0], 1: items[1], 3: items[3]})]
    assert made.ingested == {"s": 10}
    assert set(made.topics.known) == {"/t/0", "/t/1"}
    assert made.stats["duplicates"] == 0


def test_a_rising_bare_batch_of_regular_entries_hands_on_every_entry_as_a_list() -> None:
    made, out = ingest()
    pubs = [pub("s", n, f"/t/{n % 3}") for n in (3, 4, 9, 10)]
    items = [encode_entry(p, lambda _s: 64) for p in pubs]
    assert made.relayed_journaled(pubs, items) == 4
    assert out == [(pubs, items)]
    assert type(out[0][1]) is list  # fan_out: every entry known, a verdict per key


def test_copies_of_what_went_out_are_skipped_as_before() -> None:
    made, out = ingest()
    first = [pub("s", n) for n in (1, 2, 3)]
    made.relayed_journaled(first, [encode_entry(p, lambda _s: 64) for p in first])
    made.journal.held.update(((p.source, p.source_seq), p) for p in first)
    again = [pub("s", n) for n in (2, 3, 4)]
    assert made.relayed_journaled(again, [encode_entry(p, lambda _s: 64) for p in again]) == 1
    assert out[-1][0] == [again[2]]
    assert made.stats["duplicates"] == 2
    assert made.ingested == {"s": 4}


def test_the_fast_answer_is_fresh_s_answer() -> None:
    rng = random.Random(7)
    for _ in range(300):
        made, out = ingest()
        slow, _ = ingest()
        start = rng.randint(0, 5)
        made.ingested["a"] = slow.ingested["a"] = start
        pubs = []
        seq = rng.randint(1, 8)
        for _ in range(rng.randint(1, 8)):
            seq += rng.choice((-1, 0, 1, 1, 2, 5))
            pubs.append(pub(rng.choice("aab"), max(seq, 1), link=rng.choice((None, None, 7)),
                            again=rng.random() < 0.1))
        items = [rng.choice((NO_ENTRY, encode_entry(p, lambda _s: 64))) for p in pubs]
        for p in pubs:  # copies are the journal's own publications (resends)
            made.journal.held[(p.source, p.source_seq)] = p.with_link(None, retransmit=False)
        fresh, entries = slow._fresh(pubs, items)
        count = made.relayed_journaled(pubs, items)
        assert count == len(fresh)
        # entries by index: a list when every one is known (fan_out takes both)
        assert [(got, dict(enumerate(e)) if isinstance(e, list) else e)
                for got, e in out] == ([(fresh, entries)] if fresh else [])
        if fresh:
            slow._publish(fresh, entries)
        assert made.ingested == slow.ingested
        assert made.stats == slow.stats


def test_a_batch_rising_when_submitted_is_compared_again_when_journaled() -> None:
    """``rising`` (checked when the relay submitted the batch) spares the pass over it, not
    the comparison with what went out since: a batch overtaken meanwhile (an earlier one
    carried its first numbers) is sorted as without the flag."""
    made, out = ingest()
    batch = [pub("s", n) for n in (3, 4, 5)]
    assert made.relayed_rising(batch)
    assert not made.relayed_rising([pub("s", 3), pub("t", 4)])
    assert not made.relayed_rising([pub("s", 3, link=7)])
    assert not made.relayed_rising([pub("s", 4), pub("s", 3)])
    earlier = [pub("s", n) for n in (1, 2, 3)]
    made.relayed_journaled(earlier, [encode_entry(p, lambda _s: 64) for p in earlier], True)
    made.journal.held.update(((p.source, p.source_seq), p) for p in earlier)
    assert not made.relayed_rising(batch)  # 3 went out meanwhile
    items = [encode_entry(p, lambda _s: 64) for p in batch]
    assert made.relayed_journaled(batch, items, True) == 2
    assert out[-1][0] == batch[1:]
    assert made.stats["duplicates"] == 1
    assert made.ingested == {"s": 5}
    later = [pub("s", n) for n in (7, 9)]
    assert made.relayed_journaled(later, [encode_entry(p, lambda _s: 64) for p in later],
                                  True) == 2
    assert out[-1] == (later, [encode_entry(p, lambda _s: 64) for p in later])
