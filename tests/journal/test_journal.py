"""The Redis journal against a real redis-server."""

from __future__ import annotations

import pytest
import redis

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal import (
    BitsMismatchError,
    EmbeddedRedis,
    Journal,
    JournalCorruptError,
    JournalResponseError,
    JournalUnavailableError,
    SequenceConflictError,
    TrimmedRangeError,
)
from seqrepair.journal.format import meta_key, stream_key

pytestmark = pytest.mark.redis


def stamp(
    n: int, source: str = "feed.a", bits: int = 16, start_after: int = 0
) -> list[Publication]:
    seq = SourceSequencer(source=source, bits=bits, start_after=start_after)
    return [
        seq.stamp(
            f"/item/{i % 4}",
            {"v": i, "null": None},
            "update",
            timestamp=float(i),
            permtoken="t" if i % 3 == 0 else None,
        )
        for i in range(n)
    ]


def test_append_and_read_back_in_order(journal: Journal) -> None:
    pubs = stamp(120)
    assert journal.append(pubs[:70], 16) == 70
    assert journal.append(pubs[70:], 16) == 120
    assert journal.high_water("feed.a") == 120
    assert journal.read_range("feed.a", 1, 120) == pubs  # pages of 50
    assert journal.read_range("feed.a", 30, 40) == pubs[29:40]
    assert journal.read_after("feed.a", 100, limit=5) == pubs[100:105]
    assert journal.read_after("feed.a", 120) == []
    assert list(journal.iter_range("feed.a", 118)) == pubs[117:]
    assert journal.sources() == ["feed.a"]


def test_entry_ids_are_absolute_numbers(journal: Journal, redis_client: redis.Redis) -> None:
    journal.append(stamp(3, bits=2), 2)  # 2-bit space wraps at 3
    entries = redis_client.xrange(stream_key("feed.a"))
    assert [e[0] for e in entries] == [b"1-0", b"2-0", b"3-0"]
    pubs = stamp(2, bits=2, start_after=3)
    journal.append(pubs, 2)
    assert redis_client.xrange(stream_key("feed.a"), "4", "4")[0][1][b"wire"] == b"1"
    meta = redis_client.hgetall(meta_key("feed.a"))
    assert meta == {b"high_water": b"5", b"bits": b"2", b"trimmed_through": b"0"}


def test_repeated_append_is_rejected_and_writes_nothing(journal: Journal) -> None:
    pubs = stamp(10)
    journal.append(pubs[:5], 16)
    with pytest.raises(SequenceConflictError) as info:
        journal.append(pubs[3:8], 16)  # overlaps: nothing of it may be written
    assert info.value.expected == 6
    assert info.value.got == 4
    with pytest.raises(SequenceConflictError):
        journal.append(pubs[6:], 16)  # leaves a hole
    assert journal.high_water("feed.a") == 5
    assert journal.read_range("feed.a", 1, 10) == pubs[:5]


def test_bits_mismatch(journal: Journal) -> None:
    journal.append(stamp(2, bits=16), 16)
    with pytest.raises(BitsMismatchError):
        journal.append(stamp(1, bits=8, start_after=2), 8)
    with pytest.raises(BitsMismatchError):
        Journal(journal.client).register_source("feed.a", 32)


def test_bit_widths_of_journaled_sources_come_in_one_read(journal: Journal) -> None:
    journal.append([Publication("/a", "feed.a", 1, "update", {})], 8)
    journal.append([Publication("/a", "feed.b", 1, "update", {})], 64)
    assert journal.bit_widths(["feed.a", "feed.b", "never"]) == {"feed.a": 8, "feed.b": 64}


def test_bad_batches_are_typed_errors_and_send_nothing(journal: Journal) -> None:
    with pytest.raises(InvalidMessageError):
        journal.append([], 16)
    a, b = stamp(2)
    with pytest.raises(InvalidMessageError):
        journal.append([b, a], 16)
    with pytest.raises(InvalidMessageError):
        journal.append([a, stamp(2, source="other")[1]], 16)
    with pytest.raises(InvalidMessageError):
        journal.append([Publication("/a", "feed.a", 1, "update", {"x": object()})], 16)
    with pytest.raises(InvalidMessageError):
        journal.append([Publication("/a", "feed.a", 1, "update", {"x": "\ud800"})], 16)
    with pytest.raises(InvalidMessageError):
        journal.read_range("feed.a", 0, 5)
    with pytest.raises(InvalidMessageError):
        journal.read_after("", 0)
    assert journal.high_water("feed.a") == 0


