"""Runs of alike entries read at once (:mod:`seqrepair.amqp.wire.entryrun`, inside
:func:`~seqrepair.amqp.wire.batchread.read_publications`) give exactly what reading each entry
by itself gives and what the usual read and decode give: the same publications, the same entry
bytes, the decoder's numbering left the same; transfers made at random (widths that wrap inside
a run, numbers with holes, several sources, topics, publish types, times and tokens, strings
not ASCII) and the same with bytes changed at random (None: the usual way refuses or reads it,
with the same typed error)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from seqrepair.amqp.wire import batchread, entryrun
from seqrepair.amqp.wire.batchread import read_publications
from seqrepair.amqp.wire.codec import Decoder
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
