"""The value reader of :mod:`~seqrepair.amqp.wire.rawamqp`: AMQP 1.0 values read from bytes.

Each reader takes the bytes and a position and returns ``(value, position after it)``, the
value a plain Python value; the scalars of a publication entry are read in line, the rest by
:func:`_read`. A code this reader does not know raises :class:`Unsupported` (the caller then
asks proton). It is apart from ``rawamqp.py`` because it is byte arithmetic alone (no proton),
shared by that module's message reader and the transfer readers of
:mod:`~seqrepair.amqp.wire.batchread` and :mod:`~seqrepair.amqp.wire.entrylayout`; writing
values and reading a message's sections stay in ``rawamqp.py``, which re-exports these names.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any


class Unsupported(Exception):
    """A value or section this module or :mod:`~seqrepair.amqp.wire.rawamqp` does not handle;
    use proton's codec instead."""


_u32 = struct.Struct(">I").unpack_from
_fixed = {
    0x50: (1, struct.Struct(">B").unpack_from),  # ubyte
    0x51: (1, struct.Struct(">b").unpack_from),  # byte
    0x52: (1, struct.Struct(">B").unpack_from),  # smalluint
    0x53: (1, struct.Struct(">B").unpack_from),  # smallulong
    0x54: (1, struct.Struct(">b").unpack_from),  # smallint
    0x55: (1, struct.Struct(">b").unpack_from),  # smalllong
    0x60: (2, struct.Struct(">H").unpack_from),  # ushort
    0x61: (2, struct.Struct(">h").unpack_from),  # short
    0x70: (4, struct.Struct(">I").unpack_from),  # uint
    0x71: (4, struct.Struct(">i").unpack_from),  # int
    0x72: (4, struct.Struct(">f").unpack_from),  # float
    0x80: (8, struct.Struct(">Q").unpack_from),  # ulong
    0x81: (8, struct.Struct(">q").unpack_from),  # long
    0x82: (8, struct.Struct(">d").unpack_from),  # double
    0x83: (8, struct.Struct(">q").unpack_from),  # timestamp (ms)
}
_ulong_at = struct.Struct(">Q").unpack_from
_long_at = struct.Struct(">q").unpack_from
_double_at = struct.Struct(">d").unpack_from
_byte_at = struct.Struct(">b").unpack_from
_CONSTANTS: dict[int, Any] = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: 0, 0x45: []}


