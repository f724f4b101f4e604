"""The append script's text of a batch (:func:`seqrepair.journal.envelope.encode_envelope`, the
fields of a batch encoded by one call and cut apart) is byte for byte what encoding each
publication's fields by a call of its own gave (the reference below is that code), and a batch
the journal refuses is refused with the same error: random batches of every field type, names
and values holding the text between two publications, values the encoder refuses, numbers out
of order, another source."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import pytest

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import envelope
from seqrepair.journal.envelope import ROW_BYTES, ROW_MOST, encode_envelope
from seqrepair.journal.format import check_seq, encode_fields, encode_json, space
from seqrepair.journal.journal import Journal


def _reference(publications: Sequence[Publication], bits: int, source: str, *,
               increasing: bool = False) -> bytes:
    """``Journal._envelope`` as it was: each publication's fields by a call of their own."""
    modulus = space(bits).max
    first = publications[0].source_seq
    check_seq(first, "source_seq", low=1)
    check_seq(publications[-1].source_seq if increasing else first + len(publications) - 1,
              "source_seq", low=1)
    rows: list[tuple[str | None, ...]] = []
    previous = first - 1
    for offset, pub in enumerate(publications):
        seq = pub.source_seq
        if pub.source != source or (seq <= previous if increasing else seq != first + offset):
            raise InvalidMessageError(
                "a batch holds increasing numbers of one source" if increasing
                else "a batch holds consecutive numbers of one source",
                expected=(source, previous + 1), got=(pub.source, seq))
        previous = seq
        ts = pub.timestamp
        fields = pub.fields
        number = str(seq)
        try:
            text = (encode_json(fields.copy()) if type(fields) is MappingProxyType
                    else encode_fields(fields))
        except (TypeError, ValueError, RecursionError):
            text = encode_fields(fields)
        rows.append((number, pub.topic, pub.ptype._value_, text, pub.permtoken,
                     None if ts is None else repr(ts if type(ts) is float else float(ts)),
                     number if seq <= modulus else str((seq - 1) % modulus + 1)))
    try:
        encoded: str = encode_json(rows)
        return encoded.encode("utf-8")
    except (UnicodeEncodeError, ValueError) as exc:
        raise InvalidMessageError(f"publication text is not valid UTF-8: {exc}") from exc


_NAMES = ["n", "t", "price", "a}", "{b", "},{", 'q"', "back\\", "%s", "é", "x" * 40, "\n"]
_VALUES: list[Any] = [None, True, False, 0, -1, 1 << 62, 2.5, -0.0, 1e300, 1795720081.5961869,
                      "", "text", "},{", '{"a":1},{"b":2}', "é\u2028", "\x00\t", [1, "},{"],
                      {"k": {"j": []}}, [{}, {}]]
_BAD: list[Any] = [float("nan"), float("inf"), object(), 10 ** 5000, "\ud800"]


def _fields(rng: random.Random, bad: bool) -> dict[str, Any]:
    names = rng.sample(_NAMES, rng.randrange(0, 4))
    fields = {name: rng.choice(_VALUES) for name in names}
    if bad and rng.random() < 0.5:
        fields["bad"] = rng.choice(_BAD)
    return fields


def _outcome(encode: Any, *args: Any, **kwargs: Any) -> bytes | tuple[str, str, Any, Any]:
    try:
        return encode(*args, **kwargs)  # type: ignore[no-any-return]
    except InvalidMessageError as exc:
        return type(exc).__name__, exc.message, exc.expected, exc.got


def _unpacked(text: Any) -> Any:
    """The envelope packed rows (``encode_append``) hold, joined back into one; checks that the
    rows continue each other and keep to ROW_MOST and ROW_BYTES. Anything else as it is."""
    if not isinstance(text, bytes) or not text.startswith(b"P"):
        return text
    header, _, rest = text.partition(b"\n")
    first, last = map(int, header[1:].split())
    bodies = []
    expect = first
    while rest:
        line, _, rest = rest.partition(b"\n")
        start, end, size = map(int, line.split())
        body, rest = rest[:size], rest[size:]
        assert len(body) == size
        assert start == expect
        assert start <= end < start + ROW_MOST
        assert size <= ROW_BYTES or start == end
        assert [row[0] for row in json.loads(body)] == [str(n) for n in range(start, end + 1)]
        bodies.append(body[1:-1])
        expect = end + 1
    assert expect == last + 1
    return b"[" + b",".join(bodies) + b"]"


