"""Messages of the wire format (WIRE.md) <-> proton :class:`~proton.Message`.

Every message names what it is in the application property ``message-type``. Sequence numbers
travel as AMQP ``ulong``; a source number travels as the *wire* value of its source's sequence
space together with ``source_bits``, and the receiver unwraps it to the absolute number
(:class:`~seqrepair.amqp.wire.framing.SourceUnwrapper`), so ``Publication.source_seq`` is absolute
in every process.

Link frames are written by :mod:`seqrepair.amqp.wire.framing`; requests, responses and technical
messages are rare and use proton's codec (:func:`encode`). :class:`Decoder` reads them all back,
validates everything and raises :class:`~seqrepair.amqp.wire.errors.MalformedMessageError` (or a
subclass) on bad input; it never returns half a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from proton import Message, ulong

from seqrepair.amqp.wire.errors import (
    MalformedMessageError,
    OutOfSpaceError,
    OversizedMessageError,
    UnknownMessageTypeError,
)
from seqrepair.amqp.wire.framing import (
    HEARTBEAT_ENTRY,
    PTYPE_BY_NAME,
    SourceUnwrapper,
    encode_frame,
)
from seqrepair.amqp.wire.imagewire import decode_image_message, encode_image_message
from seqrepair.amqp.wire.rawamqp import PackedMessage, encode_value
from seqrepair.amqp.wire.readers import (  # noqa: F401  (codec.X stays importable)
    ACK_LINK,
    LINK_EPOCH,
    LINK_THROUGH,
    REQUEST_ID,
    _int,
    _map,
    _number,
    _opt_str,
    _optional_count,
    _plain,
    _properties,
    _read_request_id,
    _request_id,
    _source_numbers,
    _str,
    _timestamp,
    _ulongs,
)
from seqrepair.amqp.wire.technical import (
    DEFAULT_LINK_BITS,
    DEFAULT_SOURCE_BITS,
    MESSAGE_TYPE,
    Ack,
    Capabilities,
    CapabilitiesRequest,
    Decoded,
    LinkFrame,
    MessageType,
    SubscriptionState,
)
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import (
    GAP_ERROR_REASONS,
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
    decoded_publication,
)
from seqrepair.core.snapshot import ImageComplete, ImageFrame, ImageRequest

MAX_RANGES = 256
"""The most link ranges one GAP-REQUEST may carry."""

_MAX_ULONG = (1 << 64) - 1

NOT_REQUESTS = frozenset({
    MessageType.PUBLICATION, MessageType.PUBLICATIONS, MessageType.HEARTBEAT,
    MessageType.SUBSCRIPTION, MessageType.GAP_ERROR, MessageType.REPLAY_COMPLETE,
    MessageType.IMAGE, MessageType.IMAGE_COMPLETE, MessageType.REPLAY_STARTED,
})
"""Message types refused on the requests address: link frames and answers."""


# --------------------------------------------------------------------------------------------
# requests, responses and technical messages


def encode_gap_requests(requests: Sequence[GapRequest]) -> PackedMessage:
    """Several link ranges in one GAP-REQUEST (what one stub call asked for), written by
    :mod:`~seqrepair.amqp.wire.rawamqp` (a subscriber may send one every few frames under loss)."""
    if not requests or len(requests) > MAX_RANGES:
        raise MalformedMessageError(f"1..{MAX_RANGES} ranges per request", got=len(requests))
    props = {
        MESSAGE_TYPE: MessageType.GAP_REQUEST.value,
        "link_from": ulong(requests[0].link_from),
        "link_to": ulong(requests[0].link_to),
    }
    if len(requests) == 1:
        return PackedMessage(props, encode_value(None))
    return PackedMessage(
        props, encode_value([[ulong(r.link_from), ulong(r.link_to)] for r in requests])
    )


def encode(obj: Decoded) -> Message:
    """A request, response or technical message (not a link frame batch)."""
    if isinstance(obj, Publication | Heartbeat):
        return encode_frame(obj)
    if isinstance(obj, ImageRequest | ImageFrame | ImageComplete):  # imagewire.py
        return encode_image_message(obj)
    if isinstance(obj, GapRequest):
        return Message(
            properties={
                MESSAGE_TYPE: MessageType.GAP_REQUEST.value,
                "link_from": ulong(obj.link_from),
                "link_to": ulong(obj.link_to),
            }
        )
    if isinstance(obj, SourceGapRequest):
        asked = _request_id({MESSAGE_TYPE: MessageType.SOURCE_GAP_REQUEST.value}, obj)
        if obj.link_through is not None:
            asked[LINK_THROUGH] = ulong(obj.link_through)
        return Message(body=_ulongs(obj.after), properties=asked)
    if isinstance(obj, GapError):
        props: dict[str, Any] = {
            MESSAGE_TYPE: MessageType.GAP_ERROR.value,
            "reason": obj.reason,
            "detail": obj.detail,
        }
        body: Any = None
        if isinstance(obj.request, GapRequest):
            props["link_from"] = ulong(obj.request.link_from)
            props["link_to"] = ulong(obj.request.link_to)
        elif isinstance(obj.request, SourceGapRequest):
            _request_id(props, obj.request)
            body = _ulongs(obj.request.after)
            if obj.trimmed_through is not None:
                body = [body, _ulongs(obj.trimmed_through)]
                if obj.items:  # [after, trimmed_through, items]
                    body.append({s: list(topics) for s, topics in obj.items.items()})
        return Message(body=body, properties=props)
    if isinstance(obj, ReplayComplete):
        answered = obj.request
        complete: dict[str, Any] = {
            "through": _ulongs(obj.through),
            "after": None if answered is None else _ulongs(answered.after),
        }
        if obj.more:
            complete["more"] = True
        return Message(
            body=complete,
            properties=_request_id({MESSAGE_TYPE: MessageType.REPLAY_COMPLETE.value}, answered),
        )
    if isinstance(obj, ReplayStarted):
        started: dict[str, Any] = {
            "after": _ulongs(obj.request.after), "through": _ulongs(obj.through),
        }
        if obj.continued:
            started["continued"] = True
        if obj.more:
            started["more"] = True
        return Message(
            body=started,
            properties=_request_id({MESSAGE_TYPE: MessageType.REPLAY_STARTED.value}, obj.request),
        )
    if isinstance(obj, Ack):
        acked: dict[str, Any] = {
            MESSAGE_TYPE: MessageType.ACK.value, ACK_LINK: obj.link, LINK_EPOCH: obj.link_epoch,
        }
        if obj.link_through is not None:
            acked[LINK_THROUGH] = ulong(obj.link_through)
        return Message(body=_ulongs(obj.taken) if obj.taken else None, properties=acked)
    if isinstance(obj, CapabilitiesRequest):
        return Message(properties={MESSAGE_TYPE: MessageType.CAPABILITIES.value})
    if isinstance(obj, Capabilities):
        return Message(
            body={
                "link_bits": obj.link_bits,
                "source_bits": dict(obj.source_bits),
                "default_source_bits": obj.default_source_bits,
                "heartbeat_interval": float(obj.heartbeat_interval),
                "max_gap_range": obj.max_gap_range,
                "retention": None if obj.retention is None else float(obj.retention),
                "publish_types": list(obj.publish_types),
                "max_batch": obj.max_batch,
                "response_annotations": obj.response_annotations,
                "retention_count": obj.retention_count,
                "max_publish_batch": obj.max_publish_batch,
                "limits": {str(name): float(value) for name, value in obj.limits.items()},
            },
            properties={MESSAGE_TYPE: MessageType.CAPABILITIES.value},
        )
    if isinstance(obj, SubscriptionState):
        return Message(
            body={
                "topic": obj.topic,
                "subscription_id": obj.subscription_id,
                "queue": obj.queue,
                "subscription_status": obj.status,
                "qos": obj.qos,
                "durable": obj.durable,
                "reason": obj.reason,
                "link_epoch": obj.epoch,
            },
            properties={MESSAGE_TYPE: MessageType.SUBSCRIPTION.value},
        )
    raise UnknownMessageTypeError(f"cannot encode {type(obj).__name__}", got=type(obj).__name__)


# --------------------------------------------------------------------------------------------
# decoding


@attrs.define
class Decoder:
    """Reads messages of the wire format back into frames, requests and technical messages.

    ``link_bits`` is the link sequence space of the receiving link (link numbers outside it are
    rejected). ``unwrapper`` keeps the per-source state to turn wire source numbers into absolute
    ones; share one per receiver. ``max_publications``: most entries a ``PUBLICATIONS`` message
    may carry (None: any number); a larger one raises OversizedMessageError before any entry
    is decoded.
    """

    link_bits: int = DEFAULT_LINK_BITS
    unwrapper: SourceUnwrapper = attrs.field(factory=SourceUnwrapper)
    max_publications: int | None = None
    _link_max: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._link_max = (1 << self.link_bits) - 1

    def decode(
        self,
        message: Message,
        *,
        default_source: str | None = None,
        default_topic: str | None = None,
        assign: Callable[[str], int] | None = None,
    ) -> list[Decoded]:
        """Everything ``message`` carries, in order.

        ``default_source`` / ``default_topic`` fill a publication that does not name them (a
        plain AMQP publisher sending to a topic address); ``assign(source)`` numbers one that
        carries no ``source_seq``. Without them such a publication is malformed.

        All or nothing: a message that raises leaves :attr:`unwrapper` as it found it. Inside
        a trial its owner opened (:meth:`SourceUnwrapper.begin`), the owner decides instead:
        the component's ingest keeps what it unwrapped only once the journal took the message.
        """
        unwrapper = self.unwrapper
        if unwrapper.in_trial:  # its owner commits or rolls back (Ingest.publish)
            return self._decode(message, default_source, default_topic, assign)
        # all or nothing: a message refused part-way leaves no source number behind
        unwrapper.begin()
        try:
            out = self._decode(message, default_source, default_topic, assign)
        except BaseException:
            unwrapper.rollback({})
            raise
        unwrapper.commit()
        return out

    def decode_request(self, message: Message) -> list[Decoded]:
        """What a message sent to the requests address (``$seqrepair``) asks.

        A link frame (``PUBLICATION``, ``PUBLICATIONS``, ``HEARTBEAT``) or an answer sent there
        raises :class:`UnknownMessageTypeError` (``amqp:not-implemented``) before anything of
        it is read: publications are taken on publishing links only, and a request never
        touches the per-source state of :attr:`unwrapper`.
        """
        mtype = self._message_type(_properties(message), None)
        if mtype in NOT_REQUESTS:
            raise UnknownMessageTypeError(
                f"{mtype.value} is not a request: publications go to a topic address",
                expected="a request (GAP-REQUEST, SOURCE-GAP-REQUEST, CAPABILITIES...)",
                got=mtype.value,
            )
        return self.decode(message)

    @staticmethod
    def _message_type(props: Mapping[Any, Any], default_topic: str | None) -> MessageType:
        kind = props.get(MESSAGE_TYPE, MessageType.PUBLICATION.value if
                         default_topic is not None else None)
        if kind is None:
            raise MalformedMessageError(
                "message has no message-type application property", expected=list(MessageType)
            )
        try:
            return MessageType(str(kind))
        except ValueError:
            raise UnknownMessageTypeError(
                f"unknown message-type {kind!r}", expected=[t.value for t in MessageType], got=kind
            ) from None

    def _decode(
        self,
        message: Message,
        default_source: str | None,
        default_topic: str | None,
        assign: Callable[[str], int] | None,
    ) -> list[Decoded]:
        props = _properties(message)
        mtype = self._message_type(props, default_topic)
        body = message.body
        plain = getattr(message, "plain", False)
        if mtype is MessageType.PUBLICATIONS:
            if not isinstance(body, list) or not body:
                raise MalformedMessageError(
                    "PUBLICATIONS needs a non-empty list body", expected="list", got=type(body)
                )
            count = props.get("count")
            if count is not None and (
                isinstance(count, bool) or not isinstance(count, int) or count != len(body)
            ):
                raise MalformedMessageError(
                    f"PUBLICATIONS count {count!r} disagrees with its {len(body)} entries",
                    expected=len(body), got=count,
                )
            most = self.max_publications
            if most is not None and len(body) > most:
                raise OversizedMessageError(
                    f"{len(body)} publications in one message; at most {most} are taken",
                    expected=most,
                    got=len(body),
                )
            if isinstance(body[0], list):
                return self._positional(props, body, plain)
            out: list[Decoded] = []
            for entry in body:
                entry = _map(entry, "batch entry")
                out.append(
                    self._frame(
                        entry,
                        entry.get("fields", {}),
                        default_source,
                        default_topic,
                        assign,
                    )
                )
            return out
        if mtype in (MessageType.PUBLICATION, MessageType.HEARTBEAT):
            fields = {} if body is None else body
            return [self._frame(props, fields, default_source, default_topic, assign, mtype,
                                plain)]
        other = self._other(mtype, props, body)
        return list(other) if isinstance(other, list) else [other]

    def _positional(
        self, props: Mapping[Any, Any], body: list[Any], plain: bool
    ) -> list[Decoded]:
        """A batch of positional entries (WIRE.md ``PUBLICATIONS``)."""
        first = props.get("link_seq")
        link_seq = None if first is None else _int(first, "link_seq", high=self._link_max)
        batch_retransmit = props.get("retransmit", False)
        if not isinstance(batch_retransmit, bool):
            raise MalformedMessageError("retransmit must be a boolean", got=batch_retransmit)
        if link_seq is not None and link_seq + len(body) - 1 > self._link_max:
            raise OutOfSpaceError(
                f"link numbers {link_seq}+{len(body)} leave the link space",
                expected=(0, self._link_max), got=link_seq + len(body) - 1,
            )
        unwrap = self.unwrapper.unwrap
        out: list[Decoded] = []
        try:
            for i, entry in enumerate(body):
                if not isinstance(entry, list) or not entry:
                    raise MalformedMessageError("a batch entry is a non-empty list", got=entry)
                seq = None if link_seq is None else link_seq + i
                kind = entry[0]
                if kind == HEARTBEAT_ENTRY:
                    if len(entry) > 4:
                        raise MalformedMessageError(
                            "a heartbeat entry has 2 to 4 elements", expected=4, got=len(entry)
                        )
                    if len(entry) > 2:
                        seq = self._link_seq(entry[2], required=True)
                    if seq is None:
                        raise MalformedMessageError("a heartbeat needs a link number", got=None)
                    stamp = _timestamp(entry[1]) if len(entry) > 1 else None
                    again = entry[3] if len(entry) > 3 else batch_retransmit
                    if not isinstance(again, bool):
                        raise MalformedMessageError("retransmit must be a boolean", got=again)
                    out.append(Heartbeat(link_seq=seq, timestamp=stamp, retransmit=again))
                    continue
                if len(entry) not in (8, 10):
                    raise MalformedMessageError(
                        "a publication entry has 8 (or 10) elements", expected=8, got=len(entry)
                    )
                (ptype, stamp, source, wire, bits, topic, fields, permtoken) = entry[:8]
                if (
                    len(entry) == 8  # what a publisher and the component write
                    and type(source) is str and source
                    and type(topic) is str and topic
                    and type(wire) is int and 0 <= wire <= _MAX_ULONG
                    and type(bits) is int and 2 <= bits <= 64
                    and type(fields) is dict and plain
                    and (stamp is None or type(stamp) is float)
                    and (permtoken is None or (type(permtoken) is str and permtoken))
                    and type(ptype) is str and ptype in PTYPE_BY_NAME
                ):
                    # every value already of the type the readers below would check for: the
                    # same publication, without the calls (anything else takes the long way)
                    out.append(decoded_publication(
                        topic, source, unwrap(source, wire, bits), PTYPE_BY_NAME[ptype],
                        fields, seq, permtoken, stamp, batch_retransmit,
                    ))
                    continue
                retransmit = batch_retransmit
                if len(entry) == 10:
                    seq = self._link_seq(entry[8], required=False)
                    retransmit = entry[9]
                    if not isinstance(retransmit, bool):
                        raise MalformedMessageError("retransmit must be a boolean", got=retransmit)
                source = _str(source, "source")
                absolute = unwrap(source, _int(wire, "source_seq"),
                                  _int(bits, "source_bits", low=2, high=64))
                fields = _map(fields, "fields")
                out.append(Publication(
                    _str(topic, "topic"), source, absolute,
                    (type(ptype) is str and PTYPE_BY_NAME.get(ptype)) or PublishType.parse(ptype),
                    fields if plain else _plain(fields), seq,
                    _opt_str(permtoken, "permtoken"), _timestamp(stamp), retransmit,
                ))
        except MalformedMessageError:
            raise
        except SeqRepairError as exc:
            raise MalformedMessageError(exc.message, expected=exc.expected, got=exc.got) from None
        return out

    def _link_seq(self, value: object, *, required: bool) -> int | None:
        if value is None:
            if required:
                raise MalformedMessageError("link_seq is required", expected="ulong", got=None)
            return None
        return _int(value, "link_seq", high=self._link_max)

    def _frame(
        self,
        props: Mapping[Any, Any],
        fields: object,
        default_source: str | None,
        default_topic: str | None,
        assign: Callable[[str], int] | None,
        mtype: MessageType | None = None,
        plain: bool = False,
    ) -> LinkFrame:
        if mtype is None:
            kind = props.get(MESSAGE_TYPE, MessageType.PUBLICATION.value)
            if kind not in (MessageType.PUBLICATION.value, MessageType.HEARTBEAT.value):
                raise UnknownMessageTypeError(
                    f"a batch entry must be PUBLICATION or HEARTBEAT, got {kind!r}", got=kind
                )
            mtype = MessageType(kind)
        try:
            retransmit = props.get("retransmit", False)
            if not isinstance(retransmit, bool):
                raise MalformedMessageError("retransmit must be a boolean", got=retransmit)
            if mtype is MessageType.HEARTBEAT:
                link_seq = self._link_seq(props.get("link_seq"), required=True)
                assert link_seq is not None
                return Heartbeat(link_seq=link_seq, timestamp=_timestamp(props.get("timestamp")),
                                 retransmit=retransmit)
            source = props.get("source", default_source)
            source = _str(source, "source")
            topic = _str(props.get("topic", default_topic), "topic")
            ptype = PublishType.parse(props.get("ptype", PublishType.UPDATE.value))
            plain_fields = _map(fields, "fields") if plain else _plain(_map(fields, "fields"))
            link_seq = self._link_seq(props.get("link_seq"), required=False)
            permtoken = _opt_str(props.get("permtoken"), "permtoken")
            timestamp = _timestamp(props.get("timestamp"))
            wire = props.get("source_seq")
            if wire is None:
                if assign is None:
                    raise MalformedMessageError("source_seq is required", got=None)
                # everything else is valid: only now may a number be consumed
                return Publication(topic, source, assign(source), ptype, plain_fields,
                                   link_seq, permtoken, timestamp, retransmit)
            bits = _int(props.get("source_bits", DEFAULT_SOURCE_BITS), "source_bits",
                        low=2, high=64)
            source_seq = self.unwrapper.unwrap(source, _int(wire, "source_seq"), bits)
            return Publication(topic, source, source_seq, ptype, plain_fields,
                               link_seq, permtoken, timestamp, retransmit)
        except MalformedMessageError:
            raise
        except SeqRepairError as exc:
            raise MalformedMessageError(
                exc.message, expected=exc.expected, got=exc.got
            ) from None

    def _ranges(self, body: object) -> list[GapRequest]:
        if not isinstance(body, list) or not body or len(body) > MAX_RANGES:
            raise MalformedMessageError(
                f"a GAP-REQUEST body is a list of 1..{MAX_RANGES} [from, to] pairs",
                expected="list", got=type(body).__name__,
            )
        out = []
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise MalformedMessageError("a gap range is a [from, to] pair", got=pair)
            out.append(
                GapRequest(
                    link_from=_int(pair[0], "link_from", low=1, high=self._link_max),
                    link_to=_int(pair[1], "link_to", low=1, high=self._link_max),
                )
            )
        return out

    def _other(
        self, mtype: MessageType, props: Mapping[Any, Any], body: Any
    ) -> Decoded | list[GapRequest]:
        if mtype in (MessageType.SNAPSHOT, MessageType.IMAGE, MessageType.IMAGE_COMPLETE):
            return decode_image_message(mtype, props, body)
        try:
            if mtype is MessageType.GAP_REQUEST:
                # the properties are the first range, always; a body adds the others
                first = GapRequest(
                    link_from=_int(props.get("link_from"), "link_from", low=1, high=self._link_max),
                    link_to=_int(props.get("link_to"), "link_to", low=1, high=self._link_max),
                )
                if body is None:
                    return first
                ranges = self._ranges(body)
                if ranges[0] != first:
                    raise MalformedMessageError(
                        "a GAP-REQUEST body's first range must be link_from..link_to",
                        expected=[first.link_from, first.link_to],
                        got=[ranges[0].link_from, ranges[0].link_to],
                    )
                return ranges
            if mtype is MessageType.SOURCE_GAP_REQUEST:
                through = props.get(LINK_THROUGH)
                return SourceGapRequest(
                    after=_source_numbers(body, "after"),
                    request_id=_read_request_id(props),
                    link_through=None if through is None else _int(
                        through, LINK_THROUGH, high=self._link_max
                    ),
                )
            if mtype is MessageType.ACK:
                through = props.get(LINK_THROUGH)
                return Ack(
                    link=_str(props.get(ACK_LINK), ACK_LINK),
                    link_epoch=_str(props.get(LINK_EPOCH), LINK_EPOCH),
                    link_through=None if through is None else _int(
                        through, LINK_THROUGH, high=self._link_max
                    ),
                    taken={} if body is None else _source_numbers(body, "taken"),
                )
            if mtype is MessageType.REPLAY_COMPLETE:
                body = _map(body, "REPLAY-COMPLETE body")
                through = _source_numbers(body.get("through"), "through")
                after = body.get("after")
                more = body.get("more", False)
                if not isinstance(more, bool):
                    raise MalformedMessageError(
                        "REPLAY-COMPLETE more must be a boolean", expected="bool", got=more
                    )
                answered = (
                    None
                    if after is None
                    else SourceGapRequest(
                        _source_numbers(after, "after"), request_id=_read_request_id(props)
                    )
                )
                return ReplayComplete(through=through, request=answered, more=more)
            if mtype is MessageType.REPLAY_STARTED:
                body = _map(body, "REPLAY-STARTED body")
                continued = body.get("continued", False)
                if not isinstance(continued, bool):
                    raise MalformedMessageError(
                        "REPLAY-STARTED continued must be a boolean", expected="bool",
                        got=continued,
                    )
                more = body.get("more", False)
                if not isinstance(more, bool):
                    raise MalformedMessageError(
                        "REPLAY-STARTED more must be a boolean", expected="bool", got=more
                    )
                return ReplayStarted(
                    SourceGapRequest(_source_numbers(body.get("after"), "after"),
                                     request_id=_read_request_id(props)),
                    _source_numbers(body.get("through", {}), "through"),
                    continued=continued, more=more,
                )
            if mtype is MessageType.GAP_ERROR:
                reason = props.get("reason")
                if reason not in GAP_ERROR_REASONS:
                    raise MalformedMessageError(
                        f"unknown gap error reason {reason!r}", expected=GAP_ERROR_REASONS,
                        got=reason,
                    )
                request: GapRequest | SourceGapRequest | None = None
                trimmed: dict[str, int] | None = None
                lost: Any = None
                if props.get("link_from") is not None:
                    request = GapRequest(
                        link_from=_int(props.get("link_from"), "link_from", low=1),
                        link_to=_int(props.get("link_to"), "link_to", low=1),
                    )
                elif body is not None:
                    if isinstance(body, list):  # [after, trimmed_through(, items)]
                        if len(body) not in (2, 3):
                            raise MalformedMessageError(
                                "GAP-ERROR body is a map or [after, trimmed_through, items?]",
                                got=body)
                        body, trimmed_body, *more = body
                        lost = more[0] if more else None
                        trimmed = _source_numbers(trimmed_body, "trimmed_through")
                    request = SourceGapRequest(
                        after=_source_numbers(body, "after"), request_id=_read_request_id(props)
                    )
                detail = props.get("detail", "")
                return GapError(
                    reason, request, str(detail) if detail is not None else "", trimmed,
                    items=lost,
                )
            if mtype is MessageType.CAPABILITIES:
                if body is None:
                    return CapabilitiesRequest()
                caps = _map(body, "capabilities")
                retention = caps.get("retention")
                return Capabilities(
                    link_bits=_int(caps.get("link_bits"), "link_bits", low=2, high=64),
                    source_bits={
                        _str(k, "source"): _int(v, "source bits", low=2, high=64)
                        for k, v in _map(caps.get("source_bits", {}), "source_bits").items()
                    },
                    default_source_bits=_int(
                        caps.get("default_source_bits", DEFAULT_SOURCE_BITS),
                        "default_source_bits", low=2, high=64,
                    ),
                    heartbeat_interval=float(_timestamp(caps.get("heartbeat_interval")) or 0.0),
                    max_gap_range=_int(caps.get("max_gap_range"), "max_gap_range", low=1),
                    retention=_timestamp(retention),
                    publish_types=tuple(str(t) for t in caps.get("publish_types", ())),
                    max_batch=_int(caps.get("max_batch", 1), "max_batch", low=1),
                    response_annotations=bool(caps.get("response_annotations", False)),
                    retention_count=_optional_count(caps.get("retention_count"),
                                                    "retention_count"),
                    max_publish_batch=_optional_count(caps.get("max_publish_batch"),
                                                      "max_publish_batch"),
                    limits={
                        _str(k, "limit"): _number(v, "limit")
                        for k, v in _map(caps.get("limits", {}), "limits").items()
                    },
                )
            if mtype is MessageType.SUBSCRIPTION:
                state = _map(body, "subscription")
                return SubscriptionState(
                    status=_str(state.get("subscription_status"), "subscription_status"),
                    topic=str(state.get("topic", "")),
                    subscription_id=str(state.get("subscription_id", "")),
                    queue=str(state.get("queue", "")),
                    qos=str(state.get("qos", "EXACTLY_ONCE")),
                    durable=bool(state.get("durable", False)),
                    reason=str(state.get("reason", "")),
                    epoch=str(state.get("link_epoch", "")),
                )
        except MalformedMessageError:
            raise
        except SeqRepairError as exc:
            raise MalformedMessageError(exc.message, expected=exc.expected, got=exc.got) from None
        raise UnknownMessageTypeError(f"{mtype.value} cannot be decoded here", got=mtype.value)


def decode_all(
    messages: Iterable[Message], link_bits: int = DEFAULT_LINK_BITS
) -> list[Decoded]:
    """Decode several messages with one fresh :class:`Decoder` (a convenience for tests)."""
    decoder = Decoder(link_bits=link_bits)
    out: list[Decoded] = []
    for message in messages:
        out.extend(decoder.decode(message))
    return out
