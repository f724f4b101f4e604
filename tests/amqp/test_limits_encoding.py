"""The size the core's limits compute is the size the AMQP encoder writes (so a publication
within MAX_PUBLICATION_SIZE does fit), and the encoders take every integer the limits allow."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from seqrepair.amqp.wire.framing import encode_frames
from seqrepair.amqp.wire.rawamqp import encode_map, encode_value, read_message
from seqrepair.core.limits import MAX_FIELD_INT, MIN_FIELD_INT, encoded_size
from seqrepair.core.messages import Publication

ints = st.integers(min_value=MIN_FIELD_INT, max_value=MAX_FIELD_INT)
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)  # UTF-8 encodable
leaves = st.none() | st.booleans() | ints | st.floats(allow_nan=False) | text | st.binary(
    max_size=300)
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=40)
                      | st.dictionaries(text, inner, max_size=40), max_leaves=100)


@given(values)
def test_encoded_size_is_what_the_encoder_writes(value: object) -> None:
    assert encoded_size(value) == len(encode_value(value))


@given(st.dictionaries(text.filter(bool), values, max_size=10))
def test_fields_within_the_limits_encode_and_read_back(fields: dict) -> None:
    assert encoded_size(fields) == len(encode_map(fields))
    pub = Publication("/a", "feed.a", 1, fields=fields)
    message = encode_frames([pub, Publication("/a", "feed.a", 2, fields=fields)], 32)
    assert read_message(message.encode()) is not None


def test_a_uuid_is_counted_as_its_encoding() -> None:
    assert encoded_size(uuid.uuid4()) == len(encode_value(uuid.uuid4()))
