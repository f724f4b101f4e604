"""A message that is refused changes nobody's state (issue 22 §4), in memory.

The component keeps, per source, the state that turns a publisher's wire numbers into absolute
ones (the decoder's :class:`~seqrepair.amqp.wire.framing.SourceUnwrapper`). A PUBLICATION sent to
``$seqrepair`` used to be decoded (so unwrapped) before it was refused, and three of them moved
the real publisher's source far enough that its next message was refused with
``amqp:precondition-failed``, forever. Here: every refusal, on every path, leaves that state as
it was, and a ``PUBLICATIONS`` whose ``count`` disagrees with its entries is refused.
The same over real processes: :mod:`tests.amqp.test_hostile_peers`.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest
from proton import Delivery, Endpoint, Message, ulong

from seqrepair.amqp.component.config import Bucket
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.errors import MalformedMessageError, UnknownMessageTypeError
from seqrepair.amqp.wire.framing import encode_frames
from seqrepair.core.messages import Heartbeat, Publication

from .test_journal_outage import ACCEPTED, outcome
from .test_numbering import Harness, _Delivery

pytestmark = pytest.mark.amqp

SOURCE = "feed.narrow"
BITS = 8


def narrow(first: int, last: int, *, source: str = SOURCE, count: Any = "auto") -> Message:
    """Publications ``first..last`` of ``source`` in an 8-bit space, one message (wire numbers
    wrap: 255 is followed by 1)."""
    body = [
        {"source": source, "source_seq": ulong((seq - 1) % 255 + 1), "source_bits": BITS,
         "topic": "/plain/x", "fields": {"n": seq}}
        for seq in range(first, last + 1)
    ]
    props: dict[str, Any] = {"message-type": "PUBLICATIONS"}
    if count == "auto":
        props["count"] = ulong(len(body))
    elif count is not None:
        props["count"] = count
    return Message(body=body, properties=props)


def single(wire: int, *, source: str = SOURCE) -> Message:
    return Message(
        properties={"message-type": "PUBLICATION", "source": source, "source_seq": ulong(wire),
                    "source_bits": BITS, "topic": "/plain/x"},
        body={"n": -1},
    )


def state(decoder: Decoder) -> tuple[Any, ...]:
    unwrapper = decoder.unwrapper
    return (dict(unwrapper._last), dict(unwrapper._next_wire), dict(unwrapper.bits))


def control(h: Harness, message: Message) -> _Delivery:
    """``message`` sent to ``$seqrepair`` by another connection than the publisher's."""
    conn = SimpleNamespace(remote_container="hostile", seqrepair_id=99,
                           bucket=Bucket(1e9, 1e9, 1e9, 0.0), transport=None)
    receiver = SimpleNamespace(kind="control", name="hostile-requests", connection=conn,
                               state=Endpoint.LOCAL_ACTIVE, credit=1_000, flow=lambda n: None)
    delivery = _Delivery()
    h.component.on_message(SimpleNamespace(receiver=receiver, delivery=delivery,
                                           message=message))
    assert delivery.settled
    return delivery


# --- the decoder: all or nothing ---------------------------------------------------------


def test_a_batch_refused_at_its_last_entry_leaves_no_source_number_behind() -> None:
    decoder = Decoder()
    decoder.decode(narrow(1, 3))
    before = state(decoder)
    bad = narrow(100, 102, source="other")
    bad.body.insert(0, narrow(4, 4).body[0])  # SOURCE moves first...
    bad.body[-1]["source_seq"] = ulong(300)  # ...then an entry outside 8 bits
    bad.properties["count"] = ulong(len(bad.body))

    with pytest.raises(MalformedMessageError):
        decoder.decode(bad)

    assert state(decoder) == before  # "other" not even known
    assert [p.source_seq for p in decoder.decode(narrow(4, 5))] == [4, 5]


