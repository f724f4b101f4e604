"""The append envelope is ``json``'s text with any orjson installed, not only with the newest
(``pyproject.toml`` first took ``orjson>=3.9``; now 3.11.7, and envelope.py checks what the
orjson it imports writes): orjson wrote a positive exponent without its
``+`` until 3.11.7 (its changelog for 3.11.7: "positive exponents are now written using a
``+``, e.g., ``1.2e+30`` instead of ``1.2e30``"), where ``repr`` and so ``json`` write
``1e+16``. None of envelope.py's guards (``:null``, a digit before ``e-``, ``0.0000``) sees
``1e16``. ``_before_3_11_7`` below writes what orjson 3.11.6 writes (the real 3.11.6 gives
``{"t":1e16,...}`` for fields ``{"t": 1e16}`` and fails test_envelope_orjson.py at round 48);
a float of 1e16 or more (a nanosecond time as a float: 1.8e+18) is enough."""

from __future__ import annotations

import importlib
import random
import re
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from test_envelope import _outcome, _reference, _unpacked
from test_envelope_orjson import _publications

from seqrepair.core.messages import Publication
from seqrepair.journal import envelope

orjson = pytest.importorskip("orjson")

# a JSON string whole (left as it is), or the "e+" of a number's exponent
_STRING_OR_EXPONENT = re.compile(rb'"(?:[^"\\]|\\.)*"|(?<=[0-9])e\+')


def _before_3_11_7(value: Any) -> bytes:
    """orjson.dumps as orjson 3.9 .. 3.11.6 write it: a number's positive exponent without
    its ``+``; strings (and so a fields text inside a row) as they are."""
    return _STRING_OR_EXPONENT.sub(
        lambda m: m.group(0) if m.group(0)[:1] == b'"' else b"e", orjson.dumps(value))


@pytest.fixture
def old_orjson(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """envelope.py imported where the orjson installed is one before 3.11.7 (so that a check
    made at import sees it too); imported again with the real one after."""
    fake = types.ModuleType("orjson")
    fake.dumps = _before_3_11_7  # type: ignore[attr-defined]
    fake.JSONEncodeError = orjson.JSONEncodeError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "orjson", fake)
    try:
        yield importlib.reload(envelope)
    finally:
        monkeypatch.setitem(sys.modules, "orjson", orjson)
        importlib.reload(envelope)


def test_the_emulation_is_orjson_3_11_6() -> None:
    assert _before_3_11_7([1e16, -1.5e300, 1e-7, 1e-05, "1e+16", 2.5]) == (
        b'[1e16,-1.5e300,1e-7,0.00001,"1e+16",2.5]')


def test_a_float_of_1e16_or_more_is_written_as_json_writes_it(
        old_orjson: types.ModuleType) -> None:
    pubs = [Publication("/a", "s", seq, fields={"n": seq, "t": 1.795720081596187e18})
            for seq in range(1, 9)]
    expected = _reference(pubs, 64, "s")
    assert b'\\"t\\":1.795720081596187e+18' in expected
    assert old_orjson.encode_envelope(pubs, 64, "s") == expected
    assert _unpacked(old_orjson.encode_append(pubs, 64, "s")) == expected


def test_random_batches_with_orjson_before_3_11_7(old_orjson: types.ModuleType) -> None:
    rng = random.Random(4013)
    for round_ in range(300):
        pubs = _publications(rng, rng.randrange(1, 80), odd=0.0 if round_ % 4 == 0 else 0.03)
        expected = _outcome(_reference, pubs, 8, "src")
        assert _outcome(old_orjson.encode_envelope, pubs, 8, "src") == expected, round_
        assert _unpacked(_outcome(old_orjson.encode_append, pubs, 8, "src")) == expected, round_


def test_the_real_orjson_is_back() -> None:
    assert envelope._dumps is orjson.dumps
