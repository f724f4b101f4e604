"""Link frames on the wire: source numbers as wire values and batches of frames.

A publication travels one per transfer (``PUBLICATION``: properties and an AMQP map body of
fields, readable by any AMQP client) or several per transfer (``PUBLICATIONS``: a list body of
positional entries). Frames are written by :mod:`seqrepair.amqp.wire.rawamqp` (proton's codec walks
each value through several Python calls), falling back to proton's codec for field values of
types only it knows. :class:`SourceUnwrapper` turns wire source numbers back into absolutes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
from proton import Message, ulong

from seqrepair.amqp.wire.errors import MalformedMessageError, OutOfSpaceError
from seqrepair.amqp.wire.rawamqp import (
    PackedMessage,
    Unsupported,
    encode_list,
    encode_map,
    encode_value,
)
from seqrepair.amqp.wire.technical import DEFAULT_SOURCE_BITS, MESSAGE_TYPE, LinkFrame, MessageType
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Heartbeat, Publication, PublishType
from seqrepair.core.sequence import SequenceSpace

_SourceState = tuple[int | None, tuple[int, int] | None, int | None]
"""A source's last absolute number, next wire (bits, value) and bit width; None: not known."""
T = TypeVar("T")


def _put(state: dict[str, T], source: str, value: T | None) -> None:
    if value is None:
        state.pop(source, None)
    else:
        state[source] = value


@attrs.define
class SourceUnwrapper:
    """Turns wire source numbers back into absolutes, remembering the last one per source.

    The arithmetic is the core's :meth:`SequenceSpace.unwrap`; this only keeps the state a
    receiver needs to call it.
    """

    _last: dict[str, int] = attrs.field(factory=dict)
    _next_wire: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    """Per source: (bits, the wire value that would follow ``_last``), the common case."""
    _spaces: dict[int, SequenceSpace] = attrs.field(factory=dict)
    bits: dict[str, int] = attrs.field(factory=dict)
    """The bit width each source was last seen with."""
    _before: dict[str, _SourceState] | None = attrs.field(default=None, init=False)
    """Since :meth:`begin`: each source's state before its first change."""

    def begin(self) -> None:
        """Start a trial (one received message): :meth:`rollback` undoes what follows."""
        self._before = {}

    @property
    def in_trial(self) -> bool:
        """Whether a trial is open (:meth:`begin` without its :meth:`commit` or
        :meth:`rollback` yet)."""
        return self._before is not None

    def trial_sources(self) -> list[str]:
        """The sources the open trial touched so far."""
        return list(self._before or ())

    def commit(self) -> None:
        """Keep what the trial changed."""
        self._before = None

    def rollback(self, kept: Mapping[str, int]) -> None:
        """Undo the trial, except that a source whose numbers were taken past where the trial
        began (``kept``: per source the last number taken, as journaled) continues from there:
        a message refused part-way must not make later numbers unwrap behind what it took."""
        before, self._before = self._before or {}, None
        for source, (last, next_wire, bits) in before.items():
            if kept.get(source, 0) > (last or 0):
                self._last[source] = kept[source]
                self._next_wire.pop(source, None)
                continue
            _put(self._last, source, last)
            _put(self._next_wire, source, next_wire)
            _put(self.bits, source, bits)

    def _record(self, source: str) -> None:
        before = self._before
        if before is not None and source not in before:
            before[source] = (
                self._last.get(source), self._next_wire.get(source), self.bits.get(source)
            )

    def space(self, bits: int) -> SequenceSpace:
        """The (cached) sequence space of ``bits``."""
        space = self._spaces.get(bits)
        if space is None:
            try:
                space = self._spaces[bits] = SequenceSpace(bits)
            except SeqRepairError as exc:
                raise OutOfSpaceError(
                    f"source_bits {bits!r}: {exc.message}", expected=(2, 64), got=bits
                ) from None
        return space

    def seed(self, source: str, absolute: int) -> None:
        """Start unwrapping ``source`` near ``absolute`` (a recovered high-water)."""
        self._record(source)
        if absolute > self._last.get(source, 0):
            self._last[source] = absolute
            self._next_wire.pop(source, None)

    def unwrap(self, source: str, wire: int, bits: int) -> int:
        """The absolute number of ``wire`` in ``source``'s ``bits``-bit space."""
        before = self._before
        if before is not None and source not in before:  # a trial: keep its first state
            self._record(source)
        expected = self._next_wire.get(source)
        if expected is not None and expected[0] == bits and expected[1] == wire:
            # the number after the last one: the core's arithmetic would say last + 1
            absolute = self._last[source] + 1
            self._last[source] = absolute
            self._next_wire[source] = (bits, 1 if wire == (1 << bits) - 1 else wire + 1)
            return absolute
        space = self.space(bits)
        if not 1 <= wire <= space.max:
            raise OutOfSpaceError(
                f"source_seq {wire} is outside the {bits}-bit space 1..{space.max}",
                expected=(1, space.max),
                got=wire,
            )
        self.bits[source] = bits
        absolute = space.unwrap(self._last.get(source, 0), wire)
        if absolute > self._last.get(source, 0):
            self._last[source] = absolute
        self._next_wire[source] = (bits, space.next(space.wire(self._last[source])))
        return absolute

    def unwrap_run(self, source: str, wires: Sequence[int], bits: int) -> Sequence[int]:
        """The absolute numbers of ``wires`` (at least one) in ``source``'s ``bits``-bit
        space: what :meth:`unwrap` of each in turn gives, leaving the same state; consecutive
        numbers (the usual run) cost one :meth:`unwrap`, not one each."""
        first_wire = wires[0]
        count = len(wires)
        first = self.unwrap(source, first_wire, bits)
        last_wire = first_wire + count - 1
        if (count > 1 and last_wire <= (1 << bits) - 1
                and self._next_wire.get(source) == (bits, first_wire + 1)
                and tuple(wires) == tuple(range(first_wire, last_wire + 1))):
            # each unwrap after the first takes its "number after the last one" branch
            base = self._last[source]
            self._last[source] = base + count - 1
            self._next_wire[source] = (bits, 1 if last_wire == (1 << bits) - 1
                                       else last_wire + 1)
            if base == first:
                return range(first, first + count)
            return [first, *range(base + 1, base + count)]
        unwrap = self.unwrap
        return [first, *(unwrap(source, wire, bits) for wire in wires[1:])]

    def wire(self, absolute: int, bits: int) -> int:
        """The wire value of an absolute number in a ``bits``-bit space."""
        return self.space(bits).wire(absolute)


