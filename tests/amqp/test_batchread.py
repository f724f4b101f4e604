"""A ``PUBLICATIONS`` transfer read straight into publications
(:func:`seqrepair.amqp.wire.batchread.read_publications`) gives exactly what the usual read
and decode give, or None with the decoder's numbering untouched (the usual way then reads it)."""

from __future__ import annotations

import random

import pytest

from seqrepair.amqp.wire.batchread import read_publications
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.framing import encode_batch, encode_entry, encode_frames
from seqrepair.amqp.wire.rawamqp import PackedMessage, ReceivedMessage, decode_message
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Heartbeat, Publication, PublishType


def _pub(seq: int, rng: random.Random, *, link: int | None = None,
         again: bool = False) -> Publication:
    fields: dict[str, object] = {"n": seq, "t": rng.random() * 1e9}
    if rng.random() < 0.3:
        fields["text"] = "é" * rng.randrange(0, 300)  # str8 and str32, not ASCII
    if rng.random() < 0.2:
        fields["neg"] = -rng.randrange(0, 1 << 40)
    if rng.random() < 0.1:
        fields["none"] = None
    if rng.random() < 0.1:
        fields["flag"] = True
    return Publication(
        rng.choice(["/load/a", "/load/b/c", "/ü/x"]), rng.choice(["bench", "other"]), seq,
        rng.choice(list(PublishType)), fields, link_seq=link,
        permtoken=rng.choice([None, "tok", "t" * 200]),
        timestamp=rng.choice([None, rng.random() * 1e9]), retransmit=again,
    )


def _numbered(rng: random.Random, seq: dict[str, int], n: int, *, link: int | None = None,
              again: bool = False, gaps: bool = False) -> list[Publication]:
    """``n`` publications as :func:`_pub` draws them, numbered per source on from ``seq``
    (advanced; ``gaps``: now and then a number skipped), link numbers on from ``link``."""
    pubs = []
    for i in range(n):
        pub = _pub(1, rng, link=None if link is None else link + i, again=again)
        seq[pub.source] += rng.choice([1, 1, 1, 2]) if gaps else 1
        pubs.append(Publication(pub.topic, pub.source, seq[pub.source], pub.ptype,
                                pub.fields, pub.link_seq, pub.permtoken, pub.timestamp,
                                pub.retransmit))
    return pubs


def _state(decoder: Decoder) -> tuple[object, ...]:
    unwrapper = decoder.unwrapper
    return (dict(unwrapper._last), dict(unwrapper._next_wire), dict(unwrapper.bits))


def _usual(data: bytes, decoder: Decoder) -> tuple[list[object] | str, list[bytes] | None]:
    message = decode_message(data)
    try:
        frames = decoder.decode(message)
    except SeqRepairError as exc:
        return type(exc).__name__, None
    return frames, getattr(message, "items", None)


def _check(data: bytes, fast: Decoder, usual: Decoder) -> bool:
    """Both ways on ``data`` with decoders in the same state; whether the fast one read it."""
    before = _state(fast)
    assert before == _state(usual)
    lazy = decode_message(data, True)
    read = read_publications(lazy, fast) if isinstance(lazy, ReceivedMessage) else None
    frames, items = _usual(data, usual)
    if read is None:
        assert _state(fast) == before  # untouched: the usual way reads it
        _usual(data, fast)
        assert _state(fast) == _state(usual)
        return False
    assert read[0] == frames
    assert read[1] == items
    assert all(type(p) is Publication for p in read[0])
    assert _state(fast) == _state(usual)
    return True


def test_the_same_as_the_usual_way_for_batches_a_component_sends() -> None:
    rng = random.Random(7)
    fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
    seq = {"bench": 0, "other": 0}
    read = 0
    for round_ in range(300):
        n = rng.randrange(2, 40)
        link = None if rng.random() < 0.3 else rng.randrange(0, (1 << 16) - n)
        again = rng.random() < 0.2
        pubs = _numbered(rng, seq, n, link=link, again=again)
        bits = rng.choice([8, 16, 32, 64]) if round_ % 50 else 3  # wraps too
        data = encode_frames(pubs, bits).encode()
        read += _check(data, fast, usual)
    assert read > 250  # the usual transfers were read the fast way


def test_anything_else_is_left_to_the_usual_way() -> None:
    rng = random.Random(11)
    pubs = [_pub(i, rng, link=i) for i in range(1, 6)]
    hb = Heartbeat(link_seq=6)
    mixed = encode_frames([*pubs, hb]).encode()  # a heartbeat among them
    gapped = encode_frames([pubs[0], pubs[2]]).encode()  # 10-element entries
    single = encode_frames([pubs[0]]).encode()  # PUBLICATION, not a batch
    entries = [encode_entry(p, lambda _s: 32) for p in pubs]
    bad_count = PackedMessage({"message-type": "PUBLICATIONS", "count": 9},
                              encode_batch(entries, first_link_seq=1, retransmit=False).body)
    past_space = encode_batch(entries, first_link_seq=(1 << 16) - 2, retransmit=False)
    zero = encode_entry(Publication("/load/a", "bench", 1), lambda _s: 32)
    assert b"benchS\x01" in zero
    zero = zero.replace(b"benchS\x01", b"benchS\x00")  # source number 0: refused
    cut = encode_batch([*entries[:2], entries[2][:-1]], first_link_seq=1, retransmit=False)
    for data in (mixed, gapped, single, bad_count.encode(), past_space.encode(),
                 encode_batch([bytes(zero)], first_link_seq=1, retransmit=False).encode(),
                 cut.encode()):
        fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
        assert not _check(data, fast, usual)


