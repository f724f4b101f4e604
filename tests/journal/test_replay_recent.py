"""A source replay from the recently fanned-out entries (issue 26, :mod:`journal.recent`).

The component keeps the batch entries it fanned out lately (:class:`RecentEntries`) and a
replay sends from them where they hold the numbers. These tests hold that it answers exactly
what the journal path answers (the same entries, the link's entitlement and filters, the
link cover, the per-request cap, numbers trimmed meanwhile) and falls back to the journal
wherever the cache does not hold a number (evicted, a run broken, a journal emptied).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from seqrepair.amqp.component.replaywire import JournaledEntries, entry_matches
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.budget import RefusalPolicy
from seqrepair.core.filters import BasicFilter
from seqrepair.core.messages import (
    GapError,
    Publication,
    PublishType,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.journal import GapFillService, Journal, Replay
from seqrepair.journal.recent import ENTRY_OVERHEAD, RecentEntries

pytestmark = pytest.mark.redis

BITS = 16


def bits_of(_source: str) -> int:
    return BITS


def pubs(source: str, first: int, count: int, **kw: Any) -> list[Publication]:
    return [
        Publication(kw.get("topic", f"/t/{i % 3}"), source, i,
                    kw.get("ptype", PublishType.UPDATE if i % 5 else PublishType.CORRECTION),
                    {"n": i, "pad": "x" * (i % 40)}, permtoken=kw.get("permtoken"),
                    timestamp=1.7e9 + i if i % 2 else None)
        for i in range(first, first + count)
    ]


def fanned_out(journal: Journal, recent: RecentEntries | None, batch: list[Publication]) -> None:
    """What the component does: journal, then keep each publication's entry."""
    journal.append(batch, BITS)
    if recent is not None:
        recent.add_many(batch, [encode_entry(p, bits_of) for p in batch])


def answer(journal: Journal, entitlement: Entitlement, recent: RecentEntries | None, *,
           after: int = 0, source: str = "feed.a", max_range: int | None = None,
           link_through: int | None = None, service: GapFillService | None = None
           ) -> list[object]:
    if service is None:
        service = GapFillService(journal, policy=RefusalPolicy(
            max_range=100_000 if max_range is None else max_range))
        service.attach("L", entitlement, start_after={})
    got = service.answer_source_gap(
        "L", SourceGapRequest(after={source: after}, link_through=link_through), 0.0,
        encoder=JournaledEntries(bits_of), recent=recent)
    if isinstance(got, GapError):
        return [got]
    assert isinstance(got, Replay), got
    return list(got)


def wire(frames: list[object]) -> list[object]:
    """Frames as they go out: entries as bytes, the closing frame as itself."""
    return [f if type(f) is bytes or isinstance(f, ReplayComplete | GapError)
            else encode_entry(f, bits_of) for f in frames]  # type: ignore[arg-type]


def both(journal: Journal, entitlement: Entitlement, recent: RecentEntries,
         **kw: Any) -> list[object]:
    """The answer from the cache, held equal to the journal path's."""
    served = recent.stats["served"]
    cached = wire(answer(journal, entitlement, recent, **kw))
    plain = wire(answer(journal, entitlement, None, **kw))
    assert cached == plain
    assert recent.stats["served"] > served  # the cache did answer (part of) it
    return cached


def test_a_replay_from_the_cache_sends_what_the_journal_sends(journal: Journal) -> None:
    recent = RecentEntries(1 << 20, entry_matches)
    for first in range(1, 301, 50):
        fanned_out(journal, recent, pubs("feed.a", first, 50))
    got = both(journal, Entitlement(["/t/#"]), recent, after=17)
    assert len(got) == 300 - 17 + 1
    assert got[-1] == ReplayComplete(through={"feed.a": 300},
                                     request=SourceGapRequest(after={"feed.a": 17}))
    assert recent.stats["served"] == 283


def test_the_cache_applies_the_entitlement_and_filters(journal: Journal) -> None:
    recent = RecentEntries(1 << 20, entry_matches)
    fanned_out(journal, recent, pubs("feed.a", 1, 90))
    fanned_out(journal, recent, pubs("feed.a", 91, 30, permtoken="gold"))
    only = Entitlement(["/t/1", "/t/2"], filters=(BasicFilter("suffix", "subject", "/2"),))
    got = both(journal, only, recent)
    sent = [f for f in got if type(f) is bytes]
    assert sent
    assert len(sent) == sum(1 for i in range(1, 121) if i % 3 == 2 and i <= 90)
    # a permission token the link is not granted: nothing of those
    got = both(journal, Entitlement(["/t/#"]), recent)
    assert len([f for f in got if type(f) is bytes]) == 90
    got = both(journal, Entitlement(["/t/#"], grant={"gold"}), recent)
    assert len([f for f in got if type(f) is bytes]) == 120


def test_evicted_numbers_come_from_the_journal_the_rest_from_the_cache(journal: Journal) -> None:
    batch = pubs("feed.a", 1, 200)
    size = sum(len(encode_entry(p, bits_of)) + ENTRY_OVERHEAD for p in batch[100:])
    recent = RecentEntries(size, entry_matches)  # room for the newest 100 only
    fanned_out(journal, recent, batch)
    assert recent.oldest("feed.a") == 101
    got = both(journal, Entitlement(["/t/#"]), recent, after=40)
    assert len(got) == 161
    assert recent.stats["served"] == 100