# --------------------------------------------------------------------------------------------
# encoding


def _frame_entry(
    frame: LinkFrame, source_bits: Callable[[str], int], spaces: SourceUnwrapper
) -> dict[str, Any]:
    """One frame as the map of WIRE.md (application properties + ``fields``)."""
    if isinstance(frame, Heartbeat):
        entry: dict[str, Any] = {MESSAGE_TYPE: MessageType.HEARTBEAT.value}
        entry["link_seq"] = ulong(frame.link_seq)
        if frame.timestamp is not None:
            entry["timestamp"] = float(frame.timestamp)
        if frame.retransmit:
            entry["retransmit"] = True
        return entry
    bits = source_bits(frame.source)
    entry = {
        MESSAGE_TYPE: MessageType.PUBLICATION.value,
        "source": frame.source,
        "source_seq": ulong(spaces.wire(frame.source_seq, bits)),
        "source_bits": bits,
        "topic": frame.topic,
        "ptype": frame.ptype.value,
    }
    if frame.link_seq is not None:
        entry["link_seq"] = ulong(frame.link_seq)
    if frame.permtoken is not None:
        entry["permtoken"] = frame.permtoken
    if frame.timestamp is not None:
        entry["timestamp"] = float(frame.timestamp)
    if frame.retransmit:
        entry["retransmit"] = True
    return entry


_SPACES = SourceUnwrapper()


def _bits_of(source_bits: Callable[[str], int] | Mapping[str, int] | int) -> Callable[[str], int]:
    if isinstance(source_bits, int):
        bits = source_bits
        return lambda _source: bits
    if isinstance(source_bits, Mapping):
        table = source_bits
        return lambda source: table.get(source, DEFAULT_SOURCE_BITS)
    return source_bits


Outgoing = PackedMessage | Message
"""A message ready for ``Sender.send``: written by :mod:`rawamqp` or by proton."""


