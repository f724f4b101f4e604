"""The wire format: every frame and request survives encode -> bytes -> decode unchanged."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message, ulong

from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.errors import (
    MalformedMessageError,
    OutOfSpaceError,
    OversizedMessageError,
    UnknownMessageTypeError,
)
from seqrepair.amqp.wire.framing import encode_frame, encode_frames
from seqrepair.amqp.wire.technical import Capabilities, CapabilitiesRequest, SubscriptionState
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
    SourceGapRequest,
)

pytestmark = pytest.mark.amqp

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=10),
)
fields = st.dictionaries(names, scalars, max_size=6)


@st.composite
def publications(draw: st.DrawFn, bits: int = 16) -> tuple[Publication, int]:
    source_bits = draw(st.sampled_from([3, 8, 16, 32, 64]))
    seq = draw(st.integers(1, (1 << source_bits) - 1))
    pub = Publication(
        topic="/" + draw(st.from_regex(r"[a-z]{1,5}(/[a-z]{1,5}){0,3}", fullmatch=True)),
        source=draw(names),
        source_seq=seq,
        ptype=draw(st.sampled_from(list(PublishType))),
        fields=draw(fields),
        link_seq=draw(st.none() | st.integers(0, (1 << bits) - 1)),
        permtoken=draw(st.none() | names),
        timestamp=draw(st.none() | st.floats(0, 2e9)),
        retransmit=draw(st.booleans()),
    )
    return pub, source_bits


def roundtrip(message: Message) -> Message:
    """Through bytes, as on the wire."""
    out = Message()
    out.decode(message.encode())
    return out


@given(publications())
def test_single_publication_roundtrip(drawn: tuple[Publication, int]) -> None:
    pub, bits = drawn
    [back] = Decoder().decode(roundtrip(encode_frame(pub, bits)))
    assert back == pub
    assert isinstance(back, Publication)
    assert dict(back.fields) == dict(pub.fields)


@settings(max_examples=50)
@given(st.lists(publications() | st.builds(Heartbeat, st.integers(0, 65535)), min_size=1,
                max_size=8))
def test_batch_roundtrip_keeps_order_and_nulls(drawn: list[object]) -> None:
    frames = [d[0] if isinstance(d, tuple) else d for d in drawn]
    bits = {d[0].source: d[1] for d in drawn if isinstance(d, tuple)}
    frames = [f for f in frames if not isinstance(f, Publication) or bits[f.source] == next(
        d[1] for d in drawn if isinstance(d, tuple) and d[0].source == f.source)]
    # one source can only have one width: keep the first width seen per source; and a
    # receiver unwraps a source's wire numbers in order, so keep a source's publications only
    # while each is after the last one kept (within half its space): those come back unchanged
    keep = []
    last: dict[str, int] = {}
    for d in drawn:
        if isinstance(d, tuple):
            pub, width = d
            half = ((1 << width) - 2) // 2
            prev = last.get(pub.source)
            ahead = prev is None or 0 < pub.source_seq - prev <= half
            if width == bits[pub.source] and ahead:
                keep.append(pub)
                last[pub.source] = pub.source_seq
        else:
            keep.append(d)
    if not keep:
        return
    back = Decoder().decode(roundtrip(encode_frames(keep, bits)))
    assert back == keep


def test_wire_source_seq_is_unwrapped_to_absolute() -> None:
    decoder = Decoder()
    decoder.unwrapper.seed("feed.a", 65535)
    pub = Publication("/a", "feed.a", 65536, "update", {"x": None})
    msg = encode_frame(pub, 16)
    assert msg.properties["source_seq"] == 1
    [back] = decoder.decode(roundtrip(msg))
    assert back.source_seq == 65536
    assert back.fields == {"x": None}


@given(
    st.one_of(
        st.builds(GapRequest, st.integers(1, 65535), st.integers(1, 65535)),
        st.builds(SourceGapRequest, st.dictionaries(names, st.integers(0, 2**64 - 1))),
        st.builds(
            ReplayComplete,
            st.dictionaries(names, st.integers(0, 2**64 - 1)),
            st.none() | st.builds(SourceGapRequest, st.dictionaries(names, st.integers(0, 99))),
            more=st.booleans(),
        ),
        st.builds(
            GapError,
            st.sampled_from(["context-lost", "refused", "trimmed"]),
            st.none()
            | st.builds(GapRequest, st.integers(1, 65535), st.integers(1, 65535))
            | st.builds(SourceGapRequest, st.dictionaries(names, st.integers(0, 99))),
            st.text(max_size=10),
        ),
        st.builds(
            GapError,
            st.just("trimmed"),
            st.builds(SourceGapRequest, st.dictionaries(names, st.integers(0, 99))),
            st.text(max_size=10),
            st.dictionaries(names, st.integers(1, 2**64 - 1)),
        ),
        st.just(CapabilitiesRequest()),
        st.builds(
            SubscriptionState,
            st.sampled_from(["PAUSED", "ACTIVE"]),
            st.text(max_size=5),
            st.text(max_size=5),
            st.text(max_size=5),
        ),
    )
)
def test_requests_and_technical_messages_roundtrip(obj: object) -> None:
    assert Decoder().decode(roundtrip(encode(obj))) == [obj]  # type: ignore[arg-type]


def test_a_source_request_and_its_answers_carry_its_id() -> None:
    request = SourceGapRequest({"feed.a": 3}, request_id=2**40)
    answers = [
        request,
        ReplayComplete({"feed.a": 9}, request, more=True),
        GapError("trimmed", request, "", {"feed.a": 5}),
        GapError("refused", request, "budget"),
    ]
    decoded = [Decoder().decode(roundtrip(encode(obj)))[0] for obj in answers]
    named = [d if isinstance(d, SourceGapRequest) else d.request for d in decoded]
    assert [r.request_id for r in named] == [2**40] * 4  # type: ignore[union-attr]
    unnamed = Decoder().decode(roundtrip(encode(SourceGapRequest({"feed.a": 3}))))
    assert unnamed[0].request_id is None  # type: ignore[union-attr]


def test_a_request_id_that_is_no_unsigned_integer_is_refused() -> None:
    message = roundtrip(encode(SourceGapRequest({"feed.a": 3}, request_id=1)))
    message.properties["request_id"] = "one"
    with pytest.raises(MalformedMessageError, match="request_id"):
        Decoder().decode(message)


def test_a_source_request_carries_the_link_number_it_covers_through() -> None:
    decoded = Decoder(link_bits=8).decode(
        roundtrip(encode(SourceGapRequest({"feed.a": 3}, request_id=1, link_through=255)))
    )
    assert decoded[0].link_through == 255  # type: ignore[union-attr]
    plain = Decoder().decode(roundtrip(encode(SourceGapRequest({"feed.a": 3}))))
    assert plain[0].link_through is None  # type: ignore[union-attr]


@pytest.mark.parametrize(("value", "error"), [(ulong(256), OutOfSpaceError),
                                              ("7", MalformedMessageError)])
def test_a_link_through_outside_the_link_space_is_refused(
    value: object, error: type[Exception]
) -> None:
    message = roundtrip(encode(SourceGapRequest({"feed.a": 3}, link_through=1)))
    message.properties["link_through"] = value
    with pytest.raises(error, match="link_through"):
        Decoder(link_bits=8).decode(message)


@pytest.mark.parametrize(("retention", "count", "most"), [(3600.0, None, None),
                                                          (None, 100, 4096), (60.0, 5, 1)])
def test_capabilities_roundtrip(retention: float | None, count: int | None,
                                most: int | None) -> None:
    caps = Capabilities(16, {"feed.a": 32}, 32, 1.0, 10_000, retention,
                        ("update", "image"), 64, retention_count=count, max_publish_batch=most,
                        limits={"max-pending": 20_000, "request-rate": 500.5})
    assert Decoder().decode(roundtrip(encode(caps))) == [caps]


@pytest.mark.parametrize("limits", [["x"], {"max-pending": "many"}, {"max-pending": True},
                                    {7: 1}])
def test_capabilities_with_malformed_limits_are_refused(limits: object) -> None:
    message = roundtrip(encode(Capabilities(16, {}, 32, 1.0, 10, None, (), 64)))
    message.body["limits"] = limits
    with pytest.raises(MalformedMessageError, match="limit"):
        Decoder().decode(message)


def test_a_batch_larger_than_the_receiver_takes_is_refused_before_decoding() -> None:
    pubs = [Publication("/a", "feed.a", n, "update", {"n": n}) for n in range(1, 6)]
    message = roundtrip(encode_frames(pubs, 32))
    assert len(Decoder(max_publications=5).decode(message)) == 5
    with pytest.raises(OversizedMessageError, match="at most 4"):
        Decoder(max_publications=4).decode(message)


@pytest.mark.parametrize(
    ("props", "body", "error"),
    [
        ({}, None, MalformedMessageError),
        ({"message-type": "NONSENSE"}, None, UnknownMessageTypeError),
        ({"message-type": "HEARTBEAT"}, None, MalformedMessageError),
        ({"message-type": "HEARTBEAT", "link_seq": ulong(65536)}, None, OutOfSpaceError),
        ({"message-type": "HEARTBEAT", "link_seq": "7"}, None, MalformedMessageError),
        ({"message-type": "PUBLICATION", "source": "a", "topic": "/t", "source_seq": 8,
          "source_bits": 3}, {}, OutOfSpaceError),
        ({"message-type": "PUBLICATION", "source": "a", "topic": "/t", "source_seq": 1,
          "source_bits": 65}, {}, OutOfSpaceError),
        ({"message-type": "PUBLICATION", "source": "a", "topic": "/t", "source_seq": 1,
          "ptype": "bogus"}, {}, MalformedMessageError),
        ({"message-type": "PUBLICATION", "source": "a", "topic": "/t", "source_seq": 1},
         [1, 2], MalformedMessageError),
        ({"message-type": "PUBLICATION", "source": "a", "topic": "/t"}, {}, MalformedMessageError),
        ({"message-type": "PUBLICATIONS"}, [], MalformedMessageError),
        ({"message-type": "PUBLICATIONS"}, [{"message-type": "GAP-REQUEST"}],
         UnknownMessageTypeError),
        ({"message-type": "GAP-REQUEST", "link_from": 0, "link_to": 3}, None, OutOfSpaceError),
        ({"message-type": "SOURCE-GAP-REQUEST"}, {"a": -1}, OutOfSpaceError),
        ({"message-type": "GAP-ERROR", "reason": "bored"}, None, MalformedMessageError),
        ({"message-type": "REPLAY-COMPLETE"}, {"through": {"a": 1}, "more": "yes"},
         MalformedMessageError),
    ],
)
def test_malformed_messages_raise_typed_errors(props: dict, body: object, error: type) -> None:
    with pytest.raises(error):
        Decoder().decode(roundtrip(Message(body=body, properties=props)))


def test_plain_publication_gets_defaults_and_assigned_number() -> None:
    msg = Message(body={"speed": 3})
    [pub] = Decoder().decode(
        roundtrip(msg), default_source="plain", default_topic="/w", assign=lambda s: 41
    )
    assert (pub.source, pub.topic, pub.source_seq, pub.fields) == ("plain", "/w", 41, {"speed": 3})


@given(st.sampled_from([3, 4, 8, 16]), st.lists(st.integers(-3, 3), min_size=1, max_size=200))
def test_source_unwrapper_agrees_with_the_core_arithmetic(bits: int, steps: list[int]) -> None:
    """The consecutive-number fast path gives what SequenceSpace.unwrap gives."""
    from seqrepair.amqp.wire.framing import SourceUnwrapper
    from seqrepair.core.sequence import SequenceSpace

    space = SequenceSpace(bits)
    fast = SourceUnwrapper()
    last = 0
    absolute = 0
    for step in steps:
        absolute = max(1, absolute + (1 if step >= 0 else step))  # mostly consecutive
        wire = space.wire(absolute)
        expected = space.unwrap(last, wire)
        last = max(last, expected)
        assert fast.unwrap("s", wire, bits) == expected


def test_a_trial_rolled_back_leaves_the_unwrapper_as_it_was() -> None:
    from seqrepair.amqp.wire.framing import SourceUnwrapper

    unwrapper = SourceUnwrapper()
    assert [unwrapper.unwrap("a", wire, 32) for wire in (1, 2, 3)] == [1, 2, 3]
    unwrapper.begin()
    assert unwrapper.unwrap("a", 1 << 40, 64) == 1 << 40  # a message about to be rejected
    assert unwrapper.unwrap("b", 5, 8) == 5
    unwrapper.rollback({})
    assert (unwrapper.bits, unwrapper.unwrap("a", 4, 32)) == ({"a": 32}, 4)
    assert unwrapper.unwrap("b", 1, 8) == 1  # b never seen: its first number starts it


def test_a_trial_rolled_back_continues_after_what_was_taken_of_it() -> None:
    """At 3 bits (1..7) a message of 11..13 refused part-way, 11..13 journaled: the next
    number, 14 (wire 7), must not unwrap behind 11 (as 7) from where the trial began."""
    from seqrepair.amqp.wire.framing import SourceUnwrapper

    unwrapper = SourceUnwrapper()
    unwrapper.seed("a", 10)
    unwrapper.begin()
    assert [unwrapper.unwrap("a", wire, 3) for wire in (4, 5, 6)] == [11, 12, 13]
    unwrapper.rollback({"a": 13})
    assert unwrapper.unwrap("a", 7, 3) == 14


GOOD_ENTRY = ["update", 1.5, "src", ulong(7), 32, "/t/a", {"n": 1}, None]


def _raw_batch(*entries: list) -> object:
    """A PUBLICATIONS message as the component reads it (rawamqp: plain values)."""
    from seqrepair.amqp.wire.rawamqp import PackedMessage, encode_value, read_message

    props = {"message-type": "PUBLICATIONS", "count": ulong(len(entries)), "link_seq": ulong(4)}
    raw = read_message(PackedMessage(props, encode_value(list(entries))).encode())
    assert raw is not None
    return raw


@pytest.mark.parametrize(
    ("index", "value", "error"),
    [
        (0, "bogus", MalformedMessageError),
        (0, 3, MalformedMessageError),
        (1, "soon", MalformedMessageError),
        (1, True, MalformedMessageError),
        (2, "", MalformedMessageError),
        (2, 5, MalformedMessageError),
        (3, -1, OutOfSpaceError),
        (3, 0, OutOfSpaceError),
        (3, "7", MalformedMessageError),
        (4, 65, OutOfSpaceError),
        (4, 1, OutOfSpaceError),
        (5, "", MalformedMessageError),
        (5, None, MalformedMessageError),
        (6, [1, 2], MalformedMessageError),
        (7, "", MalformedMessageError),
        (7, 9, MalformedMessageError),
    ],
)
def test_malformed_batch_entries_raise_typed_errors(index: int, value: object, error: type) -> None:
    entry = list(GOOD_ENTRY)
    entry[index] = value
    with pytest.raises(error):
        Decoder().decode(_raw_batch(list(GOOD_ENTRY), entry))  # type: ignore[arg-type]


def test_batch_entries_of_other_valid_types_decode_as_the_usual_ones() -> None:
    usual = Decoder().decode(_raw_batch(list(GOOD_ENTRY)))  # type: ignore[arg-type]
    other = list(GOOD_ENTRY)
    other[0], other[1], other[7] = "add", 3, "gold"  # add = image; an integer timestamp
    [pub] = Decoder().decode(_raw_batch(other))  # type: ignore[arg-type]
    assert pub == attrs.evolve(usual[0], ptype=PublishType.IMAGE, timestamp=3.0,
                               permtoken="gold")
    assert type(pub.timestamp) is float
    assert usual[0].link_seq == 4


@pytest.mark.parametrize("ranges", [[(3, 9)], [(3, 9), (65530, 2)]])
def test_gap_requests_written_raw_read_back_by_both_readers(ranges: list[tuple[int, int]]) -> None:
    from seqrepair.amqp.wire.codec import encode_gap_requests
    from seqrepair.amqp.wire.rawamqp import read_message

    requests = [GapRequest(a, b) for a, b in ranges]
    message = encode_gap_requests(requests)
    message.id, message.reply_to = 7, "$link/x"
    data = message.encode()
    via_proton = Message()
    via_proton.decode(data)
    assert Decoder().decode(via_proton) == requests
    assert Decoder().decode(read_message(data)) == requests  # type: ignore[arg-type]
    assert (via_proton.id, via_proton.reply_to) == (7, "$link/x")
    with pytest.raises(MalformedMessageError):
        encode_gap_requests([])
