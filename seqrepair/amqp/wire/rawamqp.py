"""A small hand-written AMQP 1.0 encoder/decoder for the hot path (AMQP core §1.6, §3.2).

proton's Python binding walks every value through several Python calls per element (about
35-40 us per publication each way). The link frames of WIRE.md only need a handful of
primitive types, so this module writes and reads those bytes directly:

* :func:`encode_value` for ``None``, ``bool``, ``int`` (as ``long``; proton's ``ulong`` as
  ``ulong``), ``float`` (``double``), ``str`` (``string``; proton's ``symbol`` as ``symbol``),
  ``bytes`` (``binary``), ``uuid.UUID``, ``list``/``tuple`` and mappings. Anything else raises
  :class:`Unsupported` and the caller falls back to proton's own codec.
* :class:`PackedMessage`: a message whose sections are written here; it has the ``send``
  method proton's ``Sender.send`` looks for, so it is a drop-in for :class:`proton.Message`.
* :func:`read_message`: the sections of received bytes as a :class:`ReceivedMessage` (the
  attributes :class:`~seqrepair.amqp.wire.codec.Decoder` and the component read), or ``None`` when
  the bytes use something this reader does not know (the caller then asks proton).

Decoded values are plain Python values (what ``codec._plain`` makes of proton's), so the
decoder can skip that pass. They are read by :mod:`~seqrepair.amqp.wire.rawvalues`, whose
names this module re-exports.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections.abc import Mapping
from typing import Any

from proton import Delivery, Endpoint, Link, Message, symbol, ulong
from proton.handlers import IncomingMessageHandler

# the value reader; what batchread, entrylayout and tests import from here stays importable
from seqrepair.amqp.wire.rawvalues import Unsupported as Unsupported
from seqrepair.amqp.wire.rawvalues import _double_at as _double_at
from seqrepair.amqp.wire.rawvalues import _read as _read
from seqrepair.amqp.wire.rawvalues import _read_entry as _read_entry
from seqrepair.amqp.wire.rawvalues import _read_list_keeping_items as _read_list_keeping_items
from seqrepair.amqp.wire.rawvalues import _read_pairs as _read_pairs
from seqrepair.amqp.wire.rawvalues import _u32 as _u32
from seqrepair.amqp.wire.rawvalues import _ulong_at as _ulong_at

__all__ = [
    "PackedMessage",
    "RawIncomingHandler",
    "ReceivedMessage",
    "Unsupported",
    "decode_message",
    "encode_value",
    "malformed",
    "read_message",
    "read_raw",
]


_Q = struct.Struct(">Q").pack
_q = struct.Struct(">q").pack
_d = struct.Struct(">d").pack
_I = struct.Struct(">I").pack
_NULL, _TRUE, _FALSE = b"\x40", b"\x41", b"\x42"


def _str(raw: bytes, small: int, large: int) -> bytes:
    n = len(raw)
    if n < 256:
        return bytes((small, n)) + raw
    return bytes((large,)) + _I(n) + raw


def _compound(items: bytes, count: int, small: int, large: int) -> bytes:
    size = len(items) + 1
    if size < 256 and count < 256:
        return bytes((small, size, count)) + items
    return bytes((large,)) + _I(len(items) + 4) + _I(count) + items


def encode_value(value: Any) -> bytes:
    """The AMQP encoding of ``value`` (see the module docstring for the types handled)."""
    cls = type(value)
    if cls is str:
        return _str(value.encode("utf-8"), 0xA1, 0xB1)
    if cls is int:
        if -128 <= value <= 127:
            return b"\x55" + bytes((value & 0xFF,))
        if -(1 << 63) <= value < (1 << 63):
            return b"\x81" + _q(value)
        raise Unsupported(f"integer {value} does not fit an AMQP long")
    if value is None:
        return _NULL
    if cls is float:
        return b"\x82" + _d(value)
    if cls is bool:
        return _TRUE if value else _FALSE
    if cls is ulong:
        if value == 0:
            return b"\x44"
        if value < 256:
            return bytes((0x53, value))
        return b"\x80" + _Q(value)
    if cls is bytes:
        return _str(value, 0xA0, 0xB0)
    if cls is symbol:
        return _str(value.encode("ascii"), 0xA3, 0xB3)
    if cls is dict or isinstance(value, Mapping):
        return encode_map(value)
    if cls is list or cls is tuple:
        return encode_list([encode_value(v) for v in value])
    if cls is uuid.UUID:
        return b"\x98" + bytes(value.bytes)
    raise Unsupported(f"{cls.__name__} is left to proton's codec")


def encode_list(encoded_items: list[bytes]) -> bytes:
    """An AMQP list of already encoded items."""
    if not encoded_items:
        return b"\x45"
    return _compound(b"".join(encoded_items), len(encoded_items), 0xC0, 0xD0)


def encode_map(mapping: Mapping[Any, Any], *, symbol_keys: bool = False) -> bytes:
    """An AMQP map; ``symbol_keys`` writes string keys as symbols (annotations)."""
    if symbol_keys:
        return _encode_map_slowly(mapping, symbol_keys)
    # every publication's fields pass here (publisher, component): the flat cases in line,
    # the keys (the same few field names again and again) remembered; the same bytes as
    # _encode_map_slowly (a test compares them), anything else by encode_value
    parts: list[bytes] = []
    add = parts.append
    keys = _KEYS
    for key, val in mapping.items():
        if type(key) is str:
            encoded = keys.get(key)
            if encoded is None:
                encoded = encode_value(key)
                if len(encoded) <= _KEY_BYTES_KEPT:  # a long name (a peer's) is not kept
                    if len(keys) >= _KEYS_KEPT:
                        keys.clear()
                    keys[key] = encoded
            add(encoded)
        else:
            add(encode_value(key))
        kind = type(val)
        if kind is str:
            raw = val.encode("utf-8")
            n = len(raw)
            add(bytes((0xA1, n)) + raw if n < 256 else b"\xb1" + _I(n) + raw)
        elif kind is int and -128 <= val <= 127:
            add(_SMALL_INTS[val + 128])
        elif kind is float:
            add(b"\x82" + _d(val))
        elif val is None:
            add(_NULL)
        else:
            add(encode_value(val))
    return _compound(b"".join(parts), len(parts), 0xC1, 0xD1)


def _encode_map_slowly(mapping: Mapping[Any, Any], symbol_keys: bool = False) -> bytes:
    """:func:`encode_map` item by item through :func:`encode_value`."""
    parts = []
    for key, val in mapping.items():
        if symbol_keys and type(key) is str:
            key = symbol(key)
        parts.append(encode_value(key))
        parts.append(encode_value(val))
    return _compound(b"".join(parts), len(parts), 0xC1, 0xD1)


_KEYS: dict[str, bytes] = {}
"""Encoded map keys of type str (bounded: cleared when full)."""
_KEYS_KEPT = 4096
_KEY_BYTES_KEPT = 66
"""The longest encoded key remembered (a str8 of 64 bytes): at most ~0.5 MiB together."""
_SMALL_INTS = [b"\x55" + bytes((v & 0xFF,)) for v in range(-128, 128)]


# section descriptors (AMQP core §3.2): 0x00, smallulong code
_DELIVERY_ANNOTATIONS = b"\x00\x53\x71"
_PROPERTIES = b"\x00\x53\x73"
_APPLICATION_PROPERTIES = b"\x00\x53\x74"
_AMQP_VALUE = b"\x00\x53\x77"


class PackedMessage:
    """A message encoded by this module: application properties and an amqp-value body.

    ``body`` is the AMQP encoding of the body value (see :func:`encode_value`). ``id``,
    ``reply_to``, ``correlation_id`` (the properties section) and ``instructions`` (delivery
    annotations) may be set afterwards, as on :class:`proton.Message`.
    """

    __slots__ = ("body", "correlation_id", "id", "instructions", "properties", "reply_to")

    def __init__(self, properties: dict[str, Any], body: bytes) -> None:
        self.properties = properties
        self.body = body
        self.id: Any = None
        self.reply_to: str | None = None
        self.correlation_id: Any = None
        self.instructions: Mapping[Any, Any] | None = None

    def encode(self) -> bytes:
        """The message as bytes on the wire."""
        parts = []
        if self.instructions:
            parts.append(_DELIVERY_ANNOTATIONS + encode_map(self.instructions, symbol_keys=True))
        if self.id is not None or self.reply_to is not None or self.correlation_id is not None:
            fields = [self.id, None, None, None, self.reply_to, self.correlation_id]
            while fields[-1] is None:
                fields.pop()
            parts.append(_PROPERTIES + encode_list([_message_id(f) for f in fields]))
        parts.append(_APPLICATION_PROPERTIES + encode_map(self.properties))
        parts.append(_AMQP_VALUE + self.body)
        return b"".join(parts)

    def send(self, sender: Any, tag: str | None = None) -> Any:
        """What :meth:`proton.Message.send` does, with these bytes."""
        delivery = sender.delivery(tag or sender.delivery_tag())
        sender.stream(self.encode())
        sender.advance()
        if sender.snd_settle_mode == Link.SND_SETTLED:
            delivery.settle()
        return delivery


def _message_id(value: Any) -> bytes:
    if type(value) is int:  # message ids are ulong, uuid, binary or string
        return encode_value(ulong(value))
    return encode_value(value)


# --------------------------------------------------------------------------------------------
# reading


class ReceivedMessage:
    """The sections of a received message that seqrepair reads (a :class:`proton.Message`
    look-alike with plain Python values)."""

    __slots__ = (
        "_ends",
        "_raw",
        "address",
        "body",
        "body_at",
        "correlation_id",
        "id",
        "instructions",
        "malformed",
        "plain",
        "properties",
        "reply_to",
    )

    def __init__(self) -> None:
        self.properties: dict[str, Any] | None = None
        self.body: Any = None
        self.body_at: int | None = None
        """Where a list body begins in the bytes when it was left unread (``lazy``:
        :func:`read_message`); ``body`` is None then."""
        self.id: Any = None
        self.address: str | None = None
        self.reply_to: str | None = None
        self.correlation_id: Any = None
        self.instructions: dict[Any, Any] | None = None
        self._raw: bytes = b""
        self._ends: list[int] | None = None  # where each item of a list body ends in _raw
        self.plain = True
        """Values are plain Python values already."""
        self.malformed: str | None = None
        """Why the bytes could not be read as an AMQP message (None: they could)."""

    @property
    def items(self) -> list[bytes] | None:
        """When the body is a list: the encoded bytes of each item (a batch's entries), cut
        from the message when asked (a subscriber that only decodes never copies them)."""
        ends = self._ends
        if ends is None:
            return None
        raw = self._raw
        return [raw[start:end] for start, end in itertools.pairwise(ends)]

    @items.setter
    def items(self, items: list[bytes] | None) -> None:
        if items is None:
            self._ends = None
            return
        self._raw = b"".join(items)
        ends = [0]
        for item in items:
            ends.append(ends[-1] + len(item))
        self._ends = ends


def read_message(data: bytes, lazy: bool = False) -> ReceivedMessage | None:
    """The sections of a message, or None when proton's codec should read it instead.
    ``lazy``: a list body is left unread (:attr:`ReceivedMessage.body_at`; its reader reads
    it, and :func:`decode_message` of the same bytes when that reader cannot)."""
    try:
        return _read_message(data, lazy)
    except (Unsupported, IndexError, UnicodeDecodeError, struct.error, ValueError,
            OverflowError, RecursionError):
        # bad bytes (a char past U+10FFFF, values nested past Python's recursion limit...):
        # proton_message checks them first (malformed(), depth-bounded) and says why
        return None


_LAZY_STRINGS = ("id", "correlation_id", "address", "reply_to", "subject", "content_type",
                 "content_encoding", "group_id", "reply_to_group_id")
"""The properties of a :class:`proton.Message` read from its C struct when asked for (a string
that is not UTF-8 raises then, wherever the component happens to read it)."""


def decode_message(data: bytes, lazy: bool = False) -> ReceivedMessage | Message:
    """What a receiver makes of ``data``: :func:`read_message`, else proton's codec when the
    bytes are well-formed AMQP, else a :class:`ReceivedMessage` whose ``malformed`` says why
    (the :class:`~seqrepair.amqp.wire.codec.Decoder` rejects it).

    proton 0.40's ``Message.decode`` reports nothing for bytes it cannot read (garbage decodes
    to an empty message, which a topic link would take for an empty publication) and raises
    from deep inside for a string that is not UTF-8: neither may reach the caller unchecked.
    """
    message = read_message(data, lazy)
    if message is not None:
        return message
    decoded = proton_message(data)
    if isinstance(decoded, Message):
        return decoded
    bad = ReceivedMessage()
    bad.malformed = decoded
    return bad


def proton_message(data: bytes) -> Message | str:
    """``data`` read by proton's codec, checked first (:func:`malformed`) and then in every
    string proton decodes lazily; or why it cannot be read (whatever proton would raise)."""
    problem = malformed(data)
    if problem is not None:
        return problem
    decoded = Message()
    try:
        decoded.decode(data)
        for name in _LAZY_STRINGS:  # proton turns these into str only when they are read
            getattr(decoded, name)
    except Exception as exc:  # whatever proton raises: the bytes are bad
        return f"undecodable: {exc!r}"[:200]
    return decoded


_WIDTHS = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}
_TYPE_CODES = frozenset(
    [*range(0x40, 0x46), *range(0x50, 0x57), 0x60, 0x61, *range(0x70, 0x75), *range(0x80, 0x85),
     0x94, 0x98, 0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3, 0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0]
)


def malformed(data: bytes) -> str | None:
    """Why ``data`` is not a well-formed AMQP message (a sequence of described sections whose
    every value has a known type code and lies within the bytes), or None when it is one."""
    if not data:
        return None
    pos = 0
    try:
        while pos < len(data):
            if data[pos] != 0x00:
                return f"byte {pos} does not start a section"
            pos = _skip(data, pos, 0)
    except (Unsupported, IndexError, struct.error) as exc:
        return str(exc) or "a value runs past the end of the message"
    return None if pos == len(data) else "a value runs past the end of the message"


def _skip(buf: bytes, pos: int, depth: int) -> int:
    """The position after the value at ``pos`` (checked, not decoded)."""
    if depth > 64:
        raise Unsupported("values nested too deep")
    code = buf[pos]
    if code == 0x00:  # described: the descriptor, then the value
        return _skip(buf, _skip(buf, pos + 1, depth + 1), depth + 1)
    return _skip_value(buf, pos + 1, code, depth)


def _skip_value(buf: bytes, pos: int, code: int, depth: int) -> int:
    """The position after a value of type ``code`` whose bytes start at ``pos``."""
    if code not in _TYPE_CODES:
        raise Unsupported(f"no AMQP type has code 0x{code:02x}")
    high = code >> 4
    width = _WIDTHS.get(high)
    if width is not None:
        end = pos + width
    elif high == 0xA or high == 0xB:
        end = pos + 1 + buf[pos] if high == 0xA else pos + 4 + _u32(buf, pos)[0]
    else:
        small = high == 0xC or high == 0xE
        end = pos + 1 + buf[pos] if small else pos + 4 + _u32(buf, pos)[0]
        count = buf[pos + 1] if small else _u32(buf, pos + 4)[0]
        at = pos + 2 if small else pos + 8
        if high == 0xC or high == 0xD:  # list, map: each item has its constructor
            for _ in range(count):
                at = _skip(buf, at, depth + 1)
        elif count or at < end:  # array: one constructor (even when empty), the elements
            element = buf[at]
            at += 1
            if element == 0x00:
                at = _skip(buf, at, depth + 1)
                element = buf[at]
                at += 1
            for _ in range(count):
                at = _skip_value(buf, at, element, depth + 1)
        if at != end:
            raise Unsupported("a compound's size does not match its items")
    if end > len(buf):
        raise Unsupported("a value runs past the end of the message")
    return end


def _read_message(data: bytes, lazy: bool = False) -> ReceivedMessage:
    msg = ReceivedMessage()
    pos, end = 0, len(data)
    while pos < end:
        if data[pos] != 0x00 or data[pos + 1] != 0x53:
            raise Unsupported("not a section")
        code = data[pos + 2]
        start = pos + 3
        # a body section after another one is the body, read lazily or not (the last one
        # read, as ever): a lazy reader must not read an earlier list the usual way does not
        if lazy and code == 0x77 and (data[start] == 0xC0 or data[start] == 0xD0):
            msg.body_at, msg._raw = start, data  # its reader checks its size
            msg.body, msg._ends = None, None
            pos = (start + 2 + data[start + 1] if data[start] == 0xC0
                   else start + 5 + _u32(data, start + 1)[0])
            continue
        if code == 0x77 and (data[start] == 0xC0 or data[start] == 0xD0):
            msg.body, msg._ends, pos = _read_list_keeping_items(data, start)
            msg._raw, msg.body_at = data, None
            continue
        value, pos = _read(data, start)
        if code == 0x77:
            msg.body, msg.body_at, msg._ends = value, None, None
        elif code == 0x74:
            if not isinstance(value, dict):
                raise Unsupported("application-properties is not a map")
            msg.properties = value
        elif code == 0x73:
            fields = value if isinstance(value, list) else []
            fields = fields + [None] * (6 - len(fields))
            msg.id, msg.address, msg.reply_to, msg.correlation_id = (
                fields[0], fields[2], fields[4], fields[5]
            )
        elif code == 0x71:
            msg.instructions = value if isinstance(value, dict) else None
        elif code in (0x70, 0x72, 0x78):
            pass  # header, message annotations, footer: not read by seqrepair
        else:
            raise Unsupported("data or amqp-sequence body")
    if pos != end:  # the last value claims bytes past the end
        raise Unsupported("truncated message")
    return msg


class RawIncomingHandler(IncomingMessageHandler):
    """proton's incoming-message handler, reading with :func:`read_message` first.

    ``event.message`` is a :class:`ReceivedMessage` when this module could read the bytes and a
    :class:`proton.Message` otherwise; the rest (accept, reject, settle) is proton's.
    ``lazy_body``: list bodies are left for the handler's own reader (``read_message(lazy)``);
    a link whose own ``lazy_body`` attribute is true has them left so too.
    """

    lazy_body = False

    def on_delivery(self, event: Any) -> None:
        dlv = event.delivery
        link = dlv.link
        if not link.is_receiver or dlv.aborted or not dlv.readable or dlv.partial:
            super().on_delivery(event)
            return
        # a transfer without payload (a peer whose encoder failed after it began one) is no
        # message: proton returns None for it, read here as empty bytes, which are malformed
        data = link.recv(dlv.pending) or b""
        link.advance()
        try:
            event.message = decode_message(
                data, self.lazy_body or getattr(link, "lazy_body", False))
        except Exception as exc:  # what a peer sends must never end the event loop
            bad = ReceivedMessage()
            bad.malformed = f"unreadable: {exc!r}"[:200]
            event.message = bad
        if event.link.state & Endpoint.LOCAL_CLOSED:
            if self.auto_accept:
                dlv.update(Delivery.RELEASED)
                dlv.settle()
            return
        self.on_message(event)
        if self.auto_accept:
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()


def read_raw(handler: Any) -> None:
    """Make a :class:`~proton.handlers.MessagingHandler` read deliveries with this module."""
    handler.handlers = [
        RawIncomingHandler(h.auto_accept, h.delegate) if type(h) is IncomingMessageHandler else h
        for h in handler.handlers
    ]