def test_a_publication_sent_as_a_request_is_not_implemented_and_touches_nothing() -> None:
    decoder = Decoder()
    decoder.decode(narrow(1, 3))
    before = state(decoder)
    frames = [Publication("/plain/x", SOURCE, 200, fields={}), Heartbeat(7)]
    for message in (single(120), narrow(60, 62), encode_frames(frames, lambda s: BITS),
                    Message(properties={"message-type": "HEARTBEAT", "link_seq": ulong(3)})):
        with pytest.raises(UnknownMessageTypeError) as refused:
            decoder.decode_request(message)
        assert refused.value.condition == "amqp:not-implemented"
    assert state(decoder) == before


@pytest.mark.parametrize("count", [ulong(2), ulong(4), 0, -3, True, "3", 3.0, ulong(2**64 - 1)])
def test_a_publications_count_that_disagrees_with_its_entries_is_a_decode_error(
    count: Any,
) -> None:
    decoder = Decoder()
    with pytest.raises(MalformedMessageError) as refused:
        decoder.decode(narrow(1, 3, count=count))
    assert refused.value.condition == "amqp:decode-error"
    assert state(decoder) == ({}, {}, {})


def test_a_publications_count_that_agrees_or_is_absent_is_read() -> None:
    for count in ("auto", None, 3):
        assert [p.source_seq for p in Decoder().decode(narrow(1, 3, count=count))] == [1, 2, 3]


# --- the component: a refused message moves nobody's numbers ------------------------------


def test_three_publications_sent_to_seqrepair_do_not_stop_the_real_publisher() -> None:
    h = Harness()
    assert outcome(h.send(narrow(1, 5))) == ACCEPTED
    refused = [control(h, single(wire)) for wire in (60, 120, 180)]

    assert [outcome(d) for d in refused] == [(Delivery.REJECTED, "amqp:not-implemented")] * 3
    assert outcome(h.send(narrow(6, 300))) == ACCEPTED  # wraps the 8-bit space
    assert h.journaled(SOURCE) == [(seq, seq) for seq in range(1, 301)]
    assert h.component.stats["rejected"] == 3


def test_refused_publications_on_a_publishing_link_leave_no_source_behind() -> None:
    h = Harness()
    assert outcome(h.send(narrow(1, 5))) == ACCEPTED
    before = state(h.component.decoder)
    refusals = [
        h.send(narrow(6, 8, count=ulong(2))),  # count disagrees
        h.send(narrow(6, 8, source="stranger")),  # skips numbers the journal does not hold
        h.send(narrow(100, 101)),  # skips numbers of SOURCE
        h.send(Message(properties={"message-type": "PUBLICATIONS", "count": ulong(2)},
                       body=[narrow(6, 6, source="s2").body[0], {"source": 5}])),
    ]

    assert [o.outcome for o in refusals] == [Delivery.REJECTED] * 4
    assert state(h.component.decoder) == before
    assert set(h.component.capabilities().source_bits) == {SOURCE}
    assert "stranger" not in h.component.ingest.journal._hw
    assert "s2" not in h.component.ingest.journal._hw
    assert outcome(h.send(narrow(6, 8))) == ACCEPTED
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 9)]


def test_a_message_whose_reply_to_is_not_utf8_is_malformed_not_an_internal_error() -> None:
    from seqrepair.amqp.wire.rawamqp import decode_message

    raw = bytearray(Message(properties={"message-type": "CAPABILITIES"},
                            reply_to="$link/abcdef").encode())
    at = raw.index(b"abcdef")
    raw[at] = 0xA7  # a continuation byte with no start: not UTF-8
    h = Harness()
    refused = control(h, decode_message(bytes(raw)))  # type: ignore[arg-type]

    assert outcome(refused) == (Delivery.REJECTED, "amqp:decode-error")


