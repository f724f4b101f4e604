"""Runs of publication entries of one layout read at once (WIRE.md ``PUBLICATIONS``).

A transfer from a component is mostly one run of entries laid out alike
(:mod:`~seqrepair.amqp.wire.entrylayout`): one source, consecutive numbers, a few topics. Read
entry by entry, each costs a ``struct`` call, a comparison of its marks, a call to unwrap its
number, one to check and one to make its publication: microseconds of Python per entry. Here a
run is read the way a column store reads a table:

* one regular expression (the layout's marks as literal bytes, its values as any bytes)
  finds how many entries from here are of the layout, in C;
* one ``struct`` call unpacks the values alone of every entry (the marks skipped), a slice
  of that tuple each value's column;
* what :func:`~seqrepair.core.messages.decoded_publication` checks per publication is checked
  per column (the distinct topics, sources, publish types and widths: a handful), the
  numbers unwrapped for the run at once (:meth:`~seqrepair.amqp.wire.framing.SourceUnwrapper.
  unwrap_run`, as one call each would);
* the publications are made a slot at a time for the whole run (``map`` of the slot's setter:
  no Python frame per publication).

Nothing else changes: the publications, the unwrapper's state and the entries' bytes are
those reading each entry by its layout gives (``tests/amqp/test_entryrun.py`` compares them on
random transfers). What a column check doubts (several sources, widths or publish types of
no name, a topic that is not one, an infinite time) is not decided here: :func:`read_run`
says no, having changed nothing, and the caller reads those entries one by one, which
decides (or refuses) as ever.
"""

from __future__ import annotations

import re
import struct
from collections import deque
from collections.abc import Callable, Iterable
from itertools import repeat
from math import isfinite
from types import MappingProxyType
from typing import Any

from seqrepair.amqp.wire.entrylayout import EntryLayout, Parts
from seqrepair.amqp.wire.framing import PTYPE_BY_NAME
from seqrepair.core.errors import InvalidMessageError, SeqRepairError
from seqrepair.core.messages import Publication
from seqrepair.core.topics import validate_topic

MIN_RUN = 8
"""Entries of one layout in a row below which they are read one by one (a run's fixed cost,
a few entries' worth, is not worth it)."""
MAX_TOPICS = 4096
"""Topics remembered as checked (their bytes -> the str); past it they are forgotten."""

MAX_RUN = 512
"""Entries read as one run at most (a longer run is read as several)."""
MAX_FLAT_VALUES = 1 << 16
"""Values the ``struct`` formats of runs kept cover at most (a run of N entries of W values
each has a format of N * W, ~25 bytes each: this bounds them to ~2 MB); past it they are
forgotten (and made again: ~50 us for 256 entries)."""

_MAX_WIRE = (1 << 64) - 1
_PTYPES = {name.encode("utf-8"): ptype for name, ptype in PTYPE_BY_NAME.items()}
_topics: dict[bytes, str] = {}  # the bytes of topics a Publication takes: the str
_flat: dict[tuple[str, int], Callable[[bytes, int], tuple[Any, ...]]] = {}  # (values, N) ->
_flat_values = 0  # the values _flat's formats cover
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend
_new = object.__new__
# The run readers' patterns compiled without the ``re`` module's cache: ``re.compile`` also
# keeps each pattern there (512 of them, process-wide), past its layout's forgetting (~75 KB
# a pattern of 32 long field names: ~38 MB a peer's distinct layouts could pin) and pushing
# every other pattern of the process out of it. ``re._compiler.compile`` is what
# ``re.compile`` calls after its cache lookup (Python 3.11+, which this package requires).
_compile: Callable[[bytes, int], re.Pattern[bytes]] = getattr(
    getattr(re, "_compiler", None), "compile", re.compile)
_SETTERS = tuple(Publication.__dict__[name].__set__ for name in (
    "topic", "source", "source_seq", "ptype", "fields", "link_seq", "permtoken", "timestamp",
    "retransmit"))


