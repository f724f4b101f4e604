"""A source replay's fast path: journal entries straight to ``PUBLICATIONS`` batch entries.

A replay sends tens of thousands of journaled publications; decoding each into a validated
:class:`~seqrepair.core.messages.Publication`, checking it can be delivered and encoding it
again cost ~70% of the component's replay CPU (issue 26). :class:`JournaledEntries` writes the
positional batch entry (WIRE.md, ``PUBLICATIONS``; the bytes
:func:`~seqrepair.amqp.wire.framing.encode_entry` gives for the decoded publication, which a
test holds) from the entry's stored text, checking on the way everything the full decode and
:func:`~seqrepair.journal.gapfill.undeliverable` check: the source, the wire number against the
absolute one, the publish type, the topic, the permission token, a finite timestamp, the fields
a JSON object of non-empty names, and the size. It vouches only for the common shape (fields of
scalar values); for anything else, or anything wrong, it answers None and the gap-fill service
decodes that entry in full, so a corrupt entry is still reported (JournalCorruptError) and an
undeliverable one still ends the replay with ``GapError("trimmed")``. Entitlement stays the
service's: only entries the link may see reach this.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any, TypeVar

from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.framing import Outgoing, encode_batch, pack_frame
from seqrepair.amqp.wire.rawamqp import decode_message, encode_value
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.limits import MAX_PUBLICATION_SIZE, MAX_TOPIC_BYTES
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal.format import JournalRow

K = TypeVar("K")
V = TypeVar("V")

_CACHE = 4096
"""How many topics, tokens, field names and sources an encoder remembers encoded."""

_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The C scanner under ``json.loads`` (which also matches whitespace with two regexps): the
journal's fields are compact JSON, and anything else is refused to the full path."""
_double = struct.Struct(">d").pack
_ulong = struct.Struct(">Q").pack
_long = struct.Struct(">q").pack
_uint = struct.Struct(">I").pack
_NULL, _TRUE, _FALSE = b"\x40", b"\x41", b"\x42"
_PTYPES = {t.value: encode_value(t.value) for t in PublishType}
_MAX_BY_BITS = {str(bits): (1 << bits) - 1 for bits in range(2, 65)}
"""The journal's ``bits`` text -> the largest wire number of that space."""
_BITS = {bits: encode_value(bits) for bits in range(2, 65)}
_LONG = (-(1 << 63), (1 << 63) - 1)
_SMALL_INTS = [b"\x55" + bytes((value & 0xFF,)) for value in range(-128, 128)]


class _Refused(Exception):
    """Not the common shape: the entry goes down the full path."""


def _text(raw: bytes) -> bytes:
    n = len(raw)
    return bytes((0xA1, n)) + raw if n < 256 else b"\xb1" + _uint(n) + raw