def encode_frame(
    frame: LinkFrame,
    source_bits: Callable[[str], int] | Mapping[str, int] | int = DEFAULT_SOURCE_BITS,
) -> Message:
    """One publication or heartbeat as one :class:`proton.Message` (readable by a plain AMQP
    client); :func:`pack_frame` writes the same message faster."""
    entry = _frame_entry(frame, _bits_of(source_bits), _SPACES)
    body = dict(frame.fields) if isinstance(frame, Publication) else None
    return Message(body=body, properties=entry)


def pack_frame(
    frame: LinkFrame,
    source_bits: Callable[[str], int] | Mapping[str, int] | int = DEFAULT_SOURCE_BITS,
) -> Outgoing:
    """:func:`encode_frame`, written by :mod:`rawamqp` (proton's codec only for field values
    of types only it knows)."""
    entry = _frame_entry(frame, _bits_of(source_bits), _SPACES)
    body = dict(frame.fields) if isinstance(frame, Publication) else None
    try:
        return PackedMessage(entry, encode_value(body))
    except Unsupported:  # a field value of a type only proton knows
        return Message(body=body, properties=entry)


TAIL_PROBE = "tail_probe"
"""The application property of a component's tail probe (its window full, the newest frame
resent alone): the link context (epoch) whose newest frame it is (WIRE.md, Window discipline)."""


def tail_probe(
    frame: LinkFrame,
    epoch: str,
    source_bits: Callable[[str], int] | Mapping[str, int] | int = DEFAULT_SOURCE_BITS,
) -> Message:
    """``frame`` as a lone message marked as the tail probe of the link context ``epoch``."""
    entry = _frame_entry(frame, _bits_of(source_bits), _SPACES)
    entry[TAIL_PROBE] = epoch
    return Message(body=dict(frame.fields) if isinstance(frame, Publication) else None,
                   properties=entry)


HEARTBEAT_ENTRY = "HEARTBEAT"
"""The first element of a heartbeat's positional batch entry (publications have their ptype)."""


def encode_entry(frame: LinkFrame, source_bits: Callable[[str], int]) -> bytes:
    """One frame as a positional ``PUBLICATIONS`` entry, without link number or retransmit.

    These bytes do not depend on the link: the component encodes a live publication once and
    shares the entry across every link it is sent on. A publication is written in line here
    (the bytes :func:`encode_list` of :func:`_entry_items` would give, which a test holds);
    its source, bits and topic are encoded once and remembered.
    """
    if type(frame) is not Publication:
        return encode_list(_entry_items(frame, source_bits))
    source = frame.source
    bits = source_bits(source)
    max_wire = _MAX_WIRE.get(bits)
    if max_wire is None:
        _SPACES.space(bits)  # raises for a width outside 2..64
        max_wire = _MAX_WIRE[bits] = (1 << bits) - 1
    seq = frame.source_seq
    if seq < 1:
        _SPACES.wire(seq, bits)  # raises: absolute numbers start at 1
    wire = (seq - 1) % max_wire + 1
    stamp = frame.timestamp
    token = frame.permtoken
    body = b"".join((
        _PTYPES[frame.ptype],
        _NULL if stamp is None else b"\x82" + _double(float(stamp)),
        _TEXTS.get(source) or _text(source),
        bytes((0x53, wire)) if wire < 256 else b"\x80" + _ulong(wire),
        _BITS[bits],
        _TEXTS.get(frame.topic) or _text(frame.topic),
        encode_map(frame.fields),
        _NULL if token is None else encode_value(token),
    ))
    if len(body) < 255:
        return bytes((0xC0, len(body) + 1, 8)) + body
    return b"\xd0" + _uint(len(body) + 4) + b"\x00\x00\x00\x08" + body


_TEXTS: dict[str, bytes] = {}
"""Encoded sources and topics (bounded: cleared when full)."""
_MAX_WIRE: dict[int, int] = {}
_BITS = {bits: encode_value(bits) for bits in range(2, 65)}
_NULL = encode_value(None)
_double = struct.Struct(">d").pack
_ulong = struct.Struct(">Q").pack
_uint = struct.Struct(">I").pack


def _text(value: str) -> bytes:
    encoded = encode_value(value)
    if len(_TEXTS) >= 4096:
        _TEXTS.clear()
    _TEXTS[value] = encoded
    return encoded