def _deep(depth: int) -> bytes:
    inner = b"\x45"  # an empty list
    for _ in range(depth):
        inner = b"\xd0" + struct.pack(">II", len(inner) + 4, 1) + inner
    return inner


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\x53\x77" + _deep(5000),  # lists in lists, past Python's recursion limit
        b"\x00\x53\x77\x73\x7f\xff\xff\xff",  # a char far past U+10FFFF
        b"\x00\x53\x77\x73\x00\x11\x00\x00",  # the first char past U+10FFFF
        b"\x00\x53\x77\x98\x01\x02",  # a uuid cut short
    ],
)
def test_bytes_no_reader_can_take_are_malformed_never_raised(body: bytes) -> None:
    """What a peer sends reaches the component's event loop only through decode_message; one
    exception out of it ended the component for every peer (found by the hostile fuzz)."""
    from seqrepair.amqp.wire.rawamqp import decode_message

    data = Message(properties={"message-type": "PUBLICATIONS"}).encode() + body
    message = decode_message(data)

    assert getattr(message, "malformed", None)
    h = Harness()
    assert outcome(h.send(message)) == (Delivery.REJECTED, "amqp:decode-error")  # type: ignore[arg-type]


@pytest.mark.parametrize("properties", [[1, 2], "ACK", 5])
def test_application_properties_that_are_not_a_map_are_a_decode_error_on_every_link(
    properties: Any,
) -> None:
    from seqrepair.amqp.wire.rawamqp import ReceivedMessage

    def message() -> ReceivedMessage:
        m = ReceivedMessage()
        m.properties = properties
        return m

    h = Harness()
    assert outcome(control(h, message())) == (Delivery.REJECTED, "amqp:decode-error")  # type: ignore[arg-type]
    assert outcome(h.send(message())) == (Delivery.REJECTED, "amqp:decode-error")  # type: ignore[arg-type]


@pytest.mark.parametrize("cut", [b"\xd0\x00\x00\x00\x00", b"\xd0\x00\x00\x00\x02\x00\x00"])
def test_a_publishing_links_list32_body_cut_short_is_a_decode_error_not_an_internal_one(
    cut: bytes,
) -> None:
    """A publishing link's list bodies are left unread (its ``lazy_body``) for the one-pass
    reader: a list32 whose size leaves no room for its count made that reader raise out of
    the ingest (``amqp:internal-error``, a traceback logged) where the usual read refuses it
    as malformed. The link's honest numbering is untouched either way."""
    from seqrepair.amqp.wire.rawamqp import decode_message, encode_value

    h = Harness()
    assert outcome(h.send(narrow(1, 5))) == ACCEPTED
    before = state(h.component.decoder)
    data = (b"\x00\x53\x74" + encode_value({"message-type": "PUBLICATIONS"})
            + b"\x00\x53\x77" + cut)
    lazy = decode_message(data, True)  # as RawIncomingHandler reads for a publishing link
    assert getattr(lazy, "body_at", None) is not None  # left for the one-pass reader

    assert outcome(h.send(lazy)) == (Delivery.REJECTED, "amqp:decode-error")  # type: ignore[arg-type]
    assert state(h.component.decoder) == before
    assert outcome(h.send(narrow(6, 8))) == ACCEPTED
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 9)]


@pytest.mark.parametrize("after", [b"\x40", b"\xa1\x01x", b"\xc1\x01\x00"])
def test_a_second_body_section_after_a_list_is_read_alike_lazily_and_not(after: bytes) -> None:
    """A transfer of two amqp-value sections, a batch of publications then something else:
    the usual read takes the last one (not a list: refused ``amqp:decode-error``); a
    publishing link's lazy read kept pointing at the first and journaled and fanned out
    the batch."""
    from seqrepair.amqp.wire.framing import encode_frames
    from seqrepair.amqp.wire.rawamqp import decode_message

    pubs = [Publication("/plain/x", SOURCE, n, fields={"n": n}) for n in (1, 2)]
    data = encode_frames(pubs, BITS).encode() + b"\x00\x53\x77" + after
    for lazy in (False, True):
        h = Harness()
        refused = h.send(decode_message(data, lazy))  # type: ignore[arg-type]

        assert outcome(refused) == (Delivery.REJECTED, "amqp:decode-error"), lazy
        assert h.received() == []
        assert state(h.component.decoder) == state(Harness().component.decoder)
