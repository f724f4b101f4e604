"""Regular publication entries read by their byte layout, one ``struct`` call each (WIRE.md
``PUBLICATIONS``).

The entries of a transfer are mostly laid out alike: the same type codes, the same string
lengths, the same field names, only the values differ (a replay of one source: the numbers,
the times, the field values). An :class:`EntryLayout` is one such layout, learnt from an
entry: a ``struct`` format that unpacks every byte of the entry at once, the bytes that must
be equal for another entry to share it (every type code, size, count, string length and field
name) and a function that makes the entry's values of the unpacked tuple.

Reading an entry by its layout follows exactly the steps :func:`~seqrepair.amqp.wire.batchread`
reads it by: each of those steps chooses what it reads by a type code or a length, and the
layout compares all of them, so an entry that matches them is read to the same values (the
strings decoded as UTF-8 the same way, raising the same way). An entry that does not match
is read the step-by-step way by the caller (and teaches it a new layout).
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from seqrepair.amqp.wire.framing import PTYPE_BY_NAME
from seqrepair.amqp.wire.rawamqp import _u32

_NUMBERS = {  # type code -> struct format of its value (rawamqp's _fixed)
    0x50: "B", 0x51: "b", 0x52: "B", 0x53: "B", 0x54: "b", 0x55: "b", 0x60: "H", 0x61: "h",
    0x70: "I", 0x71: "i", 0x72: "f", 0x80: "Q", 0x81: "q", 0x82: "d",
}
_CONSTANTS = {0x40: "None", 0x41: "True", 0x42: "False", 0x43: "0", 0x44: "0"}
MAX_LAYOUTS = 256
"""Layouts kept (and layouts seen once, apart); past it they are forgotten and learnt again."""
MAX_LAYOUT_FIELDS = 32
"""Most fields of an entry a layout covers; an entry with more is read step by step. A
layout keeps a mark, a code and the name of each field, its format and compiled function
grow with them (~800 bytes a field): unbounded, MAX_LAYOUTS layouts of entries of thousands
of fields held gigabytes. Bounded, a layout holds ~50 KB at most, ~135 KB with its run
reader (:mod:`.entryrun`: its regular expression, freed with it): MAX_LAYOUTS of 32 fields of
~200-byte names, ~35 MB."""


class Parts(NamedTuple):
    """Where an entry's values are in a layout's unpacked tuple: the index of each (None: a
    null timestamp or permission token), the field names and the expression making each
    field's value (of ``t``, the tuple, as in the layout's ``values``)."""

    ptype: int
    stamp: int | None
    source: int
    wire: int
    bits: int
    topic: int
    names: tuple[str, ...]
    fields: tuple[str, ...]
    token: int | None


class _NoLayout(Exception):
    """The entry is not of a shape a layout covers."""


class EntryLayout:
    """One layout of regular 8-element publication entries (see the module)."""

    __slots__ = ("expected", "fmt", "marked", "marks", "parts", "run", "size", "unpack",
                 "values")

    def __init__(self, fmt: str, marks: list[int], expected: tuple[Any, ...],
                 values: Callable[[tuple[Any, ...]], tuple[Any, ...]],
                 parts: Parts | None = None) -> None:
        compiled = struct.Struct(fmt)
        self.fmt = fmt
        self.marked = dict(zip(marks, expected, strict=True))
        """The index of each value that must match, in the unpacked tuple: its value."""
        self.parts = parts
        """Where the entry's values are in the unpacked tuple (:class:`Parts`)."""
        self.run: Any = None
        """How runs of entries of this layout are read at once (:mod:`.entryrun`, made
        there at the first run), or False when they are not."""
        self.size: int = compiled.size
        """The bytes of an entry of this layout."""
        self.unpack = compiled.unpack_from
        self.marks = operator.itemgetter(*marks)
        self.expected = expected
        self.values = values
        """The unpacked tuple -> (ptype, timestamp, source, wire number, bits, topic, fields,
        permtoken): a :class:`~seqrepair.core.messages.PublishType`, the strings decoded."""

    def read(self, buf: bytes, pos: int) -> tuple[Any, ...] | None:
        """The values of the entry at ``pos`` when it is of this layout, else None."""
        try:
            got = self.unpack(buf, pos)
        except struct.error:  # fewer bytes left than an entry of this layout
            return None
        if self.marks(got) != self.expected:
            return None
        return self.values(got)


_layouts: dict[tuple[str, tuple[Any, ...]], EntryLayout] = {}
_seen: set[tuple[str, tuple[Any, ...]]] = set()  # once: compiled when seen again


def layout_at(buf: bytes, pos: int) -> EntryLayout | None:
    """The layout of the entry at ``pos``, or None when it is not a regular publication entry
    of a shape layouts cover, or a layout seen for the first time (compiling one costs
    about as much as reading ten entries step by step: a layout is compiled when it comes
    again). None: the entry is read step by step."""
    try:
        fmt, marks, expected, source, names, parts = _describe(buf, pos)
    except (_NoLayout, IndexError, UnicodeDecodeError, struct.error):
        return None
    key = (fmt, expected)
    layout = _layouts.get(key)
    if layout is None:
        if key not in _seen:
            if len(_seen) >= MAX_LAYOUTS:
                _seen.clear()
            _seen.add(key)
            return None
        if len(_layouts) >= MAX_LAYOUTS:
            _layouts.clear()
        namespace: dict[str, Any] = {"PTYPE": PTYPE_BY_NAME}
        namespace.update((f"K{i}", name) for i, name in enumerate(names))
        exec(source, namespace)  # our own text: tuple indices and fixed names
        layout = _layouts[key] = EntryLayout(fmt, marks, expected, namespace["values"], parts)
    return layout