def _entry_items(frame: LinkFrame, source_bits: Callable[[str], int]) -> list[bytes]:
    if isinstance(frame, Heartbeat):
        return [_HB, encode_value(_float(frame.timestamp))]
    bits = source_bits(frame.source)
    return [
        _PTYPES[frame.ptype],
        encode_value(_float(frame.timestamp)),
        encode_value(frame.source),
        encode_value(ulong(_SPACES.wire(frame.source_seq, bits))),
        encode_value(bits),
        encode_value(frame.topic),
        encode_map(frame.fields),
        encode_value(frame.permtoken),
    ]


_HB = encode_value(HEARTBEAT_ENTRY)
PTYPE_BY_NAME: dict[Any, PublishType] = {t.value: t for t in PublishType}
"""Publish types by their wire name (the decoder's fast path before `PublishType.parse`)."""
_PTYPES = {t: encode_value(t.value) for t in PublishType}


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def encode_batch(
    entries: Sequence[bytes], *, first_link_seq: int | None, retransmit: bool
) -> PackedMessage:
    """A ``PUBLICATIONS`` message of regular entries (see :func:`encode_entry`): entry ``i``
    has link number ``first_link_seq + i`` (none when ``first_link_seq`` is None)."""
    props: dict[str, Any] = {
        MESSAGE_TYPE: MessageType.PUBLICATIONS.value, "count": ulong(len(entries)),
    }
    if first_link_seq is not None:
        props["link_seq"] = ulong(first_link_seq)
    if retransmit:
        props["retransmit"] = True
    return PackedMessage(props, encode_list(list(entries)))


def regular_runs(frames: Sequence[LinkFrame]) -> list[tuple[int, int]]:
    """``frames`` cut into ``[start, end)`` runs that :func:`encode_batch` can carry: link
    numbers consecutive (or all absent) and one retransmit flag per run."""
    count = len(frames)
    if not count:
        return []
    runs = []
    start = 0
    # each frame's number and flag read once (a link's pump cuts every chunk it sends)
    prev_seq = frames[0].link_seq
    prev_flag = frames[0].retransmit
    for i in range(1, count):
        cur = frames[i]
        seq = cur.link_seq
        flag = cur.retransmit
        if (seq is None if prev_seq is None else seq == prev_seq + 1) and flag is prev_flag:
            prev_seq = seq
            continue
        runs.append((start, i))
        start = i
        prev_seq = seq
        prev_flag = flag
    runs.append((start, count))
    return runs


def _retransmit(frame: LinkFrame) -> bool:
    return frame.retransmit


def encode_frames(
    frames: Sequence[LinkFrame],
    source_bits: Callable[[str], int] | Mapping[str, int] | int = DEFAULT_SOURCE_BITS,
) -> Outgoing:
    """Several frames in one message: ``PUBLICATIONS`` with a list body of positional entries.

    A single frame is encoded as :func:`encode_frame` would, so a batch of one stays readable by
    clients that only know ``PUBLICATION``. A batch whose link numbers are not consecutive, or
    that mixes retransmissions and live frames, carries them in every entry.
    """
    if not frames:
        raise MalformedMessageError("a batch needs at least one frame", got=0)
    if len(frames) == 1:
        return pack_frame(frames[0], source_bits)
    bits = _bits_of(source_bits)
    try:
        if len(regular_runs(frames)) == 1:
            return encode_batch(
                [encode_entry(f, bits) for f in frames],
                first_link_seq=frames[0].link_seq,
                retransmit=_retransmit(frames[0]),
            )
        entries = []
        for frame in frames:
            items = _entry_items(frame, bits)
            items.append(encode_value(None if frame.link_seq is None else ulong(frame.link_seq)))
            items.append(encode_value(frame.retransmit))
            entries.append(encode_list(items))
        return encode_batch(entries, first_link_seq=None, retransmit=False)
    except Unsupported:  # a field value of a type only proton knows: the map form
        body = []
        for frame in frames:
            mapped = _frame_entry(frame, bits, _SPACES)
            if isinstance(frame, Publication):
                mapped["fields"] = dict(frame.fields)
            body.append(mapped)
        return Message(
            body=body,
            properties={MESSAGE_TYPE: MessageType.PUBLICATIONS.value, "count": ulong(len(body))},
        )


def plain_value(value: Any) -> Any:
    """Proton's subclasses (symbol, ulong, char...) as plain Python values, recursively."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, Mapping):
        return {plain_value(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    return value