def test_trim_is_remembered_and_reads_into_it_raise(journal: Journal) -> None:
    pubs = stamp(100)
    journal.append(pubs, 16)
    assert journal.trim_through("feed.a", 40, now=123.0) == (40, 40)
    info = journal.info("feed.a")
    assert (info.trimmed_through, info.trimmed_at, info.length) == (40, 123.0, 60)
    with pytest.raises(TrimmedRangeError) as exc:
        journal.read_range("feed.a", 40, 50)
    assert exc.value.trimmed_through == 40
    assert exc.value.requested == 40
    with pytest.raises(TrimmedRangeError):
        journal.read_after("feed.a", 0)
    assert journal.read_after("feed.a", 40, limit=2) == pubs[40:42]
    assert journal.trim_through("feed.a", 10, now=124.0) == (40, 0)  # never goes back
    assert journal.trim_through("feed.a", 10_000, now=125.0) == (100, 60)  # capped at high-water
    assert journal.read_after("feed.a", 100) == []
    journal.append(stamp(1, start_after=100), 16)  # appends continue after a full trim
    assert journal.high_water("feed.a") == 101


def test_missing_entry_below_high_water_is_corruption(
    journal: Journal, redis_client: redis.Redis
) -> None:
    pubs = stamp(10)
    journal.append(pubs[:5], 16)  # fewer than PACK_MIN: an entry per publication
    journal.append(pubs[5:], 16)
    redis_client.xdel(stream_key("feed.a"), "5-0")
    with pytest.raises(JournalCorruptError):
        journal.read_range("feed.a", 1, 10)


def test_latest_image_folds_from_last_image(journal: Journal) -> None:
    seq = SourceSequencer("feed.a", bits=16)
    rows = [
        ("/x", "update", {"a": 1}),
        ("/x", "image", {"a": 2, "b": 3}),
        ("/y", "image", {"z": 1}),
        ("/x", "update", {"b": None}),
        ("/x", "correction", {"c": 4}),
        ("/x", "snapshot", {}),
        ("/y", "drop", {}),
    ]
    pubs = [seq.stamp(t, f, p) for t, p, f in rows]
    pubs += [seq.stamp("/filler", {"i": i}) for i in range(120)]  # several pages back
    journal.append(pubs, 16)
    image = journal.latest_image("feed.a", "/x")
    assert image is not None
    assert dict(image.fields) == {"a": 2, "b": None, "c": 4}
    assert not image.partial
    assert image.corrected == {"c"}
    assert journal.latest_image("feed.a", "/y") is None
    assert journal.latest_image("feed.a", "/nothing") is None
    partial = journal.latest_image("feed.a", "/filler")
    assert partial is not None
    assert partial.partial
    assert partial.fields == {"i": 119}


def test_latest_image_with_trimmed_base_raises(journal: Journal) -> None:
    seq = SourceSequencer("feed.a", bits=16)
    journal.append([seq.stamp("/x", {"a": 1}, "image"), seq.stamp("/x", {"b": 2})], 16)
    journal.trim_through("feed.a", 1, now=0.0)
    with pytest.raises(TrimmedRangeError):
        journal.latest_image("feed.a", "/x")


def test_latest_image_of_an_item_whose_whole_history_was_trimmed_raises(journal: Journal) -> None:
    seq = SourceSequencer("feed.a", bits=16)
    journal.append([seq.stamp("/x", {"a": 1}, "image"), seq.stamp("/y", {"b": 2}, "image")], 16)
    journal.trim_through("feed.a", 1, now=0.0)
    with pytest.raises(TrimmedRangeError) as info:
        journal.latest_image("feed.a", "/x")  # not "no such item": its image was trimmed
    assert info.value.trimmed_through == 1
    assert journal.latest_image("feed.a", "/y").fields == {"b": 2}


def test_unreachable_redis_is_a_typed_error(tmp_path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path)
    with server:
        url = server.url
    journal = Journal.from_url(url, socket_connect_timeout=0.5)
    with pytest.raises(JournalUnavailableError):
        journal.high_water("feed.a")
    with pytest.raises(JournalUnavailableError):
        journal.append(stamp(1), 16)


def test_redis_error_replies_are_typed(journal: Journal, redis_client: redis.Redis) -> None:
    redis_client.set(stream_key("feed.a"), "not a stream")
    with pytest.raises(JournalResponseError):
        journal.append(stamp(1), 16)


def test_the_first_journaling_records_the_principal_that_brought_the_source(
    journal: Journal,
) -> None:
    def pub(source: str, seq: int) -> Publication:
        return Publication("/t", source, seq, fields={"n": seq})

    journal.append([pub("owned", 1)], 16, brought_by="alice")
    journal.append([pub("owned", 2)], 16, brought_by="mallory")  # not the first: kept alice
    journal.append([pub("plain", 1)], 16)  # a publisher's own journal: nobody's
    journal.append([pub("plain", 2)], 16, brought_by="mallory")  # not its first journaling
    assert journal.brought_by(["owned", "plain", "none"]) == {"owned": "alice"}
    assert journal.high_water("owned") == 2
    assert journal.brought_by([]) == {}
