"""orjson writes the append envelope only where its text is ``json``'s, byte for byte
(:mod:`seqrepair.journal.envelope`): values it writes otherwise (floats below 1e-4, NaN and
infinities, ints past 64 bits, UUIDs, enums, subclasses, dates, nested values, names that are
not str, lone surrogates) give the same text or the same error as encoding each publication's
fields by a call of its own with ``json`` (``test_envelope._reference``), and so does an
install without orjson."""

from __future__ import annotations

import datetime
import enum
import random
import struct
import uuid
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from test_envelope import _outcome, _reference, _unpacked

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import envelope
from seqrepair.journal.envelope import encode_append, encode_envelope

orjson = pytest.importorskip("orjson")


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


def _float(rng: random.Random) -> float:
    """Any double: random bits (every exponent, NaN, infinities) or a decimal of a few places."""
    if rng.random() < 0.5:
        value: float = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        return value
    return round(rng.uniform(-1, 1) * 10 ** rng.randint(-12, 20), rng.randint(0, 12))


def _finite(rng: random.Random) -> float:
    value = _float(rng)
    return value if value - value == 0 else 0.5  # NaN and infinities are no time


_ODD: list[Any] = [uuid.UUID(int=7), Colour.RED, Level.HIGH, Name("x"), datetime.date(2026, 1, 2),
                   2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, None, float("nan"),
                   float("-inf"), 1e-5, 1.5e-7, 0.0001, 1e16, 1e22, -0.0, 5e-324, [1e-5],
                   {"k": None}, (1, 2), "1e-5", ":null", "0.00001", "\ud800", "\x00\x1f\x7f",
                   "\u2028é中😀", b"bytes", bytearray(b"x")]


def _publications(rng: random.Random, count: int, odd: float) -> list[Publication]:
    pubs = []
    for seq in range(1, count + 1):
        fields: dict[Any, Any] = {"n": rng.randrange(-(2**70), 2**70) if rng.random() < 0.05
                                  else seq, "t": _float(rng)}
        if rng.random() < odd:
            fields[rng.choice(["o", 1, None, Name("k")])] = rng.choice(_ODD)
        pub = Publication(rng.choice(["/a", "/b/é"]), "src", seq, rng.choice(list(PublishType)),
                          {"n": seq}, permtoken=rng.choice([None, "tok"]),
                          timestamp=rng.choice([None, _finite(rng), rng.random() * 1e9]))
        # set behind the publication's back: its own checks let no odd value through
        object.__setattr__(pub, "fields", MappingProxyType(fields))
        pubs.append(pub)
    return pubs


@pytest.mark.parametrize("without_orjson", [False, True])
def test_the_same_text_or_error_as_json(without_orjson: bool,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    if without_orjson:
        monkeypatch.setattr(envelope, "_dumps", None)
    rng = random.Random(4013)
    fast = 0
    for round_ in range(800):
        pubs = _publications(rng, rng.randrange(1, 80), odd=0.0 if round_ % 4 == 0 else 0.03)
        expected = _outcome(_reference, pubs, 8, "src")
        assert _outcome(encode_envelope, pubs, 8, "src") == expected, round_
        assert _unpacked(_outcome(encode_append, pubs, 8, "src")) == expected, round_
        fast += isinstance(expected, bytes) and (
            envelope._dumps is not None
            and envelope._by_columns(pubs, "src", 1, 255) is not None)
    if without_orjson:
        assert fast == 0
    else:
        assert fast > 100  # the usual batches went orjson's way


def test_the_usual_batch_goes_orjson_s_way() -> None:
    pubs = [Publication("/a", "s", seq, fields={"n": seq, "t": 1795720081.5961869 + seq},
                        timestamp=1795720081.25) for seq in range(1, 65)]
    assert envelope._dumps is orjson.dumps
    text = envelope._by_columns(pubs, "s", 1, 2**63)
    assert text is not None
    assert text == _reference(pubs, 64, "s") == encode_envelope(pubs, 64, "s")


def test_a_value_orjson_writes_otherwise_is_written_as_json_writes_it() -> None:
    for value in [1e-5, 2.5e-9, float("nan"), None, 2**64, uuid.UUID(int=1), Colour.RED,
                  Level.HIGH, Name("n"), datetime.datetime(2026, 1, 1), [1e-5]]:
        pubs = [Publication("/a", "s", seq, fields={"v": 1.5}) for seq in range(1, 9)]
        object.__setattr__(pubs[3], "fields", MappingProxyType({"v": value}))
        expected = _outcome(_reference, pubs, 64, "s")
        assert _outcome(encode_envelope, pubs, 64, "s") == expected, value
        assert _unpacked(_outcome(encode_append, pubs, 64, "s")) == expected, value


_STAMPS = [1e-5, 1.5e-7, 0.0001, 0.00011, 5e-324, -0.0, 0.0, 1.0, 1e15, 9999999999999998.0,
           1e16, 1e22, -1.5e300, 1795720081.5961869]


@pytest.mark.parametrize("increasing", [False, True])
def test_every_time_a_float_is_written_as_repr_writes_it(increasing: bool) -> None:
    """A batch whose times are all floats has them written by one orjson call (``repr`` is
    ~0.5 us a float) where orjson's text is surely ``repr``'s: random doubles of every
    exponent and those written otherwise (below 1e-4, 1e16 and up) give ``json``'s text; a
    relay's batch (``increasing``) of consecutive numbers goes the same way."""
    rng = random.Random(4017)
    fast = 0
    for round_ in range(400):
        count = rng.randrange(1, 80)
        stamps = [rng.choice(_STAMPS) if rng.random() < 0.1 else _finite(rng)
                  for _ in range(count)]
        pubs = [Publication("/a", "src", seq, fields={"n": seq}, timestamp=stamp)
                for seq, stamp in zip(range(1, count + 1), stamps, strict=True)]
        expected = _outcome(_reference, pubs, 8, "src", increasing=increasing)
        assert isinstance(expected, bytes)
        assert _outcome(encode_envelope, pubs, 8, "src", increasing=increasing) == expected
        assert _unpacked(_outcome(encode_append, pubs, 8, "src", increasing=increasing)) == (
            expected), round_
        fast += not envelope._unlike_json(orjson.dumps(stamps))
    assert 10 < fast < 400  # both ways taken: orjson's and repr's


def test_fields_viewing_another_mapping_are_refused_as_json_refuses_them() -> None:
    """A publication made by a direct caller with fields viewing a mapping that is not a
    dict: the orjson way steps aside and the json way refuses it, as a call each does."""

    class Fields(Mapping[str, Any]):
        def __init__(self, values: dict[str, Any]) -> None:
            self.values_ = values

        def __getitem__(self, name: str) -> Any:
            return self.values_[name]

        def __iter__(self) -> Iterator[str]:
            return iter(self.values_)

        def __len__(self) -> int:
            return len(self.values_)

        def copy(self) -> Fields:
            return Fields(dict(self.values_))

    pubs = [Publication("/a", "s", seq, fields={"n": seq}, timestamp=1.5) for seq in (1, 2)]
    for pub in pubs:
        object.__setattr__(pub, "fields", MappingProxyType(Fields({"n": pub.source_seq})))
    expected = _outcome(_reference, pubs, 16, "s")
    assert not isinstance(expected, bytes)  # refused: not JSON-encodable
    assert _outcome(encode_envelope, pubs, 16, "s") == expected
    assert _outcome(encode_envelope, pubs, 16, "s", increasing=True) == _outcome(
        _reference, pubs, 16, "s", increasing=True)
