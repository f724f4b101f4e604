"""A source replay's fast path (issue 26): journal rows encoded straight to batch entries.

The component hands the gap-fill service an encoder (:class:`JournaledEntries`); these tests
hold that what it sends is byte for byte what the full path (decode, check, encode) sends,
that it applies the link's entitlement, and that whatever it cannot vouch for (a corrupt
entry, an undeliverable one, fields of nested values) still takes the full path and is
reported as before.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from seqrepair.amqp.component.replaywire import JournaledEntries, plain_publication
from seqrepair.amqp.wire.framing import encode_entry, pack_frame
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
from seqrepair.journal.errors import JournalCorruptError, TrimmedRangeError
from seqrepair.journal.format import JournalRow, meta_key, stream_key
from seqrepair.journal.format import encode_entry as journal_entry

pytestmark = pytest.mark.redis

BITS = 16


def bits_of(_source: str) -> int:
    return BITS


def pubs(source: str, first: int, count: int, **kw: Any) -> list[Publication]:
    out = []
    for i in range(first, first + count):
        fields = kw.get("fields", {"n": i, "pad": "x" * (i % 300), "ok": i % 2 == 0,
                                   "f": i / 7, "none": None, "big": 1 << 40, "neg": -5,
                                   "text": "caf\u00e9 \u2603"})
        out.append(Publication(
            kw.get("topic", f"/t/{i % 3}"), source, i, kw.get("ptype", PublishType.UPDATE),
            fields, permtoken=kw.get("permtoken"),
            timestamp=kw.get("timestamp", 1.7e9 + i if i % 2 else None),
        ))
    return out


def source_replay(journal: Journal, entitlement: Entitlement, *, fast: bool,
                  after: int = 0, source: str = "feed.a") -> Replay:
    """The replay a link of ``entitlement`` asking ``source`` after ``after`` is answered
    (through the fast path's encoder when ``fast``), not yet read."""
    service = GapFillService(journal)
    service.attach("L", entitlement, start_after={})
    answer = service.answer_source_gap(
        "L", SourceGapRequest(after={source: after}), 0.0,
        encoder=JournaledEntries(bits_of) if fast else None)
    assert isinstance(answer, Replay), answer
    return answer


def replay(journal: Journal, entitlement: Entitlement, *, fast: bool,
           after: int = 0, source: str = "feed.a") -> list[object]:
    """What :func:`source_replay` sends, read whole."""
    return list(source_replay(journal, entitlement, fast=fast, after=after, source=source))


def as_entries(frames: list[object]) -> list[bytes]:
    return [f if type(f) is bytes else encode_entry(f, bits_of)  # type: ignore[arg-type]
            for f in frames if not isinstance(f, ReplayComplete)]


def put_raw(client: redis.Redis, source: str, seq: int, fields: dict[str, str]) -> None:
    """Write entry ``seq`` as given (what an old or damaged journal may hold)."""
    client.xadd(stream_key(source), fields, id=f"{seq}-0")
    client.hset(meta_key(source), mapping={"high_water": seq, "bits": BITS})


def test_the_fast_path_sends_what_the_full_path_sends(journal: Journal) -> None:
    journal.append(pubs("feed.a", 1, 120), BITS)
    journal.append(pubs("feed.a", 121, 30, permtoken="tok", ptype=PublishType.CORRECTION,
                        topic="/t/\u00e9"), BITS)
    slow = replay(journal, Entitlement.everything(), fast=False)
    fast = replay(journal, Entitlement.everything(), fast=True)
    assert all(type(f) is bytes for f in fast[:-1])  # every entry vouched for
    assert as_entries(fast) == as_entries(slow)
    assert len(as_entries(fast)) == 150
    assert fast[-1] == slow[-1]


def test_the_encoder_gives_encode_entry_bytes_for_every_shape() -> None:
    encoder = JournaledEntries(bits_of)
    samples = [
        *pubs("feed.a", 1, 5),
        *pubs("feed.a", 65534, 4),  # wraps the 16-bit space
        *pubs("feed.a", 300, 2, fields={}),
        *pubs("feed.a", 400, 1, fields={"long": "y" * 70_000}),  # list32 / str32
        *pubs("feed.a", 500, 1, fields={f"k{i}": i for i in range(200)}),  # map32
        *pubs("feed.a", 600, 1, permtoken="p" * 300, timestamp=0.0),
    ]
    for pub in samples:
        row = JournalRow.of(pub.source_seq, journal_entry(pub, BITS))
        assert encoder("feed.a", row) == encode_entry(pub, bits_of), pub
    assert encoder.declined == 0


@pytest.mark.parametrize("change", [
    {"source": "feed.b"},  # another source's entry
    {"wire": "7"},  # wire number does not match the entry ID
    {"bits": "99"},
    {"ptype": "nonsense"},
    {"fields": "[1, 2]"},  # not an object
    {"fields": "{\"n\": 1"},  # truncated
    {"fields": "{\"\": 1}"},  # an empty field name
    {"fields": "{\"deep\": [1, {\"a\": 2}]}"},  # nested: the full path decides
    {"fields": "{\"huge\": 99999999999999999999999}"},  # beyond an AMQP long
    {"ts": "nan"},
    {"ts": "soon"},
    {"topic": ""},
    {"permtoken": ""},
])
def test_the_encoder_declines_what_it_cannot_vouch_for(change: dict[str, str]) -> None:
    pub = pubs("feed.a", 3, 1)[0]
    values = journal_entry(pub, BITS) | change
    encoder = JournaledEntries(bits_of)
    assert encoder("feed.a", JournalRow.of(3, values)) is None
    assert encoder.declined == 1


def test_a_corrupt_entry_is_still_reported(journal: Journal, redis_client: redis.Redis) -> None:
    journal.append(pubs("feed.a", 1, 2), BITS)
    bad = journal_entry(pubs("feed.a", 3, 1)[0], BITS) | {"wire": "9"}
    put_raw(redis_client, "feed.a", 3, bad)
    journal.append(pubs("feed.a", 4, 2), BITS)
    for fast in (False, True):
        answer = source_replay(journal, Entitlement.everything(), fast=fast)
        got: list[object] = []
        with pytest.raises(JournalCorruptError, match="wire 9"):
            got.extend(answer)  # extend keeps what came before the raise
        assert len(got) == 2  # 1 and 2, then the corrupt entry stops the replay


def test_a_corrupt_entry_of_a_known_topic_is_still_reported(
    journal: Journal, redis_client: redis.Redis
) -> None:
    """The entitlement answer is remembered by topic: a later corrupt entry of that topic is
    not decoded for it, and must still not pass."""
    journal.append(pubs("feed.a", 1, 2, topic="/t/x"), BITS)
    bad = journal_entry(pubs("feed.a", 3, 1, topic="/t/x")[0], BITS) | {"fields": "{oops"}
    put_raw(redis_client, "feed.a", 3, bad)
    answer = source_replay(journal, Entitlement.everything(), fast=True)
    with pytest.raises(JournalCorruptError):
        list(answer)


def test_entries_the_fast_path_declines_replay_in_order_by_the_full_path(
    journal: Journal, redis_client: redis.Redis
) -> None:
    """An entry written by hand in the stored format (as an older writer did) with nested
    fields: the fast path leaves it to the full decode, and the replay stays in order."""
    journal.append(pubs("feed.a", 1, 3), BITS)
    nested = Publication("/t/n", "feed.a", 4, fields={"deep": [1, {"a": None}]})
    put_raw(redis_client, "feed.a", 4, journal_entry(nested, BITS))
    journal.append(pubs("feed.a", 5, 3), BITS)
    slow = replay(journal, Entitlement.everything(), fast=False)
    fast = replay(journal, Entitlement.everything(), fast=True)
    assert [type(f) for f in fast[:-1]] == [bytes] * 3 + [Publication] + [bytes] * 3
    assert as_entries(fast) == as_entries(slow)


def test_an_undeliverable_entry_still_ends_the_replay_trimmed(
    journal: Journal, redis_client: redis.Redis
) -> None:
    journal.append(pubs("feed.a", 1, 2), BITS)
    huge = journal_entry(pubs("feed.a", 3, 1)[0], BITS) | {
        "fields": json.dumps({"n": 1 << 70})}
    put_raw(redis_client, "feed.a", 3, huge)
    fast = replay(journal, Entitlement.everything(), fast=True)
    slow = replay(journal, Entitlement.everything(), fast=False)
    assert len(fast) == len(slow) == 3
    assert isinstance(fast[-1], GapError)
    assert fast[-1].reason == "trimmed"
    assert fast[-1].trimmed_through == slow[-1].trimmed_through  # type: ignore[union-attr]
    assert fast[-1].trimmed_through == {"feed.a": 3}


def test_the_fast_path_applies_the_links_entitlement(journal: Journal) -> None:
    mixed = []
    for i in range(1, 61):
        topic = "/a/x" if i % 3 else "/b/y"
        token = "secret" if i % 5 == 0 else None
        mixed.append(Publication(topic, "feed.a", i, fields={"n": i}, permtoken=token))
    journal.append(mixed, BITS)
    only_a = Entitlement(topics=("/a/#",))
    slow = replay(journal, only_a, fast=False)
    fast = replay(journal, only_a, fast=True)
    assert as_entries(fast) == as_entries(slow)
    sent = [p.source_seq for p in slow if isinstance(p, Publication)]
    assert sent == [i for i in range(1, 61) if i % 3 and i % 5]  # no grant for "secret"
    # with a filter (it may read source and publish type) and a permission token
    filtered = Entitlement(topics=("/#",), grant=("secret",),
                           filters=(BasicFilter("exact", "type", "update"),
                                    BasicFilter("exact", "subject", "/a/x")))
    assert as_entries(replay(journal, filtered, fast=True)) == as_entries(
        replay(journal, filtered, fast=False))


def test_iter_rows_reads_ahead_and_still_sees_a_trim(
    journal: Journal, redis_client: redis.Redis
) -> None:
    journal.append(pubs("feed.a", 1, 200), BITS)  # the fixture's pages are 50
    rows = journal.iter_rows("feed.a", 1, 200)
    assert [r.seq for r in rows] == list(range(1, 201))  # type: ignore[union-attr]
    rows = journal.iter_rows("feed.a", 1, 200)
    first = next(rows)
    assert first.seq == 1  # type: ignore[union-attr]
    journal.trim_through("feed.a", 150, now=0.0)  # after page 1 and while page 2 is read
    seen = [1]
    with pytest.raises(TrimmedRangeError):
        seen.extend(row.seq for row in rows)  # type: ignore[union-attr]
    assert seen == list(range(1, len(seen) + 1))  # contiguous: nothing skipped
    assert len(seen) <= 100  # page 3 was read after the trim


def test_a_replayed_batch_of_one_is_sent_as_a_plain_publication() -> None:
    """WIRE.md: a batch of one is sent as a plain PUBLICATION; the fast path's lone entry
    too, the same message the full path sends."""
    for pub in [*pubs("feed.a", 70_000, 2), *pubs("feed.a", 5, 1, permtoken="t")]:
        entry = JournaledEntries(bits_of)("feed.a", JournalRow.of(
            pub.source_seq, journal_entry(pub, BITS)))
        assert entry is not None
        full = pack_frame(pub.with_link(None, retransmit=True), bits_of)
        assert plain_publication(entry, bits_of).encode() == full.encode()  # type: ignore[union-attr]


def test_an_entry_in_another_layout_replays_the_same(
    journal: Journal, redis_client: redis.Redis
) -> None:
    """Entries whose fields are stored in another order, or with a field more, are read as
    scripts.READ reads them (by name): the same publications go out."""
    journal.append(pubs("feed.a", 1, 2), BITS)
    odd = journal_entry(pubs("feed.a", 3, 1, permtoken="p")[0], BITS)
    put_raw(redis_client, "feed.a", 3, dict(reversed(list(odd.items()))) | {"note": "x"})
    journal.append(pubs("feed.a", 4, 2), BITS)
    slow = replay(journal, Entitlement.everything(), fast=False)
    fast = replay(journal, Entitlement.everything(), fast=True)
    assert as_entries(fast) == as_entries(slow)
    assert len(as_entries(fast)) == 5