class RunReader:
    """How runs of one layout's entries are read: the regular expression matching a run,
    the ``struct`` format of an entry's values alone (its marks skipped), where each value is
    in it and the function making the entries' fields of the values' columns."""

    __slots__ = ("count", "fields", "parts", "size", "values", "width")

    def __init__(self, layout: EntryLayout, parts: Parts) -> None:
        pattern: list[bytes] = []
        values: list[str] = []
        where: dict[int, int] = {}  # index in the layout's tuple -> index in a row
        for index, code in enumerate(re.findall(r"\d*[a-zA-Z?]", layout.fmt[1:])):
            size = struct.calcsize(">" + code)
            if index in layout.marked:
                pattern.append(re.escape(struct.pack(">" + code, layout.marked[index])))
                values.append(f"{size}x")
            else:
                pattern.append(b"." if size == 1 else b".{%d}" % size)
                where[index] = len(where)
                values.append(code)
        # possessive: one layout has one length, nothing to backtrack into
        self.count = _compile(b"(?:" + b"".join(pattern) + b")*+", re.DOTALL).match
        self.values = "".join(values)
        self.width = len(where)
        """Values per entry."""
        self.size = layout.size
        self.parts = Parts(
            where[parts.ptype], None if parts.stamp is None else where[parts.stamp],
            where[parts.source], where[parts.wire], where[parts.bits], where[parts.topic],
            parts.names, (), None if parts.token is None else where[parts.token])
        # the fields of every entry of the run, of the columns: {K0: v0, K1: v1.decode()...}
        names: list[str] = []
        columns: list[str] = []
        pairs: list[str] = []
        for i, field in enumerate(parts.fields):
            found = re.search(r"t\[(\d+)\]", field)
            if found is not None:
                names.append(f"v{i}")
                columns.append(f"c[{where[int(found.group(1))]}]")
                field = field.replace(found.group(0), f"v{i}")
            pairs.append(f"K{i}: {field}")
        loop = (f"for {', '.join(names)}, in zip({', '.join(columns)})" if names
                else "for _ in range(count)")
        namespace: dict[str, Any] = {f"K{i}": name for i, name in enumerate(parts.names)}
        exec(f"def fields(c, count):\n    return [{{{', '.join(pairs)}}} {loop}]\n",
             namespace)
        self.fields: Callable[[list[tuple[Any, ...]], int], list[dict[str, Any]]] = (
            namespace["fields"])

    def columns(self, buf: bytes, pos: int, count: int) -> list[tuple[Any, ...]]:
        """The values of the ``count`` entries from ``pos``, a tuple of each value's."""
        flat = _unpacker(self.values, count, self.width)(buf, pos)
        width = self.width
        return [flat[i::width] for i in range(width)]

    def entries(self, buf: bytes, pos: int, count: int) -> tuple[bytes, ...]:
        """The bytes of each of the ``count`` entries from ``pos`` (one ``struct`` call)."""
        return _unpacker(f"{self.size}s", count, 1)(buf, pos)


def _unpacker(unit: str, count: int, width: int) -> Callable[[bytes, int], tuple[Any, ...]]:
    """``unpack_from`` of ``count`` times the format ``unit`` (of ``width`` values), kept
    while the formats kept cover at most :data:`MAX_FLAT_VALUES` values."""
    global _flat_values
    key = (unit, count)
    unpack = _flat.get(key)
    if unpack is None:
        if _flat_values + count * width > MAX_FLAT_VALUES:
            _flat.clear()
            _flat_values = 0
        _flat_values += count * width
        unpack = _flat[key] = struct.Struct(">" + unit * count).unpack_from
    return unpack


def reader_of(layout: EntryLayout) -> RunReader | None:
    """``layout``'s run reader (made once), or None when its runs are read one by one (a
    field name the layout holds is empty: a publication refuses it, one by one)."""
    run = layout.run
    if run is None:
        parts = layout.parts
        run = layout.run = (False if parts is None or not all(parts.names)
                            else RunReader(layout, parts))
    return run or None


