"""The hand-written hot-path codec agrees with proton's, both ways.

Whatever :mod:`seqrepair.amqp.wire.rawamqp` writes, proton reads as the same values (a plain proton
client can read every frame); whatever proton writes, the raw reader reads as proton would
(after ``codec._plain``) or declines, and the Decoder then gives the same frames.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import UNDESCRIBED, Array, Data, Message, symbol, ulong

from seqrepair.amqp.wire.codec import Decoder, _plain, encode
from seqrepair.amqp.wire.errors import MalformedMessageError
from seqrepair.amqp.wire.framing import encode_frames
from seqrepair.amqp.wire.rawamqp import (
    PackedMessage,
    ReceivedMessage,
    decode_message,
    encode_value,
    malformed,
    read_message,
)
from seqrepair.core.messages import GapRequest, Heartbeat, Publication

from .test_codec import publications, roundtrip

pytestmark = pytest.mark.amqp

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=300) | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_proton_reads_what_rawamqp_writes(value: object) -> None:
    message = PackedMessage({"k": ulong(3), "s": "x"}, encode_value(value))
    back = roundtrip(message)  # type: ignore[arg-type]
    assert _plain(back.body) == _plain(value)
    assert back.properties == {"k": 3, "s": "x"}


@given(values)
def test_rawamqp_reads_what_proton_writes(value: object) -> None:
    data = Message(body=value, properties={"a": ulong(1)}, id=7, reply_to="$link/x",
                   correlation_id="c", instructions={symbol("address-cookie"): b"\x01"}).encode()
    raw = read_message(data)
    assert raw is not None
    assert raw.body == _plain(value)
    assert (raw.id, raw.reply_to, raw.correlation_id) == (7, "$link/x", "c")
    assert raw.instructions == {"address-cookie": b"\x01"}


@settings(max_examples=50)
@given(st.lists(publications(), min_size=1, max_size=6), st.integers(1, 60_000))
def test_raw_and_proton_readers_decode_the_same_batch(
    drawn: list[tuple[Publication, int]], first: int
) -> None:
    bits = {}
    frames: list[Publication | Heartbeat] = []
    for i, (pub, b) in enumerate(drawn):
        if bits.setdefault(pub.source, b) == b:
            frames.append(pub.with_link(first + i, retransmit=False))
    data = encode_frames(frames, bits).encode()
    via_proton = decoded(roundtrip_bytes(data))
    raw = read_message(data)
    assert raw is not None
    assert decoded(raw) == via_proton  # the same frames, or the same refusal
    if isinstance(via_proton, list):
        assert [f.link_seq for f in via_proton] == [f.link_seq for f in frames]


def decoded(message: object) -> list[object] | str:
    """What a fresh decoder makes of ``message``: its frames, or the refusal it raises (a 64-bit
    source drawn at 2**63 + 1 and then 1 unwraps past the largest absolute number)."""
    try:
        return list(Decoder().decode(message))  # type: ignore[arg-type]
    except MalformedMessageError as exc:
        return f"{type(exc).__name__}: {exc.message}"


def roundtrip_bytes(data: bytes) -> Message:
    out = Message()
    out.decode(data)
    return out


def test_requests_written_by_proton_read_raw() -> None:
    message = encode(GapRequest(3, 9))
    raw = read_message(message.encode())
    assert raw is not None
    assert Decoder().decode(raw) == [GapRequest(3, 9)]  # type: ignore[arg-type]


def test_unknown_types_are_left_to_proton() -> None:
    data = Message(body=[symbol("s"), ulong(5)], properties={"x": 1}).encode()
    raw = read_message(data)
    assert raw is not None
    assert raw.body == ["s", 5]
    assert read_message(b"\x00\x53\x75\xa0\x01x") is None  # a data section: proton's
    assert read_message(b"\x00\x53\x77\xe0\x02\x01\x41") is None  # an array: proton's


def test_batch_entries_are_read_back_as_the_bytes_written() -> None:
    from seqrepair.amqp.wire.framing import encode_entry

    pubs = [Publication("/t", "s", i, "update", {"n": i, "x": None}) for i in range(1, 4)]
    raw = read_message(encode_frames(pubs, 32).encode())
    assert raw is not None
    assert raw.items == [encode_entry(p, lambda _s: 32) for p in pubs]


def test_a_map_with_a_repeated_key_is_left_to_proton() -> None:
    from seqrepair.amqp.wire.rawamqp import encode_list

    pairs = [encode_value("k"), encode_value(1), encode_value("k"), encode_value(2)]
    repeated = b"\xc1" + bytes((len(b"".join(pairs)) + 1, 4)) + b"".join(pairs)
    data = PackedMessage({"x": 1}, encode_list([repeated])).encode()
    assert read_message(data) is None
    assert read_message(PackedMessage({"x": 1}, encode_value([{"k": -5}])).encode()).body == [
        {"k": -5}
    ]


def test_bytes_past_the_last_section_are_left_to_proton() -> None:
    data = PackedMessage({"x": 1}, encode_value("abc")).encode()
    assert read_message(data) is not None
    assert read_message(data[:-1]) is None  # the body's string is cut short


proton_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=300) | st.binary(max_size=300) | st.uuids()
    | st.sampled_from([symbol("s"), symbol("sym-bol")]) | st.integers(0, 2**64 - 1).map(ulong)
    | st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5).map(
        lambda xs: Array(UNDESCRIBED, Data.INT, *xs))
    | st.lists(st.text(max_size=5), max_size=5).map(
        lambda xs: Array(UNDESCRIBED, Data.STRING, *xs)),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(proton_values)
def test_whatever_proton_writes_is_well_formed_and_decodes_as_proton_reads_it(
    value: object,
) -> None:
    data = Message(body=value, properties={"a": 1}, id=3,
                   instructions={symbol("x"): value}).encode()
    assert malformed(data) is None
    decoded = decode_message(data)
    assert getattr(decoded, "malformed", None) is None
    assert _plain(decoded.body) == _plain(roundtrip_bytes(data).body)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xff", "does not start a section"),
        (b"\x00\x53\x77\xa1\x05ab", "past the end"),
        (b"\x00\x53\x77\x40\xff", "does not start a section"),
        (b"\x00\x53\x77\xc0\x03\x01\xff\xff", "no AMQP type"),
        (b"\x00\x53\x77\xc0\x04\x02\x40\x40", "size does not match"),
        (b"\x00\x53\x77\xe0\x06\x02\xa1\x01A\x05B", "past the end"),
        (b"\x00\x53\x77\xa1\x02\xff\xfe", "UnicodeDecodeError"),
        (b"\x00" * 200, "nested too deep"),
    ],
)
def test_bytes_that_are_not_amqp_are_marked_malformed_not_guessed(data: bytes, why: str) -> None:
    decoded = decode_message(data)
    assert isinstance(decoded, ReceivedMessage)
    assert decoded.malformed is not None
    assert why in decoded.malformed
    with pytest.raises(MalformedMessageError, match="not a well-formed AMQP message"):
        Decoder().decode(decoded)  # type: ignore[arg-type]


@given(publications())
def test_a_publication_entry_written_in_line_is_the_generic_one(
    drawn: tuple[Publication, int],
) -> None:
    from seqrepair.amqp.wire.framing import _entry_items, encode_entry
    from seqrepair.amqp.wire.rawamqp import encode_list

    pub, bits = drawn
    for p in (pub, attrs.evolve(pub, topic="/" + "t" * 300, source="s" * 300)):
        assert encode_entry(p, lambda _s: bits) == encode_list(_entry_items(p, lambda _s: bits))


@given(publications(), st.lists(values, min_size=8, max_size=8))
def test_an_entry_read_in_line_is_what_the_generic_reader_reads(
    drawn: tuple[Publication, int], other: list[object]
) -> None:
    from seqrepair.amqp.wire.framing import encode_entry
    from seqrepair.amqp.wire.rawamqp import _read, _read_entry

    pub, bits = drawn
    entry = encode_entry(pub, lambda _s: bits)
    usual, _ = _read(entry, 0)
    usual[3] = ulong(usual[3])  # read back as an int; written as a ulong (up to 2**64 - 1)
    shapes = [entry, encode_value(other)]
    for i in range(8):  # each element in turn of another type or size
        shapes.append(encode_value([*usual[:i], other[i], *usual[i + 1 :]]))
    for data in shapes:
        if data[0] == 0xC0 and data[2] == 8:
            assert _read_entry(data, 0) == _read(data, 0)


_map_keys = (st.sampled_from(["n", "t", "pad", "é", "k" * 300]) | st.text(max_size=300)
             | st.integers(-300, 300) | st.booleans() | st.none() | st.floats(allow_nan=False))
_map_values = (values | st.integers(-(2**70), 2**70) | st.integers(-130, 130)
               | st.sampled_from([True, False, 1, 0, -1, 1.0, 2**63 - 1, -(2**63), 2**63])
               | st.text(alphabet="\ud800x", max_size=3) | st.just(ulong(5)) | st.just(symbol("s")))


@settings(max_examples=400)
@given(st.lists(st.tuples(_map_keys, _map_values), max_size=40))
def test_a_map_written_in_line_is_the_one_written_value_by_value(
    items: list[tuple[object, object]],
) -> None:
    """encode_map's in-line cases and remembered keys give _encode_map_slowly's bytes, or
    raise as it does (an integer past an AMQP long, a string that is not UTF-8)."""
    from seqrepair.amqp.wire.rawamqp import _encode_map_slowly, encode_map

    mapping = dict(items)
    try:
        expected: bytes | type[BaseException] = _encode_map_slowly(mapping)
    except Exception as exc:  # the same error either way
        expected = type(exc)
    for _ in range(2):  # the second time with its keys remembered
        if isinstance(expected, bytes):
            assert encode_map(mapping) == expected
        else:
            with pytest.raises(expected):
                encode_map(mapping)


def test_the_remembered_map_keys_stay_small_whatever_the_keys() -> None:
    """encode_map remembers the encoding of the field names it writes (the same few again
    and again), at most some thousands of them: a name may be as long as a publication
    (512 KiB), and a publisher's distinct long names (the component encodes every fanned-out
    publication that came without its entry, e.g. a non-ASCII one) were held whole, up to
    gigabytes, long after their publications."""
    from seqrepair.amqp.wire import rawamqp

    rawamqp._KEYS.clear()
    for i in range(200):
        rawamqp.encode_map({f"{i:06d}" + "é" * 50_000: 1, "n": i})  # ~100 KB a name
    held = sum(len(key) * 4 + len(encoded) for key, encoded in rawamqp._KEYS.items())
    assert held < 1 << 20
    assert "n" in rawamqp._KEYS  # the short names are remembered still
