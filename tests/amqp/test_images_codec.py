"""SNAPSHOT, IMAGE and IMAGE-COMPLETE on the wire (wire/imagewire.py): what is written reads
back, and any body a hostile peer sends is either a request or a typed error."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message, ulong

from seqrepair.amqp.wire.codec import Decoder, encode
from seqrepair.amqp.wire.errors import MalformedMessageError
from seqrepair.amqp.wire.technical import MESSAGE_TYPE
from seqrepair.core.snapshot import ImageComplete, ImageFrame, ImageRequest, image_publication


def read_back(message: Message) -> list[Any]:
    wire = Message()
    wire.decode(message.encode())
    return Decoder().decode(wire)


def test_what_is_written_reads_back() -> None:
    for obj in (
        ImageRequest(topics=["/a"], patterns=["/b/#"], sources=["s"], request_id=3),
        ImageFrame(image_publication("/a", "s", 5, "image", {"x": None, "y": [1, "z"]}, 1.5), 3),
        ImageFrame(image_publication("/a", "s", 5, "drop", {}), None),
        ImageComplete({"s": 5}, 3, ("/a",)),
        ImageComplete({}, None),
    ):
        assert read_back(encode(obj)) == [obj]


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
    | st.builds(ulong, st.integers(0, 2**64 - 1)),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(body=values | st.dictionaries(st.sampled_from(["topics", "patterns", "sources", "x"]),
                                     values, max_size=4),
       kind=st.sampled_from(["SNAPSHOT", "IMAGE", "IMAGE-COMPLETE"]),
       props=st.dictionaries(st.sampled_from(["request_id", "source", "source_seq", "topic",
                                              "ptype", "timestamp"]), values, max_size=6))
def test_any_body_is_a_message_or_a_typed_error(body: Any, kind: str, props: dict[str, Any]
                                                ) -> None:
    message = Message(body=body, properties={MESSAGE_TYPE: kind, **props})
    try:
        decoded = Decoder().decode(message)
    except MalformedMessageError:
        return
    assert len(decoded) == 1
    assert isinstance(decoded[0], ImageRequest | ImageFrame | ImageComplete)
