"""What cannot be delivered is refused when it is stamped, before it takes a number (issue 22
§3): integers outside an AMQP long, topics past their limit, publications larger than one
message carries."""

from __future__ import annotations

import pytest

from seqrepair.core.errors import (
    InvalidMessageError,
    OversizedPublicationError,
    UndeliverableError,
)
from seqrepair.core.limits import (
    MAX_FIELD_INT,
    MAX_PUBLICATION_SIZE,
    MAX_TOPIC_BYTES,
    MIN_FIELD_INT,
    check_deliverable,
)
from seqrepair.core.sequencers import SourceSequencer

LONG_TOPIC = "/" + "t" * MAX_TOPIC_BYTES


@pytest.mark.parametrize(
    ("topic", "fields", "error", "says"),
    [
        ("/a", {"x": 2**64}, UndeliverableError, "field 'x' is the integer"),
        ("/a", {"x": MAX_FIELD_INT + 1}, UndeliverableError, "outside an AMQP long"),
        ("/a", {"x": MIN_FIELD_INT - 1}, UndeliverableError, "outside an AMQP long"),
        ("/a", {"x": [1, {"y": 2**70}]}, UndeliverableError, "field 'x'[1]['y']"),
        (LONG_TOPIC, {}, UndeliverableError, f"at most {MAX_TOPIC_BYTES}"),
        ("/a", {"x": "v" * MAX_PUBLICATION_SIZE}, OversizedPublicationError, "at most"),
        ("/a", {f"k{i}": "v" * 1000 for i in range(600)}, OversizedPublicationError, "at most"),
    ],
)
def test_what_cannot_be_delivered_is_refused_when_stamped_and_takes_no_number(
    topic: str, fields: dict, error: type[Exception], says: str
) -> None:
    seq = SourceSequencer("feed.a", bits=32)
    with pytest.raises(error) as raised:
        seq.stamp(topic, fields)
    assert says in raised.value.message
    assert isinstance(raised.value, InvalidMessageError)  # bad input: exit 2, decode-error
    assert raised.value.got is not None
    assert raised.value.expected is not None
    assert seq.high_water == 0
    assert seq.stamp("/a", {"n": 1}).source_seq == 1


def test_the_limits_themselves_are_deliverable() -> None:
    seq = SourceSequencer("feed.a", bits=32)
    seq.stamp("/" + "t" * (MAX_TOPIC_BYTES - 1), {"hi": MAX_FIELD_INT, "lo": MIN_FIELD_INT})
    size = check_deliverable("/a", {"x": "v" * (MAX_PUBLICATION_SIZE - 100)})
    assert MAX_PUBLICATION_SIZE - 100 < size <= MAX_PUBLICATION_SIZE
    assert seq.high_water == 1


def test_a_topic_limit_counts_utf8_bytes() -> None:
    with pytest.raises(UndeliverableError):
        check_deliverable("/" + "é" * (MAX_TOPIC_BYTES // 2), {})
    check_deliverable("/" + "é" * (MAX_TOPIC_BYTES // 2 - 1), {})


def test_nesting_past_the_limit_is_refused_not_a_recursion_error() -> None:
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(UndeliverableError, match="deep"):
        check_deliverable("/a", {"x": deep})
