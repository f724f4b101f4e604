"""RecentEntries.add_many keeps exactly what add, one publication at a time, keeps."""

from __future__ import annotations

import random
from typing import Any

import pytest

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import recent as recent_module
from seqrepair.journal.recent import RecentEntries


def _state(recent: RecentEntries) -> tuple[Any, ...]:
    runs = {s: (r.first, r.head, list(r.entries), list(r.keys)) for s, r in recent._runs.items()}
    samples = {s: dict(v) for s, v in recent._samples.items()}
    order = [(r.first, len(r.entries), size)
             for r, size in zip(recent._order, recent._sizes, strict=True)]
    return runs, samples, order, recent.bytes, dict(recent.stats)


@pytest.mark.parametrize("seed", range(8))
def test_add_many_is_add_one_by_one(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several sources, resends, gaps, entries only proton writes (None), a publisher's
    bytearray slices, new keys past MAX_KEYS (made small), eviction (a small budget)."""
    monkeypatch.setattr(recent_module, "MAX_KEYS", 4)
    rng = random.Random(seed)
    same = lambda _e, _p: True  # noqa: E731  # not asked here
    one, many = RecentEntries(rng.choice([0, 600, 5000, 10**6]), same), None
    many = RecentEntries(one.max_bytes, same)
    slow: list[int] = []
    add = many.add
    many.add = lambda pub, entry: (slow.append(1), add(pub, entry))[1]  # type: ignore[method-assign]
    total = 0
    seq = {"a": 0, "b": 0, "c": 0}
    for _ in range(300):
        pubs: list[Publication] = []
        entries: list[bytes | None] = []
        for _ in range(rng.randrange(0, 30)):
            source = rng.choice(["a", "a", "a", "b", "c"])
            roll = rng.random()
            if roll < 0.05:  # a resend of what went out
                number = max(1, seq[source] - rng.randrange(0, 5))
            elif roll < 0.1:  # a gap
                number = seq[source] = seq[source] + rng.randrange(2, 5)
            else:
                number = seq[source] = seq[source] + 1
            topic = rng.choice(["/t/a"] * 8 + ["/t/b", "/t/c", "/t/d", "/t/e", "/t/f"])
            pubs.append(Publication(topic, source, number,
                                    rng.choice([PublishType.UPDATE, PublishType.CORRECTION]),
                                    {"n": number}, permtoken=rng.choice([None, None, "tok"])))
            entry = bytes(rng.randrange(0, 256) for _ in range(rng.randrange(1, 60)))
            kind = rng.random()
            entries.append(None if kind < 0.03 else bytearray(entry) if kind < 0.06 else entry)
        for pub, entry in zip(pubs, entries, strict=True):
            one.add(pub, entry)
        many.add_many(pubs, entries)
        total += len(pubs)
        assert _state(many) == _state(one)
    assert one.max_bytes == 0 or one.stats["runs_started"] > 10
    assert one.max_bytes not in (600, 5000) or one.stats["evicted"] > 0  # evicting too
    assert one.max_bytes == 0 or len(slow) < total * 0.9  # some kept in line


def test_a_run_of_received_entries_is_kept_in_line() -> None:
    """The component's usual batch: one source's next numbers under one key, the entries
    slices of the received message (bytearray), only the first by add."""
    recent = RecentEntries(10**6, lambda _e, _p: True)
    slow: list[int] = []
    add = recent.add
    recent.add = lambda pub, entry: (slow.append(1), add(pub, entry))[1]  # type: ignore[method-assign]
    pubs = [Publication("/t/a", "a", n, fields={"n": n}) for n in range(1, 257)]
    received = bytearray(b"e" * 256 * 10)
    recent.add_many(pubs, [received[i * 10:(i + 1) * 10] for i in range(256)])
    assert len(slow) == 1
    block = recent.block("a", 1, 256)
    assert block is not None
    assert block[0] == [b"e" * 10] * 256
    assert all(type(entry) is bytes for entry in block[0])