@pytest.mark.parametrize("most", [3, 5])
def test_max_publications_as_the_usual_way(most: int) -> None:
    rng = random.Random(3)
    pubs = [_pub(i, rng, link=i) for i in range(1, 5)]
    data = encode_frames(pubs).encode()
    fast = Decoder(link_bits=16, max_publications=most)
    usual = Decoder(link_bits=16, max_publications=most)
    assert _check(data, fast, usual) is (most >= 4)


def test_a_lazy_message_read_the_usual_way_is_the_same() -> None:
    rng = random.Random(5)
    data = encode_frames([_pub(i, rng, link=i) for i in range(1, 9)]).encode()
    lazy = decode_message(data, True)
    assert isinstance(lazy, ReceivedMessage)
    assert lazy.body is None
    assert lazy.body_at
    eager = decode_message(data)
    assert isinstance(eager, ReceivedMessage)
    assert eager.body_at is None
    assert read_publications(eager, Decoder()) is None  # read already: the usual way
    # truncated: neither reads it as a message of this module
    assert decode_message(data[:-3], True).__class__ is decode_message(data[:-3]).__class__


def _check_in_trial(data: bytes, fast: Decoder, usual: Decoder, keep: bool) -> bool:
    """:func:`_check` inside a trial each decoder's owner opened (the component's ingest),
    kept or undone after by the owner as ``keep`` says."""
    before = _state(fast)
    assert before == _state(usual)
    fast.unwrapper.begin()
    usual.unwrapper.begin()
    lazy = decode_message(data, True)
    read = read_publications(lazy, fast) if isinstance(lazy, ReceivedMessage) else None
    assert fast.unwrapper.in_trial  # the owner's still
    frames, items = _usual(data, usual)
    if read is None:
        assert _state(fast) == before
        assert fast.unwrapper.trial_sources() == []
        _usual(data, fast)
    else:
        assert read[0] == frames
        assert read[1] == items
        assert sorted(fast.unwrapper.trial_sources()) == sorted(usual.unwrapper.trial_sources())
    assert _state(fast) == _state(usual)
    for decoder in (fast, usual):
        if keep:
            decoder.unwrapper.commit()
        else:
            decoder.unwrapper.rollback({})
    assert _state(fast) == _state(usual)
    if not keep:
        assert _state(fast) == before
    return read is not None


def test_inside_its_owners_trial_the_same_as_the_usual_way() -> None:
    """Narrow widths that wrap, several sources, transfers refused part-way (a number 0
    late in the batch: some sources already unwrapped when it fails), trials undone."""
    rng = random.Random(13)
    fast, usual = Decoder(link_bits=16), Decoder(link_bits=16)
    seq = {"bench": 0, "other": 0}
    read = 0
    for round_ in range(300):
        n = rng.randrange(2, 40)
        pubs = _numbered(rng, seq, n, gaps=True)
        refused = round_ % 7 == 3
        bits = rng.choice([3, 4, 8] if refused else [3, 4, 8, 16, 64])  # (a smallulong)
        data = encode_frames(pubs, bits).encode()
        if refused:  # the last entry's number made 0: refused, after the others
            last = encode_entry(pubs[-1], lambda _s, b=bits: b)
            wire = (pubs[-1].source_seq - 1) % ((1 << bits) - 1) + 1
            marker = pubs[-1].source.encode() + bytes((0x53, wire))
            assert marker in last
            entries = [encode_entry(p, lambda _s, b=bits: b) for p in pubs[:-1]]
            entries.append(last.replace(marker, pubs[-1].source.encode() + b"\x53\x00"))
            data = encode_batch(entries, first_link_seq=None, retransmit=False).encode()
        keep = rng.random() < 0.8
        read += _check_in_trial(data, fast, usual, keep)
        if not keep:  # the publisher sends them again: numbered from where the journal is
            for source in seq:
                seq[source] = max(seq[source] - n, fast.unwrapper._last.get(source, 0))
    assert read > 150


def test_a_trial_touched_already_is_left_to_the_usual_way() -> None:
    rng = random.Random(17)
    fast = Decoder(link_bits=16)
    data = encode_frames([_pub(i, rng) for i in range(1, 5)], 8).encode()
    fast.unwrapper.begin()
    fast.unwrapper.unwrap("bench", 1, 8)
    before = _state(fast)
    lazy = decode_message(data, True)
    assert isinstance(lazy, ReceivedMessage)
    assert read_publications(lazy, fast) is None
    assert _state(fast) == before
    assert fast.unwrapper.trial_sources() == ["bench"]
