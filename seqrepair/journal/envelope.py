"""A batch of publications as the append script takes it: JSON text of one row per publication
``[number, topic, ptype, fields JSON text, permtoken, ts, wire]`` (:mod:`.format` says what
each is; ``scripts.APPEND`` reads them), or, for a batch of :data:`PACK_MIN` consecutive
publications or more, that text cut into packed rows (:func:`encode_append`).

The ``json`` encoder made each publication's fields text by a call of its own (the encoder's
set-up alone is ~0.35 us a call, as much as encoding two numbers), then the rows. Here the
fields of the whole batch are encoded by one call, as a list, and that text is cut into the
publications' texts at the ``},{`` between them: a list's text is its items' texts joined by
``,``, so each piece is byte for byte what a call of its own gives, as long as ``},{`` is
found nowhere else (counted: one fewer than the publications). Anything else (a name or value
holding ``},{``, fields that are not a publication's own, a value the encoder refuses) is
encoded publication by publication as before, which raises as before
(``tests/journal/test_envelope.py`` compares both on random batches).

Where orjson is installed (the ``redis`` extra has it) it writes both texts, several times
faster than ``json``, when it is sure to write what ``json`` writes: the rows (strings and
nulls only, escaped alike) always, the fields when every value is a str, int, float, bool or
None and its text holds no ``null`` (orjson writes NaN and infinities as ``null``; ``json``
refuses them), no digit before ``e-`` and no ``0.0000`` (a float below 1e-4, which ``repr``
writes ``1e-05`` and orjson ``0.00001``), and the times under the same conditions (one call
for the batch: ``repr`` costs ~0.5 us a float). Anything orjson refuses (a name that is not a
str, an int past 64 bits, a lone surrogate) and anything else goes the ``json`` way, as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import Any

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication
from seqrepair.journal.format import check_seq, encode_fields, encode_json, space

_BETWEEN = "},{"
_CUT = "}\x00{"

_dumps: Callable[[Any], bytes] | None
try:
    from orjson import dumps as _dumps
except ImportError:  # pragma: no cover - an install without the redis extra
    _dumps = None
if _dumps is not None and _dumps([1e16, -1.5e300, 1e22]) != b"[1e+16,-1.5e+300,1e+22]":
    _dumps = None  # an orjson before 3.11.7 (no "+" in an exponent): json's text is the format

_PLAIN = frozenset((str, int, float, bool, type(None)))
_EXPONENT = re.compile(rb"[0-9]e-")

PACK_MIN = 8
"""A batch of at least this many consecutive publications is journaled as packed rows
(:mod:`.format`): one stream entry per row instead of one per publication. The append script's
cost is mostly per entry (an ``XADD`` and the envelope's decoding), a few microseconds each;
a row costs about what one publication did. Fewer than this gain little and make a one-number
read decode the whole row."""
ROW_MOST = 64
"""Publications in one packed row at most: a read of one number decodes its whole row."""
ROW_BYTES = 64 * 1024
"""A packed row's envelope text in bytes at most, unless it holds one publication (a large
publication is a row of its own)."""


def encode_append(
    publications: Sequence[Publication], bits: int, source: str, *, increasing: bool = False
) -> bytes:
    """What the append script takes for one batch of ``source``: :func:`encode_envelope`'s
    text, or, for :data:`PACK_MIN` or more publications numbered consecutively, the packed
    rows text ``P<first> <last>\\n`` then, per row of at most :data:`ROW_MOST` publications
    and :data:`ROW_BYTES` bytes, ``<first> <last> <bytes>\\n`` and that row's envelope.
    Raises as :func:`encode_envelope` does."""
    count = len(publications)
    if count < PACK_MIN:
        return encode_envelope(publications, bits, source, increasing=increasing)
    first = publications[0].source_seq
    last = publications[-1].source_seq
    if not (type(first) is int and type(last) is int and last - first == count - 1 and all(
            publications[at].source_seq == publications[at - 1].source_seq + 1
            for at in range(ROW_MOST, count, ROW_MOST))):  # rows join (each checks its own)
        return encode_envelope(publications, bits, source, increasing=increasing)
    parts = [b"P%d %d\n" % (first, last)]
    for start in range(0, count, ROW_MOST):
        _rows(publications[start : start + ROW_MOST], bits, source, parts, increasing)
    return b"".join(parts)


def _rows(publications: Sequence[Publication], bits: int, source: str, parts: list[bytes],
          increasing: bool) -> None:
    """Append the packed rows of consecutive ``publications`` to ``parts``: one row, or the
    two halves' rows when its text is over :data:`ROW_BYTES` (``increasing``: what a
    publication out of place is told, as :func:`encode_envelope` tells it)."""
    text = encode_envelope(publications, bits, source, increasing=increasing)
    if len(text) > ROW_BYTES and len(publications) > 1:
        half = len(publications) // 2
        _rows(publications[:half], bits, source, parts, increasing)
        _rows(publications[half:], bits, source, parts, increasing)
        return
    parts.append(b"%d %d %d\n" % (publications[0].source_seq, publications[-1].source_seq,
                                   len(text)))
    parts.append(text)


def encode_envelope(
    publications: Sequence[Publication], bits: int, source: str, *, increasing: bool = False
) -> bytes:
    """The append script's JSON text of ``publications`` (one batch of ``source``: numbers
    consecutive, or only increasing with ``increasing``), UTF-8; raises InvalidMessageError
    for a batch or a publication the journal does not take."""
    modulus = space(bits).max
    first = publications[0].source_seq
    check_seq(first, "source_seq", low=1)
    check_seq(publications[-1].source_seq if increasing else first + len(publications) - 1,
              "source_seq", low=1)
    # consecutive numbers are also increasing ones (the same text); a relay's batch that
    # skips numbers (a filtered feed) cannot be the column way's: not read for it
    if _dumps is not None and (
            not increasing or publications[-1].source_seq - first == len(publications) - 1):
        usual = _by_columns(publications, source, first, modulus)
        if usual is not None:
            return usual
    rows: list[Any] = []
    append = rows.append
    copies: list[dict[str, Any]] = []
    copy = copies.append
    previous = first - 1
    proxy = MappingProxyType
    together = True  # every publication's fields its own (a view of a dict)
    for offset, pub in enumerate(publications):
        seq = pub.source_seq
        if pub.source != source or (seq <= previous if increasing else seq != first + offset):
            for before in publications[:offset]:  # as before: what came first raises first
                _fields_text(before.fields)
            raise InvalidMessageError(
                "a batch holds increasing numbers of one source" if increasing
                else "a batch holds consecutive numbers of one source",
                expected=(source, previous + 1),
                got=(pub.source, seq),
            )
        previous = seq
        ts = pub.timestamp
        fields = pub.fields
        number = str(seq)
        if together and type(fields) is proxy:
            copy(fields.copy())
        else:
            together = False
        append([
            number,
            pub.topic,
            pub.ptype._value_,  # the enum's own value: no descriptor call
            None,  # the fields text, below
            pub.permtoken,
            None if ts is None else repr(ts if type(ts) is float else float(ts)),
            number if seq <= modulus else str((seq - 1) % modulus + 1),
        ])
    texts = _together(copies) if together else None
    if texts is None:
        texts = [_fields_text(pub.fields) for pub in publications]
    for row, text in zip(rows, texts, strict=True):
        row[3] = text
    return _rows_text(rows)


def _rows_text(rows: list[Any]) -> bytes:
    """The envelope's text of ``rows`` (each a sequence of strings and nulls), UTF-8: by
    orjson where installed (the same text as ``json``'s for these), else, and for what orjson
    refuses (a lone surrogate), by ``json``, which raises InvalidMessageError for it."""
    if _dumps is not None:
        try:
            return _dumps(rows)
        except TypeError:  # a lone surrogate: json's text fails to encode, below
            pass
    try:
        encoded: str = encode_json(rows)
        return encoded.encode("utf-8")
    except (UnicodeEncodeError, ValueError) as exc:
        raise InvalidMessageError(f"publication text is not valid UTF-8: {exc}") from exc


_COLUMNS = attrgetter("source", "source_seq", "topic", "ptype", "fields", "permtoken",
                      "timestamp")
_VALUE = attrgetter("_value_")  # the enum's own value: no descriptor call
_STAMPS = frozenset((float, type(None)))


def _by_columns(publications: Sequence[Publication], source: str, first: int, modulus: int
                ) -> bytes | None:
    """:func:`encode_envelope`'s text of the usual batch (numbers ``first``.. of ``source``,
    each publication's own fields, times floats or None), read a column at a time; None for
    any other (the row by row way then writes it, or raises)."""
    sources, seqs, topics, ptypes, fields, permtokens, stamps = zip(
        *map(_COLUMNS, publications), strict=True)
    count = len(seqs)
    if (sources.count(source) != count or list(seqs) != list(range(first, first + count))
            or set(map(type, fields)) != {MappingProxyType}
            or not set(map(type, stamps)) <= _STAMPS):
        return None
    texts = _together(list(map(MappingProxyType.copy, fields)))
    if texts is None:  # as the row by row way does, raising as it would
        texts = [_fields_text(view) for view in fields]
    numbers = list(map(str, seqs))
    wires = numbers if first + count - 1 <= modulus else [
        str((seq - 1) % modulus + 1) for seq in seqs]
    times = (_stamp_texts(stamps) if None not in stamps
             else [None if ts is None else repr(ts) for ts in stamps])
    return _rows_text(list(zip(numbers, topics, map(_VALUE, ptypes), texts, permtokens, times,
                               wires, strict=True)))


def _stamp_texts(stamps: Sequence[float]) -> list[str]:
    """Each of ``stamps``'s ``repr``: orjson's text where it is surely ``repr``'s (one call
    for the batch: ``repr`` is ~0.5 us a float), else ``repr`` of each."""
    text = _dumps(stamps)  # type: ignore[misc]  # only called where it is set
    if _unlike_json(text):
        return list(map(float.__repr__, stamps))
    return text[1:-1].decode().split(",")


def _unlike_json(text: bytes) -> bool:
    """Whether orjson's ``text`` may hold what ``json`` (``repr`` of a float) writes otherwise
    (see the module); ``in`` first: a regular expression's search costs more than encoding."""
    return b"null" in text or b"0.0000" in text or (
        b"e-" in text and _EXPONENT.search(text) is not None)