def test_a_run_broken_by_numbers_it_did_not_see_is_not_bridged(journal: Journal) -> None:
    recent = RecentEntries(1 << 20, entry_matches)
    fanned_out(journal, recent, pubs("feed.a", 1, 50))
    fanned_out(journal, None, pubs("feed.a", 51, 10))  # journaled by another writer
    fanned_out(journal, recent, pubs("feed.a", 61, 40))
    assert recent.oldest("feed.a") == 61
    got = both(journal, Entitlement(["/t/#"]), recent)
    assert len(got) == 101
    assert recent.stats["served"] == 40


def test_the_per_request_cap_and_the_link_cover_hold(journal: Journal) -> None:
    recent = RecentEntries(1 << 20, entry_matches)
    fanned_out(journal, recent, pubs("feed.a", 1, 300))
    got = both(journal, Entitlement(["/t/#"]), recent, max_range=120, after=10)
    assert len(got) == 121
    closing = got[-1]
    assert isinstance(closing, ReplayComplete)
    assert closing.more
    assert closing.through == {"feed.a": 130}
    # the link numbered other 1..4, then feed.a 201.. from link number 5: asked with
    # link_through 5, feed.a 202 on is the link's to bring, the replay stops before it
    service = GapFillService(journal)
    service.attach("L", Entitlement(["/t/#"]), start_after={})
    for link_seq in range(1, 5):
        service.record("L", pubs("other", link_seq, 1)[0].with_link(link_seq))
    for link_seq, pub in enumerate(pubs("feed.a", 201, 10), start=5):
        service.record("L", pub.with_link(link_seq))
    cached = wire(answer(journal, Entitlement(["/t/#"]), recent, link_through=5,
                         service=service))
    plain = wire(answer(journal, Entitlement(["/t/#"]), None, link_through=5, service=service))
    assert cached == plain
    assert len(cached) == 202
    closing = cached[-1]
    assert isinstance(closing, ReplayComplete)
    assert closing.through == {"feed.a": 201}


def _trimmed(journal: Journal, recent: RecentEntries | None, sent_first: int) -> list[object]:
    """A replay of 1..120 whose numbers through 80 retention trims once it has sent
    ``sent_first`` (0: as soon as it was answered, before it read anything)."""
    service = GapFillService(journal, page_size=50)
    service.attach("L", Entitlement(["/t/#"]), start_after={})
    replay = service.answer_source_gap("L", SourceGapRequest(after={"feed.a": 0}), 0.0,
                                       encoder=JournaledEntries(bits_of), recent=recent)
    assert isinstance(replay, Replay)
    frames = iter(replay)
    first = [next(frames) for _ in range(sent_first)]
    assert all(type(f) is bytes for f in first)
    journal.trim_through("feed.a", 80, now=0.0)
    return list(frames)


def test_numbers_trimmed_meanwhile_are_answered_trimmed(
    journal: Journal, redis_client: redis.Redis
) -> None:
    recent = RecentEntries(1 << 20, entry_matches)
    fanned_out(journal, recent, pubs("feed.a", 1, 120))
    rest = _trimmed(journal, recent, 50)  # trimmed before its next block is read
    assert len(rest) == 1, rest
    assert isinstance(rest[0], GapError)
    assert rest[0].reason == "trimmed"
    assert rest[0].trimmed_through == {"feed.a": 80}
    assert recent.stats["served"] == 50
    # trimmed before anything was read: the journal path's answer, items named included
    redis_client.flushdb()
    recent = RecentEntries(1 << 20, entry_matches)
    fanned_out(journal, recent, pubs("feed.a", 1, 120))
    cached = _trimmed(journal, recent, 0)
    assert recent.stats["served"] == 0
    redis_client.flushdb()
    fanned_out(journal, None, pubs("feed.a", 1, 120))
    plain = _trimmed(journal, None, 0)
    assert len(plain) == 1
    assert isinstance(plain[0], GapError)
    assert cached == plain


def test_an_emptied_journal_is_not_answered_from_the_cache(journal: Journal) -> None:
    recent = RecentEntries(1 << 20, entry_matches)
    fanned_out(journal, recent, pubs("feed.a", 1, 60))
    journal.client.flushdb()
    journal.append(pubs("feed.a", 1, 20, topic="/t/new"), BITS)  # numbers used again
    got = answer(journal, Entitlement(["/t/#"]), recent)
    plain = answer(journal, Entitlement(["/t/#"]), None)
    assert wire(got) == wire(plain)
    assert len(got) == 21
    assert recent.stats["served"] == 0


def test_the_cache_is_bounded_and_zero_keeps_nothing() -> None:
    batch = pubs("feed.a", 1, 5000)
    entries = [encode_entry(p, bits_of) for p in batch]
    recent = RecentEntries(50_000, entry_matches)
    recent.add_many(batch, entries)
    assert 0 < recent.bytes <= 50_000
    oldest = recent.oldest("feed.a")
    assert oldest is not None
    assert oldest > 4000
    got = recent.block("feed.a", oldest, 5000)
    assert got is not None
    assert got[0] == entries[oldest - 1 :]
    assert recent.block("feed.a", oldest - 1, 5000) is None
    none = RecentEntries(0, entry_matches)
    none.add_many(batch, entries)
    assert none.bytes == 0
    assert none.oldest("feed.a") is None


def test_an_entry_only_proton_can_write_ends_the_run() -> None:
    batch = pubs("feed.a", 1, 30)
    recent = RecentEntries(1 << 20, entry_matches)
    recent.add_many(batch[:10], [encode_entry(p, bits_of) for p in batch[:10]])
    recent.add(batch[10], None)
    recent.add_many(batch[11:], [encode_entry(p, bits_of) for p in batch[11:]])
    assert recent.block("feed.a", 5, 30) is None
    assert recent.oldest("feed.a") == 12
