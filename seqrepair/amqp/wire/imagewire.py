"""Image requests on the wire (WIRE.md "Image requests"): ``SNAPSHOT``, ``IMAGE``,
``IMAGE-COMPLETE`` <-> :mod:`seqrepair.core.snapshot`.

:func:`encode_image_message` and :func:`decode_image_message` are called by
:mod:`seqrepair.amqp.wire.codec` for these message types; bad input raises
:class:`~seqrepair.amqp.wire.errors.MalformedMessageError` (``amqp:decode-error``) or
:class:`~seqrepair.amqp.wire.errors.OutOfSpaceError` (``amqp:invalid-field``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proton import Message, ulong

from seqrepair.amqp.wire.errors import MalformedMessageError, OutOfSpaceError
from seqrepair.amqp.wire.technical import ABSOLUTE_SOURCE_BITS, MESSAGE_TYPE, MessageType
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import PublishType
from seqrepair.core.snapshot import (
    ImageComplete,
    ImageFrame,
    ImageRequest,
    image_publication,
)

REQUEST_ID = "request_id"
_MAX = (1 << 64) - 1

ImageMessage = ImageRequest | ImageFrame | ImageComplete


def _request_id(props: dict[str, Any], request_id: int | None) -> dict[str, Any]:
    if request_id is not None:
        props[REQUEST_ID] = ulong(request_id)
    return props


def encode_image_message(obj: ImageMessage) -> Message:
    """The ``SNAPSHOT`` request, an ``IMAGE`` or the ``IMAGE-COMPLETE`` that ends an answer."""
    if isinstance(obj, ImageRequest):
        body: dict[str, Any] = {}
        for key in ("topics", "patterns", "sources"):
            values = getattr(obj, key)
            if values:
                body[key] = list(values)
        return Message(body=body, properties=_request_id(
            {MESSAGE_TYPE: MessageType.SNAPSHOT.value}, obj.request_id))
    if isinstance(obj, ImageFrame):
        pub = obj.publication
        props = _request_id({
            MESSAGE_TYPE: MessageType.IMAGE.value,
            "source": pub.source,
            "source_seq": ulong(pub.source_seq),
            "source_bits": ABSOLUTE_SOURCE_BITS,
            "topic": pub.topic,
            "ptype": pub.ptype.value,
        }, obj.request_id)
        if pub.timestamp is not None:
            props["timestamp"] = float(pub.timestamp)
        return Message(body=dict(pub.fields), properties=props)
    body = {"as_of": {s: ulong(n) for s, n in obj.as_of.items()}}
    if obj.partial:
        body["partial"] = list(obj.partial)
    return Message(body=body, properties=_request_id(
        {MESSAGE_TYPE: MessageType.IMAGE_COMPLETE.value}, obj.request_id))


def _int(value: object, name: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedMessageError(f"{name} must be an integer", expected="ulong", got=value)
    if not low <= value <= _MAX:
        raise OutOfSpaceError(f"{name} {value} is outside {low}..{_MAX}",
                              expected=(low, _MAX), got=value)
    return int(value)


def _map(value: object, name: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise MalformedMessageError(f"{name} must be an AMQP map", expected="map", got=value)
    return value


def _list(value: object, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedMessageError(f"{name} must be a list of strings", expected="list",
                                    got=value)
    return value


def decode_image_message(
    mtype: MessageType, props: Mapping[Any, Any], body: Any
) -> ImageMessage:
    """A ``SNAPSHOT``, ``IMAGE`` or ``IMAGE-COMPLETE`` message's content, validated."""
    try:
        raw_id = props.get(REQUEST_ID)
        request_id = None if raw_id is None else _int(raw_id, REQUEST_ID)
        if mtype is MessageType.SNAPSHOT:
            asked = _map(body, "SNAPSHOT body")
            return ImageRequest(
                topics=tuple(_list(asked.get("topics"), "topics")),
                patterns=tuple(_list(asked.get("patterns"), "patterns")),
                sources=tuple(_list(asked.get("sources"), "sources")),
                request_id=request_id,
            )
        if mtype is MessageType.IMAGE:
            ptype = PublishType.parse(str(props.get("ptype")))
            stamp = props.get("timestamp")
            if stamp is not None and (isinstance(stamp, bool)
                                      or not isinstance(stamp, int | float)):
                raise MalformedMessageError("timestamp must be a number", got=stamp)
            fields = {} if body is None else _map(body, "IMAGE body")
            return ImageFrame(image_publication(
                topic=props.get("topic"),  # type: ignore[arg-type]  # validated by Publication
                source=props.get("source"),  # type: ignore[arg-type]
                as_of=_int(props.get("source_seq"), "source_seq", low=1),
                ptype=ptype, fields={str(k): v for k, v in fields.items()},
                timestamp=None if stamp is None else float(stamp),
            ), request_id)
        done = _map(body, "IMAGE-COMPLETE body")
        as_of = {str(s): _int(n, f"as_of[{s}]") for s, n in _map(done.get("as_of", {}),
                                                                  "as_of").items()}
        partial = _list(done.get("partial"), "partial")
        if not all(isinstance(t, str) for t in partial):
            raise MalformedMessageError("partial must be a list of strings", got=partial)
        return ImageComplete(as_of, request_id, tuple(partial))
    except MalformedMessageError:
        raise
    except SeqRepairError as exc:
        raise MalformedMessageError(exc.message, expected=exc.expected, got=exc.got) from None