def _together(copies: list[dict[str, Any]]) -> list[str] | None:
    """Each of ``copies``'s JSON text, encoded by one call; None when they cannot be cut
    apart for sure (or the encoder refuses one: each is then encoded by itself)."""
    text = _fast_text(copies) if _dumps is not None else None
    if text is None:
        try:
            text = encode_json(copies)
        except (TypeError, ValueError, RecursionError):
            return None
    count = len(copies)
    body = text[1:-1]
    if count == 1:
        return [body]
    if body.count(_BETWEEN) != count - 1:
        return None  # "},{" inside a name or a value too
    # cut between the braces: a control character is escaped inside JSON text, never bare
    return body.replace(_BETWEEN, _CUT).split(_CUT[1])


def _fast_text(copies: list[dict[str, Any]]) -> str | None:
    """orjson's text of ``copies`` when it is surely ``json``'s (see the module), else None."""
    if set(map(type, copies)) != {dict} or not set(
            map(type, chain.from_iterable(map(dict.values, copies)))) <= _PLAIN:
        return None  # a view of another mapping: the json way, which decides
    try:
        out = _dumps(copies)  # type: ignore[misc]  # only called where it is set
    except TypeError:  # orjson.JSONEncodeError: a name not a str, an int past 64 bits, ...
        return None
    return None if _unlike_json(out) else out.decode()


def _fields_text(fields: Any) -> str:
    """One publication's fields text, by a call of its own (raises as it always did)."""
    try:
        if type(fields) is MappingProxyType:
            text: str = encode_json(fields.copy())
            return text
        return encode_fields(fields)
    except (TypeError, ValueError, RecursionError):
        return encode_fields(fields)  # raises InvalidMessageError, as it says
