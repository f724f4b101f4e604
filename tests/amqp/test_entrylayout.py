"""Entries read by their layout (:mod:`seqrepair.amqp.wire.entrylayout`, inside
:func:`~seqrepair.amqp.wire.batchread.read_publications`) give exactly what the usual read and
decode give: runs of alike entries, entries that differ from the one before in one value's
encoding, every field type a layout covers, narrow source widths that wrap, several sources,
and bytes changed at random (a layout's marks or its values)."""

from __future__ import annotations

import random

import pytest

from seqrepair.amqp.wire import batchread, entrylayout
from seqrepair.amqp.wire.batchread import read_publications
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.entrylayout import layout_at
from seqrepair.amqp.wire.framing import encode_batch, encode_entry, encode_frames
from seqrepair.amqp.wire.rawamqp import ReceivedMessage, decode_message
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Publication, PublishType

from .test_batchread import _check, _state


def _alike(rng: random.Random, sources: dict[str, int], n: int, bits: int,
           again: bool) -> list[Publication]:
    """``n`` publications laid out alike but for what ``rng`` varies now and then (a field
    more, gaps and repeats in the source numbers, link numbers or none, from 0 or not)."""
    out = []
    pad = "x" * rng.choice([0, 5, 100, 300])
    link = rng.choice([None, None, 0, rng.randrange(1, 1 << 15)])  # 0: a link reset
    for i in range(n):
        source = rng.choice(sorted(sources))
        step = rng.random()  # mostly the next number; now and then a gap or a repeat
        sources[source] += 1 if step < 0.9 else (rng.randrange(2, 4) if step < 0.95 else 0)
        seq = max(sources[source], 1)
        fields: dict[str, object] = {"n": seq, "t": rng.random() * 1e9, "pad": pad}
        if rng.random() < 0.05:
            fields["extra"] = rng.choice([None, True, False, -1, 1 << 40, "é", 2.5])
        out.append(Publication("/peers/a", source, seq, PublishType.UPDATE, fields,
                               link_seq=None if link is None else link + i,
                               retransmit=again, timestamp=rng.random() * 1e9))
    return out


def _layouts_used(data: bytes) -> int:
    """How many entries of ``data``, from the first, a layout reads (learnt: seen twice)."""
    lazy = decode_message(data, True)
    assert isinstance(lazy, ReceivedMessage)
    assert lazy.body_at is not None
    buf, pos = lazy._raw, lazy.body_at
    count = buf[pos + 2] if buf[pos] == 0xC0 else int.from_bytes(buf[pos + 5 : pos + 9], "big")
    pos += 3 if buf[pos] == 0xC0 else 9
    used = 0
    for _ in range(count):
        layout = layout_at(buf, pos) or layout_at(buf, pos)
        if layout is None or layout.read(buf, pos) is None:
            return used
        used += 1
        pos += layout.size
    return used