def run_length(reader: RunReader, buf: bytes, pos: int, most: int) -> int:
    """How many entries from ``pos`` on, at most ``most``, are of ``reader``'s layout."""
    found = reader.count(buf, pos, pos + most * reader.size)
    return 0 if found is None else (found.end() - pos) // reader.size


def read_run(
    reader: RunReader, buf: bytes, pos: int, count: int, unwrapper: Any,
    link_seq: int | None, again: bool, pubs: list[Publication], items: list[bytes] | None,
) -> bool:
    """Read the ``count`` entries of ``reader``'s layout from ``pos`` (:func:`run_length` said
    so) onto ``pubs`` (and their bytes onto ``items``), ``link_seq`` the first one's link
    number (None: none), ``again`` their retransmit flag: True. False, nothing changed: they
    are read one by one (see the module). Raises as reading them one by one raises."""
    columns = reader.columns(buf, pos, count)
    parts = reader.parts
    ptypes = set(columns[parts.ptype])
    if not ptypes <= _PTYPES.keys():
        return False  # a name of none: one by one, it raises
    sources = set(columns[parts.source])
    widths = set(columns[parts.bits])
    if len(sources) != 1 or len(widths) != 1:
        return False
    (bits,) = widths
    if not 2 <= bits <= 64:
        return False
    source = next(iter(sources)).decode("utf-8")
    stamps: Any = None
    if parts.stamp is not None:
        stamps = columns[parts.stamp]
        if not all(map(isfinite, stamps)):
            return False
    topics = columns[parts.topic]
    names = {}  # this run's (another thread may forget _topics meanwhile)
    for topic in set(topics):
        name = _topics.get(topic) or _check_topic(topic)
        if name is None:
            return False
        names[topic] = name
    fields = reader.fields(columns, count)  # decodes its strings: raises as one by one would
    tokens: Any = None
    if parts.token is not None:
        tokens = [token.decode("utf-8") for token in columns[parts.token]]
    wires = columns[parts.wire]
    # the numbers last: nothing above changed anything, nothing below says no
    numbers = unwrapper.unwrap_run(source, wires, bits)
    if numbers[0] < 1 or max(numbers) > _MAX_WIRE:  # as decoded_publication checks them
        raise InvalidMessageError("a source number past the space", expected=(1, _MAX_WIRE))
    made = list(map(_new, repeat(Publication, count)))
    topic_, source_, seq_, ptype_, fields_, link_, token_, stamp_, again_ = _SETTERS
    _consume(map(topic_, made, map(names.__getitem__, topics)))
    _consume(map(source_, made, repeat(source, count)))
    _consume(map(seq_, made, numbers))
    if len(ptypes) == 1:
        _consume(map(ptype_, made, repeat(_PTYPES[next(iter(ptypes))], count)))
    else:
        _consume(map(ptype_, made, map(_PTYPES.__getitem__, columns[parts.ptype])))
    _consume(map(fields_, made, map(MappingProxyType, fields)))
    _consume(map(link_, made, repeat(None, count) if link_seq is None
                 else range(link_seq, link_seq + count)))
    _consume(map(token_, made, repeat(None, count) if tokens is None else tokens))
    _consume(map(stamp_, made, repeat(None, count) if stamps is None else stamps))
    _consume(map(again_, made, repeat(again, count)))
    pubs += made
    if items is not None:
        items += reader.entries(buf, pos, count)
    return True


def _check_topic(topic: bytes) -> str | None:
    """``topic`` decoded when it is one a publication takes (remembered), else None."""
    try:
        text = topic.decode("utf-8")
        validate_topic(text)
    except (UnicodeDecodeError, SeqRepairError):
        return None
    if len(_topics) >= MAX_TOPICS:
        _topics.clear()
    _topics[topic] = text
    return text
