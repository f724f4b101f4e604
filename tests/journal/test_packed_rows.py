"""Packed journal rows (``format.py``, ``envelope.encode_append``): a batch of PACK_MIN or more
consecutive publications is one stream entry per row of up to ROW_MOST, and every reader sees
exactly what it sees of the same publications written one entry each: the same journal is
written both ways (two databases of one redis-server) and read every way, at random ranges,
page sizes, trims and relay gaps."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import redis

from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import EmbeddedRedis, Journal, envelope, scripts
from seqrepair.journal.errors import (
    JournalCorruptError,
    JournalResponseError,
    SequenceConflictError,
)
from seqrepair.journal.format import meta_key, stream_key

pytestmark = pytest.mark.redis

SOURCE = "feed.p"
TOPICS = ["/a", "/b/é", "/c", '/d"q']
SEL = "/a,/c"


@pytest.fixture
def both(redis_server: EmbeddedRedis) -> Iterator[tuple[Journal, Journal, redis.Redis]]:
    """A journal written packed (db 1) and one written an entry per publication (db 2)."""
    base = redis_server.url.rsplit("/", 1)[0]
    packed = redis.Redis.from_url(f"{base}/1")
    plain = redis.Redis.from_url(f"{base}/2")
    packed.flushdb()
    plain.flushdb()
    with Journal(packed, page_size=50) as a, Journal(plain, page_size=50) as b:
        yield a, b, packed
    packed.close()
    plain.close()


def _fields(rng: random.Random, seq: int) -> dict[str, Any]:
    fields: dict[str, Any] = {"n": seq, "x": rng.random()}
    if rng.random() < 0.3:
        fields["s"] = rng.choice(["é/\u2028", "},{", "a\"b\\c", "", "\x00"])
    if rng.random() < 0.2:
        fields["nested"] = {"l": [1, None, True], "big": 2**60}
    if rng.random() < 0.1:
        fields["null"] = None
    return fields


def _pub(rng: random.Random, seq: int, *, size: int = 0) -> Publication:
    fields = _fields(rng, seq)
    if size:
        fields["blob"] = "z" * size
    return Publication(
        rng.choice(TOPICS), SOURCE, seq, rng.choice(list(PublishType)), fields,
        permtoken=rng.choice([None, None, "tok"]),
        timestamp=rng.choice([None, rng.random() * 1e9]))


def _write(journal: Journal, pubs: list[Publication], bits: int, *, packed: bool,
           **kwargs: Any) -> int:
    most = envelope.PACK_MIN if packed else 10**9
    with mock.patch.object(envelope, "PACK_MIN", most):
        return journal.append(pubs, bits, **kwargs)


def _outcome(journal: Journal, method: str, *args: Any, **kwargs: Any) -> Any:
    """What ``journal.method(*args, **kwargs)`` gives (an iterator: all it yields), or the
    typed error it raises, by type and message."""
    try:
        value = getattr(journal, method)(*args, **kwargs)
        if method == "iter_rows":
            return [(item.seq, item.parts, item.stored) if hasattr(item, "parts") else item
                    for item in value]
        return list(value) if isinstance(value, Iterator) else value
    except SeqRepairError as exc:
        return type(exc).__name__, str(exc)


def _same(a: Journal, b: Journal, method: str, *args: Any, **kwargs: Any) -> None:
    got, expected = _outcome(a, method, *args, **kwargs), _outcome(b, method, *args, **kwargs)
    assert got == expected, (method, args, kwargs)


def _compare(rng: random.Random, a: Journal, b: Journal, rounds: int) -> None:
    """Every reader, at random places, answers the same of both journals."""
    hw = b.high_water(SOURCE)
    assert a.info(SOURCE) == b.info(SOURCE)
    for _ in range(rounds):
        first = rng.randrange(1, hw + 3)
        last = rng.choice([None, min(hw + 2, first + rng.randrange(0, 300)), first])
        page = rng.choice([1, 2, 7, 50, 64, 65, 129, 1000])
        if page < 50:  # a round trip a page: a short range
            last = min(hw + 2, first + rng.randrange(0, 40))
        for method in ("iter_entries", "iter_range", "iter_rows"):
            _same(a, b, method, SOURCE, first, last, page_size=page)
        _same(a, b, "probe", SOURCE, first)
        _same(a, b, "page_back", SOURCE, first, rng.choice([1, 3, 50, 64, 200]))
    for topic in TOPICS:
        _same(a, b, "latest_image", SOURCE, topic)


def test_packed_rows_read_as_an_entry_each(both: tuple[Journal, Journal, redis.Redis]) -> None:
    a, b, packed_client = both
    rng = random.Random(39)
    bits = 5  # wire numbers wrap inside a batch
    seq = 0
    for round_ in range(40):
        count = rng.choice([1, 3, 7, 8, 9, 63, 64, 65, 128, 200, 257])
        pubs = [_pub(rng, seq + 1 + i) for i in range(count)]
        if round_ == 5:  # rows cut by bytes, and one publication past ROW_BYTES alone
            pubs = [_pub(rng, seq + 1 + i, size=envelope.ROW_BYTES // 3) for i in range(9)]
            pubs.append(_pub(rng, seq + 10, size=envelope.ROW_BYTES * 2))
        seq = pubs[-1].source_seq
        assert _write(a, pubs, bits, packed=True) == _write(b, pubs, bits, packed=False) == seq
        if round_ % 10 == 9:
            _compare(rng, a, b, 25)
        if round_ % 13 == 12:  # trims land inside packed rows
            through = rng.randrange(1, seq)
            assert a.trim_through(SOURCE, through, now=1.0) == b.trim_through(
                SOURCE, through, now=1.0)
    _compare(rng, a, b, 60)
    # one entry per row, each at most ROW_MOST and ROW_BYTES (or one publication)
    rows = packed_client.xrange(stream_key(SOURCE))
    packed_rows = [(int(k.split(b"-")[0]), v) for k, v in rows if b"rows" in v]
    assert packed_rows
    assert len(rows) < b.info(SOURCE).length
    for last, values in packed_rows:
        held = json.loads(values[b"rows"])
        assert [int(e[0]) for e in held] == list(range(int(values[b"first"]), last + 1))
        assert len(held) <= envelope.ROW_MOST
        assert len(values[b"rows"]) <= envelope.ROW_BYTES or len(held) == 1


def test_a_relays_packed_rows_keep_its_markers(
    both: tuple[Journal, Journal, redis.Redis],
) -> None:
    a, b, _ = both
    rng = random.Random(40)
    seq = 0
    for round_ in range(30):
        seq += rng.choice([0, 0, 1, 5, 100])  # a gap before the batch: a marker
        count = rng.choice([1, 8, 20, 70, 130])
        numbers = list(range(seq + 1, seq + 1 + count))
        if round_ % 4 == 3:  # gaps inside: written an entry each, as before
            numbers = sorted(rng.sample(range(seq + 1, seq + 3 * count), count))
        pubs = [_pub(rng, n) for n in numbers]
        seq = numbers[-1]
        before = (rng.randrange(1, seq + 1), "/before") if round_ % 5 == 0 else None
        for journal, packed in ((a, True), (b, False)):
            assert _write(journal, pubs, 16, packed=packed, not_selected=SEL,
                          before=before) == seq
        if round_ % 11 == 10:
            through = rng.randrange(1, seq)
            assert a.trim_through(SOURCE, through, now=1.0) == b.trim_through(
                SOURCE, through, now=1.0)
    _compare(rng, a, b, 80)


def test_a_repeated_or_overlapping_packed_batch_writes_nothing(
    both: tuple[Journal, Journal, redis.Redis],
) -> None:
    a, _, client = both
    rng = random.Random(41)
    pubs = [_pub(rng, n) for n in range(1, 101)]
    _write(a, pubs, 16, packed=True)
    entries = client.xlen(stream_key(SOURCE))
    for again in (pubs, pubs[50:], [_pub(rng, n) for n in range(102, 120)]):
        with pytest.raises(SequenceConflictError):
            _write(a, again, 16, packed=True)
    assert client.xlen(stream_key(SOURCE)) == entries
    assert a.high_water(SOURCE) == 100


@pytest.mark.parametrize("text", [
    b"P1 10\n1 5 2\n[]6 9 2\n[]",  # rows end before the batch's last
    b"P1 10\n1 5 2\n[]7 10 2\n[]",  # a row does not continue the one before
    b"P1 10\n1 10 999\n[]",  # cut short
    b"P1 10",  # no row
    b"Px\n",  # no header
])
def test_malformed_packed_text_is_refused_whole(
    both: tuple[Journal, Journal, redis.Redis], text: bytes,
) -> None:
    _, _, client = both
    append = client.register_script(scripts.APPEND)
    with pytest.raises(redis.ResponseError, match="packed rows"):
        append(keys=[stream_key(SOURCE), meta_key(SOURCE)], args=[SOURCE, "16", text])
    assert client.xlen(stream_key(SOURCE)) == 0
    assert client.exists(meta_key(SOURCE)) == 0


def test_a_packed_row_lacking_a_publication_is_corruption(
    both: tuple[Journal, Journal, redis.Redis],
) -> None:
    a, _, client = both
    rng = random.Random(42)
    _write(a, [_pub(rng, n) for n in range(1, 41)], 16, packed=True)
    key = stream_key(SOURCE)
    ((ident, values),) = client.xrange(key)
    held = json.loads(values[b"rows"])
    del held[17]  # number 18
    client.delete(key)  # (a stream refuses an ID at or below its last, even deleted)
    client.xadd(key, {**values, b"rows": json.dumps(held).encode()}, id=ident)
    with pytest.raises(JournalCorruptError):
        a.read_range(SOURCE, 1, 40)
    with pytest.raises(JournalCorruptError):
        list(a.iter_rows(SOURCE, 10, 30))
    assert a.probe(SOURCE, 18)[2] is None  # not held: what a reader of one number is told
    assert [p.source_seq for p in a.read_range(SOURCE, 19, 40)] == list(range(19, 41))


def test_a_batch_of_256_is_four_entries(
    both: tuple[Journal, Journal, redis.Redis],
) -> None:
    """Not a timing: the count of stream entries written, the cost the script pays per
    entry (an XADD), for a relay's usual batch of 256."""
    a, b, client = both
    rng = random.Random(43)
    pubs = [_pub(rng, n) for n in range(1, 257)]
    _write(a, pubs, 16, packed=True)
    _write(b, pubs, 16, packed=False)
    assert client.xlen(stream_key(SOURCE)) == 256 // envelope.ROW_MOST
    assert b.client.xlen(stream_key(SOURCE)) == 256


def test_a_script_error_is_a_typed_journal_error(
    both: tuple[Journal, Journal, redis.Redis],
) -> None:
    a, _, _ = both
    rng = random.Random(44)
    pubs = [_pub(rng, n) for n in range(1, 21)]
    with mock.patch("seqrepair.journal.journal.encode_append",
                    return_value=b"P1 20\n1 20 5\n[]"), pytest.raises(JournalResponseError):
        a.append(pubs, 16)
    assert a.high_water(SOURCE) == 0
