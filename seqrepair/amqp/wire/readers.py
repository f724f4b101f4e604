"""Small validated readers of received values, and the request-id properties, that the codec
(:mod:`seqrepair.amqp.wire.codec`) builds on: each raises
:class:`~seqrepair.amqp.wire.errors.MalformedMessageError` (or
:class:`~seqrepair.amqp.wire.errors.OutOfSpaceError`) naming what it read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proton import Message, ulong

from seqrepair.amqp.wire.errors import MalformedMessageError, OutOfSpaceError
from seqrepair.amqp.wire.framing import plain_value
from seqrepair.core.messages import SourceGapRequest


def _optional_count(value: Any, name: str) -> int | None:
    return None if value is None else _int(value, name, low=1)


def _int(value: object, name: str, *, low: int = 0, high: int = (1 << 64) - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedMessageError(f"{name} must be an integer", expected="int", got=value)
    if not low <= value <= high:
        raise OutOfSpaceError(
            f"{name} {value} is outside {low}..{high}", expected=(low, high), got=value
        )
    return int(value)


def _str(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise MalformedMessageError(f"{name} must be a non-empty string", expected="str", got=value)
    return str(value)


def _opt_str(value: object, name: str) -> str | None:
    return None if value is None else _str(value, name)


def _number(value: object, name: str) -> float:
    """A finite number (long or double) named ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise MalformedMessageError(f"{name} must be a number", expected="number", got=value)
    return value


def _timestamp(value: object) -> float | None:
    """A timestamp in seconds; SWIM writes it as a string of digits, we accept both."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise MalformedMessageError(
                "timestamp must be a number of seconds", expected="float", got=value
            ) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedMessageError(
            "timestamp must be a number of seconds", expected="float", got=value
        )
    return float(value)


def _properties(message: Message) -> Mapping[Any, Any]:
    """The application properties of a received message (checked: not half-decoded, a map)."""
    problem = getattr(message, "malformed", None)
    if problem is not None:
        raise MalformedMessageError(f"not a well-formed AMQP message: {problem}")
    return _map({} if message.properties is None else message.properties,
                "application-properties")


def _map(value: object, name: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise MalformedMessageError(f"{name} must be an AMQP map", expected="map", got=value)
    return value


_plain = plain_value


def _source_numbers(value: object, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for source, seq in _map(value, name).items():
        out[_str(source, f"{name} source")] = _int(seq, f"{name}[{source}]")
    return out


def _ulongs(numbers: Mapping[str, int]) -> dict[str, ulong]:
    return {source: ulong(seq) for source, seq in numbers.items()}


REQUEST_ID = "request_id"
"""Application property naming a source request; its answers echo it."""


def _request_id(props: dict[str, Any], request: SourceGapRequest | None) -> dict[str, Any]:
    if request is not None and request.request_id is not None:
        props[REQUEST_ID] = ulong(request.request_id)
    return props


LINK_THROUGH = "link_through"
"""Application property of a source request: the highest link number the subscriber had seen;
of an ACK: the link number through which the subscriber has consumed every one."""
LINK_EPOCH = "link_epoch"
"""Application property of an ACK: the link context its numbers belong to."""
ACK_LINK = "link"
"""Application property of an ACK (and of every request): the data link's name."""


def _read_request_id(props: Mapping[str, Any]) -> int | None:
    value = props.get(REQUEST_ID)
    return None if value is None else _int(value, REQUEST_ID)