def _read(buf: bytes, pos: int) -> tuple[Any, int]:
    """One value at ``pos``: (value, position after it). Most frequent codes first."""
    code = buf[pos]
    pos += 1
    if code == 0xA1 or code == 0xA3:  # str8, sym8
        end = pos + 1 + buf[pos]
        return buf[pos + 1 : end].decode("utf-8"), end
    if code == 0x80:  # ulong
        return _ulong_at(buf, pos)[0], pos + 8
    if code == 0x82:  # double
        return _double_at(buf, pos)[0], pos + 8
    if code == 0x40:
        return None, pos
    if code == 0x55 or code == 0x54:  # smalllong, smallint
        return _byte_at(buf, pos)[0], pos + 1
    if code == 0x53 or code == 0x52:  # smallulong, smalluint
        return buf[pos], pos + 1
    if code == 0xC0 or code == 0xC1:  # list8, map8
        end = pos + 1 + buf[pos]
        count = buf[pos + 1]
        pos += 2
    elif code == 0xD0 or code == 0xD1:  # list32, map32
        end = pos + 4 + _u32(buf, pos)[0]
        count = _u32(buf, pos + 4)[0]
        pos += 8
    else:
        fixed = _fixed.get(code)
        if fixed is not None:
            width, unpack = fixed
            return unpack(buf, pos)[0], pos + width
        return _read_other(buf, pos, code)
    if code == 0xC0 or code == 0xD0:
        items, pos = _read_items(buf, pos, count)
        if pos != end:
            raise Unsupported("compound size does not match its items")
        return items, pos
    if count % 2:
        raise Unsupported("a map needs an even number of items")
    mapping, pos = _read_pairs(buf, pos, count // 2)
    if pos != end:
        raise Unsupported("compound size does not match its items")
    return mapping, pos


def _read_scalar(buf: bytes, pos: int) -> tuple[Any, int]:
    """:func:`_read` with the scalars of a publication read in line (the codes checked in the
    order they are most frequent in frames)."""
    code = buf[pos]
    if code == 0xA1 or code == 0xA3:  # str8, sym8
        end = pos + 2 + buf[pos + 1]
        return buf[pos + 2 : end].decode("utf-8"), end
    if code == 0x82:  # double
        return _double_at(buf, pos + 1)[0], pos + 9
    if code == 0x55 or code == 0x54:  # smalllong, smallint
        value = buf[pos + 1]
        return (value - 256 if value > 127 else value), pos + 2
    if code == 0x81:  # long
        return _long_at(buf, pos + 1)[0], pos + 9
    if code == 0x40:
        return None, pos + 1
    return _read(buf, pos)


def _read_pairs(buf: bytes, pos: int, pairs: int) -> tuple[dict[Any, Any], int]:
    """The ``pairs`` key/value pairs of a map from ``pos`` (keys mostly str8, read in line)."""
    mapping: dict[Any, Any] = {}
    for _ in range(pairs):
        code = buf[pos]
        if code == 0xA1 or code == 0xA3:  # str8, sym8
            end = pos + 2 + buf[pos + 1]
            key: Any = buf[pos + 2 : end].decode("utf-8")
            pos = end
        else:
            key, pos = _read(buf, pos)
        code = buf[pos]  # the value: _read_scalar's common cases in line (a call per value)
        if code == 0xA1 or code == 0xA3:  # str8, sym8
            end = pos + 2 + buf[pos + 1]
            value: Any = buf[pos + 2 : end].decode("utf-8")
            pos = end
        elif code == 0x82:  # double
            value = _double_at(buf, pos + 1)[0]
            pos += 9
        elif code == 0x55 or code == 0x54:  # smalllong, smallint
            value = buf[pos + 1]
            if value > 127:
                value -= 256
            pos += 2
        else:
            value, pos = _read_scalar(buf, pos)
        try:
            mapping[key] = value
        except TypeError:  # an unhashable key: let proton say what it makes of it
            raise Unsupported("unhashable map key") from None
    if len(mapping) != pairs:
        raise Unsupported("a map key repeats")
    return mapping, pos


def _read_items(buf: bytes, pos: int, count: int) -> tuple[list[Any], int]:
    """The ``count`` items of a list or map from ``pos``, the scalars of a publication entry
    (strings, numbers, null) read in line rather than by a call to :func:`_read` each."""
    items: list[Any] = []
    append = items.append
    for _ in range(count):
        code = buf[pos]
        if code == 0xA1 or code == 0xA3:  # str8, sym8
            end = pos + 2 + buf[pos + 1]
            append(buf[pos + 2 : end].decode("utf-8"))
            pos = end
        elif code == 0x82:  # double
            append(_double_at(buf, pos + 1)[0])
            pos += 9
        elif code == 0x55 or code == 0x54:  # smalllong, smallint
            value = buf[pos + 1]
            append(value - 256 if value > 127 else value)
            pos += 2
        elif code == 0x53 or code == 0x52:  # smallulong, smalluint
            append(buf[pos + 1])
            pos += 2
        elif code == 0x80:  # ulong
            append(_ulong_at(buf, pos + 1)[0])
            pos += 9
        elif code == 0x81:  # long
            append(_long_at(buf, pos + 1)[0])
            pos += 9
        elif code == 0x40:
            append(None)
            pos += 1
        else:
            value, pos = _read(buf, pos)
            append(value)
    return items, pos


def _read_other(buf: bytes, pos: int, code: int) -> tuple[Any, int]:
    if code in _CONSTANTS:
        return ([] if code == 0x45 else _CONSTANTS[code]), pos
    if code == 0xA0:
        n = buf[pos]
        return bytes(buf[pos + 1 : pos + 1 + n]), pos + 1 + n
    if code == 0xB1 or code == 0xB3:
        n = _u32(buf, pos)[0]
        return buf[pos + 4 : pos + 4 + n].decode("utf-8"), pos + 4 + n
    if code == 0xB0:
        n = _u32(buf, pos)[0]
        return bytes(buf[pos + 4 : pos + 4 + n]), pos + 4 + n
    if code == 0x56:
        return buf[pos] != 0, pos + 1
    if code == 0x98:
        return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    if code == 0x73:
        return chr(_u32(buf, pos)[0]), pos + 4
    raise Unsupported(f"AMQP type code 0x{code:02x}")


def _read_list_keeping_items(data: bytes, pos: int) -> tuple[list[Any], list[int], int]:
    """The list at ``pos`` (list8 or list32), where each item begins (then where the last
    ends), the end."""
    if data[pos] == 0xC0:
        end = pos + 2 + data[pos + 1]
        count, pos = data[pos + 2], pos + 3
    else:
        end = pos + 5 + _u32(data, pos + 1)[0]
        count, pos = _u32(data, pos + 5)[0], pos + 9
    values: list[Any] = []
    starts = [pos]
    for _ in range(count):
        if data[pos] == 0xC0 and data[pos + 2] == 8:
            value, pos = _read_entry(data, pos)
        else:
            value, pos = _read(data, pos)
        values.append(value)
        starts.append(pos)
    if pos != end:
        raise Unsupported("compound size does not match its items")
    return values, starts, pos


def _read_entry(buf: bytes, start: int) -> tuple[Any, int]:
    """A list8 of 8 items at ``start`` shaped like a publication entry (WIRE.md: ptype,
    timestamp, source, wire number, bits, topic, fields, permtoken), read in straight line;
    anything shaped otherwise is read by :func:`_read`, which gives the same value."""
    pos = start + 3
    if buf[pos] != 0xA1:  # ptype
        return _read(buf, start)
    end = pos + 2 + buf[pos + 1]
    ptype = buf[pos + 2 : end].decode("utf-8")
    code = buf[end]  # timestamp
    if code == 0x82:
        stamp = _double_at(buf, end + 1)[0]
        pos = end + 9
    elif code == 0x40:
        stamp, pos = None, end + 1
    else:
        return _read(buf, start)
    if buf[pos] != 0xA1:  # source
        return _read(buf, start)
    end = pos + 2 + buf[pos + 1]
    source = buf[pos + 2 : end].decode("utf-8")
    code = buf[end]  # wire number
    if code == 0x80:
        wire = _ulong_at(buf, end + 1)[0]
        pos = end + 9
    elif code == 0x53:
        wire, pos = buf[end + 1], end + 2
    else:
        return _read(buf, start)
    if buf[pos] != 0x55:  # bits
        return _read(buf, start)
    bits = buf[pos + 1]
    if bits > 127:
        bits -= 256
    pos += 2
    if buf[pos] != 0xA1:  # topic
        return _read(buf, start)
    end = pos + 2 + buf[pos + 1]
    topic = buf[pos + 2 : end].decode("utf-8")
    code = buf[end]  # fields
    if code == 0xC1:
        count = buf[end + 2]
        if count % 2:
            raise Unsupported("a map needs an even number of items")
        fields, pos = _read_pairs(buf, end + 3, count // 2)
        if pos != end + 2 + buf[end + 1]:
            raise Unsupported("compound size does not match its items")
    else:
        fields, pos = _read(buf, end)
    code = buf[pos]  # permtoken
    if code == 0x40:
        token, pos = None, pos + 1
    else:
        token, pos = _read(buf, pos)
    if pos != start + 2 + buf[start + 1]:
        raise Unsupported("compound size does not match its items")
    return [ptype, stamp, source, wire, bits, topic, fields, token], pos