def test_the_same_text_as_a_call_each() -> None:
    rng = random.Random(41)
    fast = packed = 0
    for round_ in range(1500):
        bits = rng.choice([3, 8, 32])
        count = rng.randrange(1, 40) if round_ % 5 else rng.randrange(60, 300)
        plain = round_ % 3 == 0  # numbers and names only: the batch's fields in one call
        bad = not plain and rng.random() < 0.1
        first = rng.randrange(1, 200)
        pubs = []
        seq = first
        for i in range(count):
            fields = ({"n": seq, "t": rng.random() * 1e9} if plain
                      else _fields(rng, bad and i == count // 2))
            pubs.append(Publication(
                rng.choice(["/a", "/b/é", '/c"q']), "src", seq,
                rng.choice(list(PublishType)), fields,
                permtoken=rng.choice([None, "tok", '"t"']),
                timestamp=rng.choice([None, rng.random() * 1e9])))
            seq += rng.randrange(1, 3) if round_ % 4 == 1 else 1
        if round_ % 7 == 3:  # another source, or a number out of order, somewhere
            at = rng.randrange(count)
            old = pubs[at]
            pubs[at] = Publication(old.topic, rng.choice(["src", "other"]), max(
                1, old.source_seq - rng.randrange(0, 3)), old.ptype, old.fields)
        increasing = round_ % 4 == 1 or rng.random() < 0.2
        expected = _outcome(_reference, pubs, bits, "src", increasing=increasing)
        assert _outcome(encode_envelope, pubs, bits, "src", increasing=increasing) == expected
        got = _outcome(Journal._envelope, pubs, bits, "src", increasing=increasing)
        packed += isinstance(got, bytes) and got.startswith(b"P")
        assert _unpacked(got) == expected
        fast += plain and isinstance(expected, bytes)
    assert fast > 400
    assert packed > 300


def test_fields_cut_apart_only_where_sure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts holding "},{" are encoded one by one; the rest in one call."""
    calls: list[int] = []
    together = envelope._together

    def counted(copies: list[dict[str, Any]]) -> list[str] | None:
        texts = together(copies)
        calls.append(0 if texts is None else len(texts))
        return texts

    monkeypatch.setattr(envelope, "_together", counted)
    pubs = [Publication("/a", "s", i, fields={"n": i}) for i in range(1, 6)]
    encode_envelope(pubs, 16, "s")
    odd = [*pubs[:4], Publication("/a", "s", 5, fields={"x": "},{"})]
    assert encode_envelope(odd, 16, "s") == _reference(odd, 16, "s")
    empty = [Publication("/a", "s", i) for i in range(1, 4)]
    assert encode_envelope(empty, 16, "s") == _reference(empty, 16, "s")
    assert calls == [5, 0, 3]


def test_fields_no_publication_makes_as_a_call_each() -> None:
    """Fields a publication's own checks never let through, set behind its back (a plain
    dict, not a view; names that are not str: int, float, bool, None, a tuple; values nested
    in lists of dicts holding "},{"), a topic with a lone surrogate, a number out of order:
    the same text or the same error, in the same order, as a call each."""
    rng = random.Random(2731)
    names: list[Any] = ["a", "},{", 1, 1.5, True, None, (1, 2), "é"]
    values: list[Any] = [*_VALUES, *_BAD, {1: "},{"}, [{"x": "},{"}, {}], {"": {"": []}}]
    compared = 0
    for _ in range(3000):
        count = rng.randrange(1, 6)
        first = rng.randrange(1, 300)
        pubs = []
        for i in range(count):
            pub = Publication("/t/a", "s", first + i, fields={"z": 1})
            fields = {rng.choice(names): rng.choice(values) for _ in range(rng.randrange(0, 3))}
            object.__setattr__(pub, "fields", fields if rng.random() < 0.2
                               else MappingProxyType(fields))
            if rng.random() < 0.05:
                object.__setattr__(pub, "source_seq", first + i + rng.choice([-1, 1]))
            if rng.random() < 0.05:
                object.__setattr__(pub, "topic", "/t/\ud800")
            pubs.append(pub)
        increasing = rng.random() < 0.3
        expected = _outcome(_reference, pubs, 8, "s", increasing=increasing)
        assert _outcome(encode_envelope, pubs, 8, "s", increasing=increasing) == expected
        compared += isinstance(expected, bytes)
    assert compared > 300
