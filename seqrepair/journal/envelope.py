"""A batch of publications as the append script takes it: JSON text of one row per publication
``[number, topic, ptype, fields JSON text, permtoken, ts, wire]`` (:mod:`.format` says what
each is; ``scripts.APPEND`` reads them).

The ``json`` encoder made each publication's fields text by a call of its own (the encoder's
set-up alone is ~0.35 us a call, as much as encoding two numbers), then the rows. Here the
fields of the whole batch are encoded by one call, as a list, and that text is cut into the
publications' texts at the ``},{`` between them: a list's text is its items' texts joined by
``,``, so each piece is byte for byte what a call of its own gives, as long as ``},{`` is
found nowhere else (counted: one fewer than the publications). Anything else (a name or value
holding ``},{``, fields that are not a publication's own, a value the encoder refuses) is
encoded publication by publication as before, which raises as before
(``tests/journal/test_envelope.py`` compares both on random batches).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication
from seqrepair.journal.format import check_seq, encode_fields, encode_json, space

_BETWEEN = "},{"


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
    try:
        encoded: str = encode_json(rows)
        return encoded.encode("utf-8")
    except (UnicodeEncodeError, ValueError) as exc:
        raise InvalidMessageError(f"publication text is not valid UTF-8: {exc}") from exc


def _together(copies: list[dict[str, Any]]) -> list[str] | None:
    """Each of ``copies``'s JSON text, encoded by one call; None when they cannot be cut
    apart for sure (or the encoder refuses one: each is then encoded by itself)."""
    try:
        text: str = encode_json(copies)
    except (TypeError, ValueError, RecursionError):
        return None
    count = len(copies)
    body = text[1:-1]
    if count == 1:
        return [body]
    if body.count(_BETWEEN) != count - 1:
        return None  # "},{" inside a name or a value too
    pieces = body.split(_BETWEEN)  # the braces between them cut off: put back
    texts = [f"{{{piece}}}" for piece in pieces]
    texts[0] = texts[0][1:]
    texts[-1] = texts[-1][:-1]
    return texts


def _fields_text(fields: Any) -> str:
    """One publication's fields text, by a call of its own (raises as it always did)."""
    try:
        if type(fields) is MappingProxyType:
            text: str = encode_json(fields.copy())
            return text
        return encode_fields(fields)
    except (TypeError, ValueError, RecursionError):
        return encode_fields(fields)  # raises InvalidMessageError, as it says
