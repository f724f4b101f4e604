"""Runs of alike entries read at once (:mod:`seqrepair.amqp.wire.entryrun`, inside
:func:`~seqrepair.amqp.wire.batchread.read_publications`) give exactly what reading each entry
by itself gives and what the usual read and decode give: the same publications, the same entry
bytes, the decoder's numbering left the same; transfers made at random (widths that wrap inside
a run, numbers with holes, several sources, topics, publish types, times and tokens, strings
not ASCII) and the same with bytes changed at random (None: the usual way refuses or reads it,
with the same typed error)."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from seqrepair.amqp.wire import batchread, entryrun
from seqrepair.amqp.wire.batchread import read_publications
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.entrylayout import EntryLayout, layout_at
from seqrepair.amqp.wire.framing import SourceUnwrapper, encode_batch, encode_entry
from seqrepair.amqp.wire.rawamqp import ReceivedMessage, decode_message
from seqrepair.core.messages import Publication, PublishType

from .test_batchread import _check, _check_in_trial, _state


def _transfer(rng: random.Random, numbers: dict[str, int], n: int, bits: int) -> tuple[
        list[bytes], int | None, bool]:
    """``n`` entries mostly laid out alike (one source, one field layout, topics of one
    length), now and then not: what a component sends, and what a filtered feed sends."""
    sources = sorted(numbers)
    source = rng.choice(sources)
    holes = rng.random() < 0.3  # a filtered feed: numbers skipped
    ptypes = ([PublishType.UPDATE] if rng.random() < 0.8
              else [PublishType.UPDATE, PublishType.IMAGE, PublishType.DROP])
    stamp = rng.choice(["float", "float", "none", "mixed"])
    token = rng.choice([None, None, "tok", "tik"])
    text = rng.choice(["", "é", "ascii"])
    entries = []
    for _ in range(n):
        if rng.random() < 0.01:
            source = rng.choice(sources)  # another source now and then
        numbers[source] += rng.randrange(1, 4) if holes else 1
        seq = numbers[source]
        fields: dict[str, object] = {"n": seq | (1 << 40), "t": rng.random() * 1e9}
        if text:
            fields["s"] = text * (3 if rng.random() < 0.97 else 4)
        if rng.random() < 0.01:
            fields["x"] = rng.choice([None, True, False, 0, -1, 2.5, "ü"])
        when = {"float": rng.random() * 1e9, "none": None,
                "mixed": None if rng.random() < 0.05 else rng.random()}[stamp]
        entries.append(encode_entry(Publication(
            rng.choice(["/load/a", "/load/b", "/load/c"]), source, seq, rng.choice(ptypes),
            fields, permtoken=token, timestamp=when), lambda _s: bits))
    link = rng.choice([None, 0, 1, rng.randrange(1, 1 << 15)])
    return entries, link, rng.random() < 0.2


def _lazy(data: bytes) -> ReceivedMessage:
    message = decode_message(data, True)
    assert isinstance(message, ReceivedMessage)
    return message


@contextmanager
def _one_by_one() -> Iterator[None]:
    """Runs not looked for: every entry read by itself."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batchread, "MIN_RUN", 1 << 30)
        yield


def _counting(patch: pytest.MonkeyPatch) -> list[int]:
    """The entries read as runs from here on."""
    counted: list[int] = []
    read_run = entryrun.read_run

    def run(reader: object, buf: bytes, pos: int, count: int, *args: object) -> bool:
        done = read_run(reader, buf, pos, count, *args)  # type: ignore[arg-type]
        counted.append(count if done else 0)
        return done

    patch.setattr(batchread, "read_run", run)
    return counted