class JournaledEntries:
    """The :data:`~seqrepair.journal.gapfill.RowEncoder` of one replay (a source's bits are
    taken once): ``encoder(source, row)``
    is the batch entry of journal row ``row`` of ``source`` (no link number, its source number
    in the ``source_bits(source)``-bit space live frames use), or None (see the module
    docstring)."""

    def __init__(self, source_bits: Callable[[str], int]) -> None:
        self.source_bits = source_bits
        self._sources: dict[str, tuple[bytes, bytes, int]] = {}
        self._topics: dict[str, bytes] = {}
        self._tokens: dict[str, bytes] = {}
        self._names: dict[str, bytes] = {}
        self.vouched = 0
        self.declined = 0

    def __call__(self, source: str, row: JournalRow) -> bytes | None:
        try:
            entry = self._encode(source, row)
        except (_Refused, KeyError, TypeError, ValueError, UnicodeError, RecursionError,
                StopIteration):
            self.declined += 1
            return None
        self.vouched += 1
        return entry

    def _encode(self, source: str, row: JournalRow) -> bytes:
        seq = row.seq
        _, stored_source, topic_text, ptype_text, text, token, ts, wire_text, bits_text = (
            row.parts)
        if stored_source != source:
            raise _Refused
        stored_max = _MAX_BY_BITS[bits_text]
        if int(wire_text) != (seq - 1) % stored_max + 1:
            raise _Refused
        ptype = _PTYPES[ptype_text]
        topic = self._topics.get(topic_text) or self._topic(topic_text, source)
        token_bytes = _NULL if token is None else (self._tokens.get(token) or self._token(token))
        if ts is None:
            stamp = _NULL
        else:
            when = float(ts)
            if when - when != 0.0:  # NaN or an infinity (isfinite, without the call)
                raise _Refused
            stamp = b"\x82" + _double(when)
        fields, end = _scan(text, 0)
        if type(fields) is not dict or end != len(text):
            raise _Refused
        known = self._sources.get(source)  # a source's bits do not change during a replay
        if known is None:
            known = self._source(source, self.source_bits(source))
        source_bytes, bits_bytes, max_wire = known
        wire = (seq - 1) % max_wire + 1
        body = b"".join((
            ptype,
            stamp,
            source_bytes,
            bytes((0x53, wire)) if wire < 256 else b"\x80" + _ulong(wire),
            bits_bytes,
            topic,
            self._map(fields),
            token_bytes,
        ))
        size = len(body)
        if size > MAX_PUBLICATION_SIZE:  # maybe deliverable still: the full check decides
            raise _Refused
        if size < 255:
            return bytes((0xC0, size + 1, 8)) + body
        return b"\xd0" + _uint(size + 4) + b"\x00\x00\x00\x08" + body

    def _map(self, fields: dict[str, Any]) -> bytes:
        """The AMQP map of flat ``fields`` (rawamqp's ``encode_map`` bytes)."""
        parts: list[bytes] = []
        add = parts.append
        names = self._names
        low, high = _LONG
        for name, value in fields.items():
            add(names.get(name) or self._name(name))
            kind = type(value)
            if kind is str:
                raw = value.encode("utf-8")
                n = len(raw)
                add(bytes((0xA1, n)) + raw if n < 256 else b"\xb1" + _uint(n) + raw)
            elif kind is int:
                if -128 <= value <= 127:
                    add(_SMALL_INTS[value + 128])
                elif low <= value <= high:
                    add(b"\x81" + _long(value))
                else:
                    raise _Refused  # beyond an AMQP long: undeliverable, the full check says so
            elif kind is float:
                add(b"\x82" + _double(value))
            elif value is None:
                add(_NULL)
            elif kind is bool:
                add(_TRUE if value else _FALSE)
            else:
                raise _Refused  # nested lists and maps: the full path
        items = b"".join(parts)
        count = len(parts)
        size = len(items) + 1
        if size < 256 and count < 256:
            return bytes((0xC1, size, count)) + items
        return b"\xd1" + _uint(len(items) + 4) + _uint(count) + items

    def _topic(self, topic: str, source: str) -> bytes:
        try:
            Publication(topic=topic, source=source, source_seq=1)  # the topic's own checks
        except SeqRepairError:
            raise _Refused from None
        raw = topic.encode("utf-8")
        if len(raw) > MAX_TOPIC_BYTES:
            raise _Refused
        return _remember(self._topics, topic, _text(raw))

    def _token(self, token: str) -> bytes:
        if type(token) is not str or not token:
            raise _Refused
        return _remember(self._tokens, token, _text(token.encode("utf-8")))

    def _name(self, name: str) -> bytes:
        if type(name) is not str or not name:
            raise _Refused  # no field name: the full decode reports the entry
        return _remember(self._names, name, _text(name.encode("utf-8")))

    def _source(self, source: str, bits: int) -> tuple[bytes, bytes, int]:
        if bits not in _BITS:
            raise _Refused
        known = (_text(source.encode("utf-8")), _BITS[bits], (1 << bits) - 1)
        return _remember(self._sources, source, known)


def plain_publication(entry: bytes, source_bits: Callable[[str], int]) -> Outgoing:
    """A replay's one batch entry (a retransmission, no link number) as the plain
    ``PUBLICATION`` a batch of one is sent as (WIRE.md), read back from its bytes (rare: a
    chunk of one)."""
    message = decode_message(encode_batch([entry], first_link_seq=None, retransmit=True).encode())
    (publication,) = Decoder().decode(message)  # type: ignore[arg-type]
    assert isinstance(publication, Publication)
    return pack_frame(publication, source_bits)


def entry_matches(entry: bytes, pub: Publication) -> bool:
    """Whether the batch entry ``entry`` carries the journaled publication ``pub`` (its
    number, topic, type, fields, token and time): how a replay from the recently fanned-out
    entries (:mod:`seqrepair.journal.recent`) checks them against the journal."""
    try:
        message = decode_message(
            encode_batch([entry], first_link_seq=None, retransmit=True).encode())
        decoder = Decoder()
        decoder.unwrapper.seed(pub.source, pub.source_seq - 1)
        (got,) = decoder.decode(message)  # type: ignore[arg-type]
    except Exception:  # whatever cannot be read back matches nothing
        return False
    return isinstance(got, Publication) and got.with_link(None, retransmit=False) == pub


def _remember(cache: dict[K, V], key: K, value: V) -> V:
    if len(cache) >= _CACHE:
        cache.clear()
    cache[key] = value
    return value