def _describe(
    buf: bytes, start: int
) -> tuple[str, list[int], tuple[Any, ...], str, list[str], Parts]:
    """Walk the entry at ``start``: its struct format, the indices of the values that must
    match, those values, the source of the function making the entry's values, the field
    names it refers to (``K0``, ``K1``...) and where the values are (:class:`Parts`)."""
    fmt: list[str] = [">"]
    marks: list[int] = []
    expected: list[Any] = []
    names: list[str] = []

    def mark(char: str, value: Any) -> None:
        marks.append(len(fmt) - 1)
        expected.append(value)
        fmt.append(char)

    def value(char: str) -> str:
        fmt.append(char)
        return f"t[{len(fmt) - 2}]"

    pos = start

    def string(nonempty: bool, allowed: tuple[int, ...] = (0xA1,)) -> str:
        nonlocal pos
        code = buf[pos]
        if code not in allowed:
            raise _NoLayout
        mark("B", code)
        if code in (0xA1, 0xA3):
            size, pos = buf[pos + 1], pos + 2
            mark("B", size)
        else:  # str32, sym32
            size, pos = _u32(buf, pos + 1)[0], pos + 5
            mark("I", size)
        if nonempty and not size:
            raise _NoLayout
        pos += size
        return value(f"{size}s") + ".decode('utf-8')"

    def scalar() -> str:
        nonlocal pos
        code = buf[pos]
        if code in (0xA1, 0xA3, 0xB1, 0xB3):
            return string(False, (0xA1, 0xA3, 0xB1, 0xB3))
        mark("B", code)
        pos += 1
        if code in _CONSTANTS:
            return _CONSTANTS[code]
        char = _NUMBERS.get(code)
        if char is None:
            raise _NoLayout
        pos += struct.calcsize(">" + char)
        return value(char)

    def compound(small: int) -> tuple[int, int]:
        """A list (0xC0/0xD0) or map (0xC1/0xD1) header at ``pos``, its size and count
        marked: where it ends and its count."""
        nonlocal pos
        code = buf[pos]
        if code == small:
            mark("B", code)
            mark("B", buf[pos + 1])
            mark("B", buf[pos + 2])
            end, count, pos = pos + 2 + buf[pos + 1], buf[pos + 2], pos + 3
        elif code == small + 0x10:
            mark("B", code)
            mark("I", _u32(buf, pos + 1)[0])
            mark("I", _u32(buf, pos + 5)[0])
            end, count, pos = pos + 5 + _u32(buf, pos + 1)[0], _u32(buf, pos + 5)[0], pos + 9
        else:
            raise _NoLayout
        return end, count

    end, count = compound(0xC0)
    if count != 8:
        raise _NoLayout
    ptype = f"PTYPE[{string(True)}]"
    if buf[pos] == 0x82:
        mark("B", 0x82)
        stamp = value("d")
        pos += 9
    elif buf[pos] == 0x40:
        mark("B", 0x40)
        stamp = "None"
        pos += 1
    else:
        raise _NoLayout
    source = string(True)
    code = buf[pos]
    if code not in (0x80, 0x53):  # the wire number: ulong, smallulong
        raise _NoLayout
    mark("B", code)
    wire = value("Q" if code == 0x80 else "B")
    pos += 9 if code == 0x80 else 2
    if buf[pos] != 0x55 or not 2 <= buf[pos + 1] <= 64:  # bits: smalllong 2..64
        raise _NoLayout
    mark("B", 0x55)
    bits = value("B")  # the caller checks 2..64 of every entry
    pos += 2
    topic = string(True)
    fields_end, items = compound(0xC1)
    if items % 2 or items // 2 > MAX_LAYOUT_FIELDS:
        raise _NoLayout
    keys: list[str] = []
    pairs: list[str] = []
    for _ in range(items // 2):
        code = buf[pos]
        if code not in (0xA1, 0xA3):  # a field name: str8 or sym8, compared whole
            raise _NoLayout
        size = buf[pos + 1]
        mark("B", code)
        mark("B", size)
        mark(f"{size}s", bytes(buf[pos + 2 : pos + 2 + size]))
        keys.append(bytes(buf[pos + 2 : pos + 2 + size]).decode("utf-8"))
        pos += 2 + size
        pairs.append(f"K{len(names)}: {scalar()}")
        names.append(keys[-1])
    if len(set(keys)) != len(keys) or pos != fields_end:
        raise _NoLayout
    if buf[pos] == 0x40:
        mark("B", 0x40)
        token = "None"
        pos += 1
    else:
        token = string(True)
    if pos != end:
        raise _NoLayout
    if struct.calcsize("".join(fmt)) != end - start:
        raise _NoLayout

    def at(expression: str) -> int | None:  # "t[12].decode('utf-8')" -> 12; "None" -> None
        found = re.match(r"t\[(\d+)\]", expression)
        return None if found is None else int(found.group(1))

    def index(expression: str) -> int:
        found = at(expression)
        assert found is not None  # a value always, not a constant
        return found

    parts = Parts(index(ptype[len("PTYPE["):]), at(stamp), index(source), index(wire),
                  index(bits), index(topic), tuple(names),
                  tuple(p.split(": ", 1)[1] for p in pairs), at(token))
    source_text = (
        "def values(t):\n"
        f"    return ({ptype}, {stamp}, {source}, {wire}, {bits}, {topic}, "
        f"{{{', '.join(pairs)}}}, {token})\n"
    )
    return "".join(fmt), marks, tuple(expected), source_text, names, parts