@pytest.mark.parametrize("bits", [3, 5, 8, 16, 64])
def test_runs_read_as_one_by_one_and_as_the_usual_way(
        bits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    counted = _counting(monkeypatch)
    rng = random.Random(bits)
    numbers = {"bench": 0, "other.src": 0}
    fast, single, usual = (Decoder(link_bits=16) for _ in range(3))
    total = 0
    for _ in range(80):
        entries, link, again = _transfer(rng, numbers, rng.randrange(2, 400), bits)
        if link is not None:
            link = min(link, (1 << 16) - len(entries))
        data = encode_batch(entries, first_link_seq=link, retransmit=again).encode()
        read = read_publications(_lazy(data), fast)
        with _one_by_one():
            by_one = read_publications(_lazy(data), single)
        message = decode_message(data)
        assert isinstance(message, ReceivedMessage)
        frames = usual.decode(message)  # type: ignore[arg-type]  # what Subscriber passes
        assert read is not None
        assert read == by_one  # the publications and the entries' bytes
        assert read[0] == frames
        assert read[1] == message.items
        assert all(type(p) is Publication for p in read[0])
        assert _state(fast) == _state(single) == _state(usual)
        total += len(entries)
    assert sum(counted) > total // 2  # most entries were read as runs


def test_a_run_refuses_what_one_by_one_refuses() -> None:
    """A value only a check refuses, in the middle of a run: None, the numbering untouched,
    and the usual way refuses it with its typed error."""
    pubs = [Publication("/t/a", "s", i, fields={"n": 300 + i, "t": 0.5}, timestamp=1.0)
            for i in range(1, 61)]
    good = [encode_entry(p, lambda _s: 16) for p in pubs]
    nan = b"\x7f\xf8" + bytes(6)
    for old, new in ((b"U\x10", b"U\x41"), (b"U\x10", b"U\x01"),  # widths 65, 1
                     (b"\xa1\x06update", b"\xa1\x06updatx"),  # a type of no name
                     (b"/t/a", b"/t/#"), (b"/t/a", b"/t/\xff"),  # no topic, no UTF-8
                     (b"\x01s", b"\x01\xff"),  # a source not UTF-8
                     (b"\x82?\xf0" + bytes(6), b"\x82" + nan),  # a time of NaN
                     (b"\x82?\xf0" + bytes(6), b"\x82\x7f\xf0" + bytes(6)),  # infinite
                     (b"sS", b"sS\x00")):  # source number 0
        for at in (30, 59):
            was = old + bytes([at + 1]) if old == b"sS" else old
            bad = list(good)
            bad[at] = good[at].replace(was, new, 1)
            assert bad[at] != good[at], was
            data = encode_batch(bad, first_link_seq=None, retransmit=False).encode()
            fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
            assert not _check(data, fast, usual)  # None, untouched; the usual way's error


def test_bytes_changed_at_random_in_runs_as_the_usual_way() -> None:
    rng = random.Random(23)
    read = 0
    for round_ in range(300):
        numbers = {"bench": rng.randrange(0, 40)}
        entries, _link, again = _transfer(rng, numbers, rng.randrange(20, 80), 6)
        changed = [bytearray(e) for e in entries]
        for _ in range(rng.randrange(1, 3)):  # a code, a size, a name, a value...
            entry = rng.choice(changed[1:])
            at = rng.randrange(len(entry))
            entry[at] = rng.choice([entry[at] ^ (1 << rng.randrange(8)), rng.randrange(256)])
        data = encode_batch([bytes(e) for e in changed], first_link_seq=None,
                            retransmit=again).encode()
        fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
        read += _check(data, fast, usual)
        if round_ % 3 == 0:
            single = Decoder(link_bits=16)
            with _one_by_one():
                by_one = read_publications(_lazy(data), single)
            assert (by_one is None) == (_state(single) == _state(Decoder(link_bits=16)))
    assert 30 < read < 270  # some changes were read (a value), most were not


def test_unwrap_run_is_unwrap_of_each() -> None:
    rng = random.Random(5)
    for _ in range(400):
        bits = rng.choice([2, 3, 4, 8, 16])
        top = (1 << bits) - 1
        one, run = SourceUnwrapper(), SourceUnwrapper()
        if rng.random() < 0.5:
            seed = rng.randrange(0, 3 * top)
            one.seed("s", seed)
            run.seed("s", seed)
        for _ in range(rng.randrange(1, 5)):
            first = rng.randrange(1, top + 1)
            step = rng.choice([1, 1, 1, 2])
            wires = tuple((first - 1 + i * step) % top + 1 for i in range(rng.randrange(1, 9)))
            expected = [one.unwrap("s", w, bits) for w in wires]
            assert list(run.unwrap_run("s", wires, bits)) == expected
            assert (run._last, run._next_wire, run.bits) == (one._last, one._next_wire, one.bits)


def test_the_formats_runs_keep_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of every length and layout: the ``struct`` formats kept stay within their bound
    (forgotten and made again past it), a run longer than MAX_RUN is read as several, and
    every transfer is read as the usual way reads it."""
    monkeypatch.setattr(entryrun, "_flat", {})
    monkeypatch.setattr(entryrun, "_flat_values", 0)
    monkeypatch.setattr(entryrun, "MAX_FLAT_VALUES", 600)
    monkeypatch.setattr(batchread, "MAX_RUN", 40)
    counted = _counting(monkeypatch)
    rng = random.Random(29)
    numbers = {"bench": 0}
    fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
    for _ in range(60):
        entries, _link, again = _transfer(rng, numbers, rng.randrange(8, 200), 16)
        data = encode_batch(entries, first_link_seq=None, retransmit=again).encode()
        assert _check(data, fast, usual)
        assert entryrun._flat_values <= 600
    assert counted
    assert max(counted) == 40



def test_runs_inside_the_owners_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    """The component's ingest reads inside a trial of its own: runs (narrow widths that wrap,
    numbers with holes, refused at the end) leave the same trial state, kept or undone."""
    counted = _counting(monkeypatch)
    rng = random.Random(31)
    numbers = {"bench": 0}
    fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
    read = 0
    for round_ in range(120):
        bits = rng.choice([3, 5, 16])
        entries, _link, again = _transfer(rng, numbers, rng.randrange(8, 120), bits)
        if round_ % 5 == 4:  # the last entry's width made 65: refused after the run
            entries[-1] = entries[-1].replace(b"U" + bytes([bits]), b"U\x41", 1)
        data = encode_batch(entries, first_link_seq=None, retransmit=again).encode()
        keep = rng.random() < 0.7
        read += _check_in_trial(data, fast, usual, keep)
        if not keep:
            numbers["bench"] = max(fast.unwrapper._last.get("bench", 0), 0)
    assert read > 60
    assert sum(counted) > 1000


def _str(code: int, raw: bytes) -> bytes:
    if code in (0xA1, 0xA3):
        return bytes([code, len(raw)]) + raw
    return bytes([code]) + struct.pack(">I", len(raw)) + raw


def _compound(small: int, items: list[bytes], wide: bool, per_item: int = 1) -> bytes:
    body = b"".join(items)
    count = len(items) * per_item
    if wide:
        return bytes([small + 0x10]) + struct.pack(">II", len(body) + 4, count) + body
    return bytes([small, len(body) + 1, count]) + body


_SCALARS: list[bytes] = [
    b"\x40", b"\x41", b"\x42", b"\x43", b"\x44", b"\x50\x07", b"\x51\xff", b"\x52\x09",
    b"\x53\x0a", b"\x54\xfe", b"\x55\x05", b"\x60\x01\x00", b"\x61\xff\x00",
    b"\x70\x00\x01\x00\x00", b"\x71\xff\xff\xff\xff", b"\x72" + struct.pack(">f", 1.5),
    b"\x80" + struct.pack(">Q", (1 << 64) - 1), b"\x81" + struct.pack(">q", -(1 << 63)),
    b"\x82" + struct.pack(">d", -0.0), _str(0xA1, "é\\\"".encode()), _str(0xB1, b"wide"),
    _str(0xA3, b"sym"), _str(0xB3, b"sym32"), _str(0xA1, b""),
]


def _raw_entry(rng: random.Random, shape: dict[str, Any], wire: int, value: int) -> bytes:
    """An 8-element publication entry of ``shape`` (codes chosen once per transfer), its
    number ``wire`` and its first field value picked by ``value`` among :data:`_SCALARS`."""
    wide = bool(shape["wide"])
    fields = [
        _str(0xA1 if n % 2 else 0xA3, name.encode()) + (_SCALARS[value] if n == 0 else scalar)
        for n, (name, scalar) in enumerate(shape["fields"])
    ]
    number = (b"\x53" + bytes([wire]) if shape["small"]
              else b"\x80" + struct.pack(">Q", wire))
    return _compound(0xC0, [
        _str(0xA1, b"update"),
        b"\x82" + struct.pack(">d", 1.25) if shape["stamp"] else b"\x40",
        _str(0xA1, shape["source"]),
        number,
        b"\x55" + bytes([shape["bits"]]),
        _str(0xA1, shape["topic"]),
        _compound(0xC1, fields, bool(shape["wide_map"]), 2),  # a name and a value each
        _str(0xA1, b"tok") if shape["token"] else b"\x40",
    ], wide)


def _strict(pubs: list[Publication]) -> list[tuple[object, ...]]:
    """Publications with each value's type: True == 1 and 0.0 == -0.0 must not hide a
    difference."""
    return [(p.topic, p.source, p.source_seq, p.ptype, p.link_seq, p.permtoken,
             repr(p.timestamp), p.retransmit,
             [(k, type(v).__name__, repr(v)) for k, v in p.fields.items()]) for p in pubs]


def test_hand_made_runs_of_every_value_code_with_bytes_changed() -> None:
    """Entries encoded by hand, not by :func:`encode_entry`: list8 and list32 entries, map8 and
    map32 fields, str8/str32/sym8/sym32 values, every fixed-width and constant value code,
    ulong and smallulong numbers up to the top of the space; in each transfer one value's code
    in one entry changes (a run's entries alike in length, one not alike in content), and
    now and then a byte anywhere. Read as runs, one by one and the usual way: the same
    publications (types included), entry bytes and numbering, or None and the usual way's
    typed refusal."""
    rng = random.Random(2731)
    counted = 0
    with pytest.MonkeyPatch.context() as patch:
        runs = _counting(patch)
        for round_ in range(400):
            small = rng.random() < 0.5
            bits = rng.choice([2, 3, 8]) if small else rng.choice([8, 16, 63, 64])
            top = (1 << bits) - 1
            shape: dict[str, Any] = {
                "wide": rng.random() < 0.5, "wide_map": rng.random() < 0.3,
                "small": small, "bits": bits, "stamp": rng.random() < 0.5,
                "token": rng.random() < 0.3,
                "source": rng.choice([b"src", b"s\xc3\xa9c"]),
                "topic": rng.choice([b"/a/bc", b"/a/b.", b"/x"]),
                "fields": [(name, rng.choice(_SCALARS))
                           for name in rng.sample(["n", "t", "é", "n2"], rng.randrange(1, 4))],
            }
            count = rng.randrange(8, 60)
            wire = rng.randrange(1, top + 1)
            value = rng.randrange(len(_SCALARS))
            wires = []
            for _ in range(count):
                wires.append(wire)
                wire = 1 if wire == top else wire + 1
            entries = [_raw_entry(rng, shape, w, value) for w in wires]
            at = rng.randrange(count)  # one entry: another value code of the same size
            size = len(_SCALARS[value])
            others = [k for k, s in enumerate(_SCALARS) if len(s) == size and k != value]
            if others:
                entries[at] = _raw_entry(rng, shape, wires[at], rng.choice(others))
            data = bytearray(encode_batch(entries, first_link_seq=rng.choice(
                [None, 0, (1 << 16) - count]), retransmit=rng.random() < 0.2).encode())
            if rng.random() < 0.3:
                data[rng.randrange(len(data) // 2, len(data))] ^= 1 << rng.randrange(8)
            fast, single, usual = (Decoder(link_bits=16) for _ in range(3))
            if rng.random() < 0.5:  # numbering already under way
                high = rng.choice([1, rng.randrange(1, 1 << 70), (1 << 64) - 3])
                for decoder in (fast, single, usual):
                    decoder.unwrapper.seed(shape["source"].decode(),
                                           high)
            batchread._last[0] = None
            if round_ % 4:  # its layout learnt (seen twice), the last transfer's: runs
                pristine = encode_batch(entries[:1] * 40, first_link_seq=None,
                                        retransmit=False).encode()
                for _ in range(2):
                    read_publications(_lazy(pristine), Decoder(link_bits=16))
            read = read_publications(_lazy(bytes(data)), fast)
            batchread._last[0] = None
            with _one_by_one():
                by_one = read_publications(_lazy(bytes(data)), single)
            assert (read is None) == (by_one is None)
            assert _state(fast) == _state(single)
            if read is None or by_one is None:
                continue
            assert _strict(read[0]) == _strict(by_one[0])
            assert [type(b) for b in read[1]] == [type(b) for b in by_one[1]]
            assert read[1] == by_one[1]
            message = decode_message(bytes(data))
            assert isinstance(message, ReceivedMessage)
            frames = usual.decode(message)  # type: ignore[arg-type]  # what Subscriber passes
            assert all(type(p) is Publication for p in frames)
            assert _strict(read[0]) == _strict(frames)  # type: ignore[arg-type]
            assert _state(fast) == _state(usual)
            counted += 1
    assert counted > 100
    assert sum(runs) > 5000  # most of them read as runs


def test_a_forgotten_layouts_run_reader_is_freed_with_it() -> None:
    """A run reader's regular expression is the layout's alone: forgotten with it. Compiled
    by ``re.compile`` it was also kept in the ``re`` module's own cache (512 patterns): a
    peer sending entries of many layouts (32 long field names each: ~75 KB a pattern) kept
    ~38 MB past every layout's forgetting (MAX_LAYOUTS bounds nothing there), and pushed
    every other pattern of the process out of that cache."""
    import gc
    import weakref

    from seqrepair.amqp.wire import entrylayout

    fields = {f"k{j:02d}" + "n" * 200: j for j in range(32)}
    entries = [encode_entry(Publication("/t/forgotten", "s", i, fields=fields), lambda _s: 32)
               for i in range(1, 41)]
    data = encode_batch(entries, first_link_seq=None, retransmit=False).encode()
    for _ in range(3):  # seen, learnt, read as a run
        read_publications(_lazy(data), Decoder(link_bits=16))
    layout = batchread._last[0]
    assert layout is not None
    reader = entryrun.reader_of(layout)
    assert reader is not None
    pattern = weakref.ref(reader.count.__self__)  # type: ignore[attr-defined]
    del layout, reader
    batchread._last[0] = None
    entrylayout._layouts.clear()
    entrylayout._seen.clear()
    gc.collect()
    assert pattern() is None


def test_the_last_transfers_layout_changes_nothing_another_reads() -> None:
    """The layout a transfer starts with is the last one's, of any connection (``_last``,
    shared): whatever another peer's transfer left there (a layout of the same entry size
    with other value codes, other field names, another width, a bad entry's), a transfer
    reads the same publications, bytes and numbering as when it starts with none."""
    rng = random.Random(77)
    left: list[EntryLayout | None] = [None]
    for entries in (
        [encode_entry(Publication("/load/a", "bench", n, fields={"n": 1 << 40, "t": 0.5}),
                      lambda _s: 16) for n in range(1, 41)],
        [encode_entry(Publication("/load/a", "bench", n, fields={"m": 1 << 40, "t": 0.5}),
                      lambda _s: 16) for n in range(1, 41)],
        [encode_entry(Publication("/load/a", "bench", n, fields={"n": "x" * 8, "t": 0.5}),
                      lambda _s: 8) for n in range(1, 41)],
        [encode_entry(Publication("/load/b", "bench", n, fields={"n": 1, "t": True}),
                      lambda _s: 64).replace(b"/load/b", b"/load/#") for n in range(1, 41)],
    ):
        layout_at(entries[0], 0)  # seen once: learnt when seen again
        left.append(layout_at(entries[0], 0))
    assert all(left[1:])
    assert len({id(layout) for layout in left}) == len(left)
    numbers = {"bench": 0, "other.src": 0}
    for _ in range(30):
        entries, link, again = _transfer(rng, numbers, rng.randrange(8, 120), 16)
        if link is not None:
            link = min(link, (1 << 16) - len(entries))
        data = encode_batch(entries, first_link_seq=link, retransmit=again).encode()
        seen = []
        for layout in left:
            decoder = Decoder(link_bits=16)
            decoder.unwrapper.seed("bench", max(1, numbers["bench"] - len(entries) - 3))
            batchread._last[0] = layout
            read = read_publications(_lazy(data), decoder)
            assert read is not None
            seen.append((_strict(read[0]), read[1], _state(decoder)))
        assert all(got == seen[0] for got in seen)
    batchread._last[0] = None
