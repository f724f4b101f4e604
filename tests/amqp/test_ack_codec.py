"""The ACK message (WIRE.md "Window discipline"): encoded, decoded and validated like the
other requests; a bad ACK is refused on its delivery only."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proton import Message, ulong

from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.errors import MalformedMessageError, OutOfSpaceError
from seqrepair.amqp.wire.technical import Ack
from seqrepair.amqp.wire.vocabulary import is_ack

pytestmark = pytest.mark.amqp

names = st.text(min_size=1, max_size=12)


@given(
    link=names, epoch=names, bits=st.integers(2, 64), data=st.data(),
    taken=st.dictionaries(names, st.integers(0, 2**64 - 1), max_size=4),
)
def test_an_ack_roundtrips(link: str, epoch: str, bits: int, data: st.DataObject,
                           taken: dict[str, int]) -> None:
    through = data.draw(st.none() | st.integers(0, (1 << bits) - 1))
    ack = Ack(link, epoch, through, taken)
    message = encode(ack)
    assert is_ack(message)
    assert message.properties is not None
    assert message.properties["message-type"] == "ACK"
    assert (message.body is None) == (not taken)
    wire = Message()
    wire.decode(message.encode())
    assert Decoder(link_bits=bits).decode(wire) == [ack]


def _ack(props: dict[str, object], body: Any = None) -> Message:
    return Message(properties={"message-type": "ACK", **props}, body=body)


@pytest.mark.parametrize(
    ("props", "body", "error"),
    [
        ({"link_epoch": "e1", "link_through": ulong(3)}, None, MalformedMessageError),
        ({"link": "a", "link_through": ulong(3)}, None, MalformedMessageError),
        ({"link": "", "link_epoch": "e1"}, None, MalformedMessageError),
        ({"link": "a", "link_epoch": "e1", "link_through": ulong(256)}, None, OutOfSpaceError),
        ({"link": "a", "link_epoch": "e1", "link_through": "3"}, None, MalformedMessageError),
        ({"link": "a", "link_epoch": "e1"}, ["s", 3], MalformedMessageError),
        ({"link": "a", "link_epoch": "e1"}, {"s": -1}, OutOfSpaceError),
        ({"link": "a", "link_epoch": "e1"}, {"": ulong(1)}, MalformedMessageError),
    ],
)
def test_a_bad_ack_is_refused_naming_what_is_wrong(
    props: dict[str, object], body: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        Decoder(link_bits=8).decode(_ack(props, body))


def test_an_ack_is_told_from_requests_by_its_message_type() -> None:
    assert not is_ack(Message(properties={"message-type": "GAP-REQUEST"}))
    assert not is_ack(Message())