@pytest.mark.parametrize("bits", [3, 4, 5, 8, 16, 32, 64])
def test_runs_of_alike_entries_as_the_usual_way(bits: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    hits = []
    read_by_layout = entrylayout.EntryLayout.read

    def counted(self: entrylayout.EntryLayout, buf: bytes, pos: int) -> object:
        values = read_by_layout(self, buf, pos)
        hits.append(values is not None)
        return values

    read_a_run = batchread.read_run

    def run_counted(reader: object, buf: bytes, pos: int, count: int,
                    *args: object) -> bool:
        done = read_a_run(reader, buf, pos, count, *args)  # type: ignore[arg-type]
        hits.extend([True] * count if done else [])
        return done

    monkeypatch.setattr(entrylayout.EntryLayout, "read", counted)
    monkeypatch.setattr(batchread, "read_run", run_counted)  # a run is read by its layout
    rng = random.Random(bits)
    fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
    sources = {"peers": 0} if bits % 2 else {"peers": 0, "other": 0, "thirdsrc": 0}
    read = by_layout = large = 0
    for _ in range(60):
        pubs = _alike(rng, sources, rng.randrange(2, 300), bits, rng.random() < 0.7)
        data = encode_frames(pubs, bits).encode()
        hits.clear()
        read += _check(data, fast, usual)
        by_layout += sum(hits)
        large += len(pubs) if len(pubs) >= batchread.LAYOUT_EVERY else 0
        assert _layouts_used(data) > 0
    assert read == 60
    assert by_layout > 0.6 * large  # mostly read by a layout (sources of unalike names mix)
    assert bits > 8 or max(sources.values()) > (1 << bits)  # the narrow numbers wrapped


def test_every_field_type_a_layout_covers() -> None:
    rng = random.Random(3)
    fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
    values: list[object] = [None, True, False, 0, 1, -1, 127, -128, 128, -129, 1 << 31,
                            -(1 << 40), (1 << 63) - 1, 0.0, -2.5, float("inf"), "", "é" * 300,
                            "a" * 255, "a" * 256]
    seq = 0
    for _ in range(40):
        pubs = []
        for _ in range(rng.randrange(2, 50)):  # one is a PUBLICATION
            seq += 1
            fields = {f"k{i}": rng.choice(values) for i in range(rng.randrange(0, 5))}
            pubs.append(Publication("/t", "s", seq, rng.choice(list(PublishType)), fields,
                                    permtoken=rng.choice([None, "tok"]),
                                    timestamp=rng.choice([None, 1.5])))
        data = encode_frames(pubs, 16).encode()
        assert _check(data, fast, usual)
        assert _layouts_used(data) > 0


def test_bytes_changed_at_random_as_the_usual_way() -> None:
    rng = random.Random(17)
    sources = {"peers": 0}
    read = 0
    for round_ in range(400):
        pubs = _alike(rng, sources, rng.randrange(2, 12), 5, True)
        entries = [bytearray(encode_entry(p, lambda _s: 5)) for p in pubs]
        for _ in range(rng.randrange(1, 4)):  # a code, a size, a name, a value...
            entry = rng.choice(entries[1:])
            at = rng.randrange(len(entry))
            entry[at] = rng.choice([entry[at] ^ (1 << rng.randrange(8)), rng.randrange(256)])
        data = encode_batch([bytes(e) for e in entries], first_link_seq=None,
                            retransmit=round_ % 2 == 0).encode()
        fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
        for decoder in (fast, usual):  # where the numbering stood before these
            decoder.unwrapper.seed("peers", pubs[0].source_seq - 1)
        read += _check(data, fast, usual)
    assert 50 < read < 350  # some changes were read (a value), most were not (a mark)


def test_a_layout_refuses_what_the_usual_way_refuses() -> None:
    """A value only the range checks refuse (a width of 65, an unknown type, a source number
    0) in an entry laid out like the ones before it: None, nothing unwrapped."""
    pubs = [Publication("/t", "s", i, fields={"n": 300 + i}) for i in range(1, 41)]
    good = [encode_entry(p, lambda _s: 16) for p in pubs]
    for old, new in ((b"U\x10", b"U\x41"), (b"\xa1\x06update", b"\xa1\x06updatx"),
                     (b"sS(", b"sS\x00")):
        bad = [*good[:39], good[39].replace(old, new, 1)]
        assert bad[39] != good[39]
        data = encode_batch(bad, first_link_seq=None, retransmit=False).encode()
        fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
        before = _state(fast)
        assert read_publications(decode_message(data, True), fast) is None
        assert _state(fast) == before
        try:
            usual.decode(decode_message(data))
        except SeqRepairError:
            continue
        raise AssertionError(f"the usual way took {new!r}")


def test_layouts_learnt_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layout is compiled when seen a second time; past the bound, layouts are forgotten
    (and learnt again); a transfer describes at most one entry in LAYOUT_EVERY."""
    monkeypatch.setattr(entrylayout, "_layouts", {})
    monkeypatch.setattr(batchread, "_last", [None])  # no layout from another test's transfer
    monkeypatch.setattr(entrylayout, "_seen", set())
    monkeypatch.setattr(entrylayout, "MAX_LAYOUTS", 3)
    monkeypatch.setattr(batchread, "LAYOUT_EVERY", 4)
    fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
    unalike = [Publication("/t", "s", i, fields={"k" * i: i}) for i in range(1, 20)]
    assert _check(encode_frames(unalike, 16).encode(), fast, usual)  # 4 described
    assert (len(entrylayout._seen), len(entrylayout._layouts)) == (1, 0)  # 3 + 1: cleared
    alike = [Publication("/t", "s", i, fields={"n": 300 + i}) for i in range(20, 30)]
    data = encode_frames(alike, 16).encode()
    assert _check(data, fast, usual)
    assert len(entrylayout._layouts) == 1
    assert _layouts_used(data) == len(alike)


def test_the_memory_layouts_hold_is_bounded_whatever_the_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Entries of 2,000 fields each, 40 layouts seen twice: what the caches keep stays small
    (a layout kept each field's marks, name and code: ~1.6 MB for a 20 KB entry, so a peer
    sending MAX_LAYOUTS such layouts twice made a subscriber hold gigabytes); an entry of
    more than MAX_LAYOUT_FIELDS fields is read step by step, to the same values."""
    import tracemalloc

    monkeypatch.setattr(entrylayout, "_layouts", {})
    monkeypatch.setattr(batchread, "_last", [None])  # no layout from another test's transfer
    monkeypatch.setattr(entrylayout, "_seen", set())
    entries = []
    for layout in range(40):
        fields = {f"k{layout:02d}.{i:05d}": None for i in range(2_000)}
        entries.append(encode_entry(Publication("/t", "s", 1, fields=fields), lambda _s: 16))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for entry in entries:
            for _ in range(2):
                layout = layout_at(entry, 0)
                if layout is not None:
                    assert layout.read(entry, 0) is not None
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 4 << 20, held
    wide = [Publication("/t", "s", i, fields={f"f{j}": j for j in range(
        entrylayout.MAX_LAYOUT_FIELDS + 1)}) for i in range(1, 80)]
    fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
    assert _check(encode_frames(wide, 16).encode(), fast, usual)
