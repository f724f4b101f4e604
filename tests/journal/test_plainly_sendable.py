"""plainly_sendable is exactly plainly_journaled and check_deliverable together."""

from __future__ import annotations

import math
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair.core.errors import SeqRepairError
from seqrepair.core.limits import MAX_PUBLICATION_SIZE, check_deliverable
from seqrepair.journal.format import plainly_journaled, plainly_sendable

_texts = (st.text(alphabet="ax/é\ud800", max_size=5)
          | st.sampled_from(["", "n", "t" * 255, "t" * 256])
          | st.integers(200, 1100).map(lambda n: "/" + "t" * n))
_values = (st.none() | st.booleans() | st.integers(-(2**64), 2**64)
           | st.sampled_from([127, 128, -128, -129, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1])
           | st.floats() | st.sampled_from([math.inf, -math.inf, math.nan])
           | _texts | st.binary(max_size=3) | st.lists(st.integers(), max_size=2)
           | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)
           | st.integers(0, 3).map(lambda n: "x" * (MAX_PUBLICATION_SIZE // 2 - 300 + n * 200)))


def _both(topic: object, fields: object, permtoken: object) -> bool:
    if not plainly_journaled(topic, fields, permtoken):
        return False
    try:
        check_deliverable(topic, fields, permtoken)  # type: ignore[arg-type]
    except SeqRepairError:
        return False
    return True


@settings(max_examples=600)
@given(_texts, st.dictionaries(_texts | st.integers(0, 2), _values, max_size=6),
       st.none() | _texts | st.integers(), st.booleans())
def test_plainly_sendable_is_both_checks(topic: str, fields: dict[object, object],
                                         permtoken: object, proxy: bool) -> None:
    held = MappingProxyType(fields) if proxy else fields
    assert plainly_sendable(topic, held, permtoken) == _both(topic, held, permtoken)


def test_the_usual_publication_is_proven_and_the_large_one_refused() -> None:
    fields = {"n": 1, "t": 1.5, "pad": "x" * 100, "none": None, "flag": True, "big": 2**40}
    assert plainly_sendable("/peers/a", fields, None)
    assert plainly_sendable("/peers/a", MappingProxyType(fields), "tok")
    two = {"a": "x" * (MAX_PUBLICATION_SIZE // 2), "b": "y" * (MAX_PUBLICATION_SIZE // 2)}
    assert not plainly_sendable("/peers/a", two, None)
    assert not _both("/peers/a", two, None)


@settings(max_examples=600)
@given(st.sampled_from(["/a", "/" + "t" * 1023, "/" + "t" * 1024]), _values,
       st.sampled_from(["n", "é", "k" * 256]), st.none() | st.sampled_from(["tok", "tök"]))
def test_plainly_sendable_is_both_checks_field_by_field(topic: str, value: object, name: str,
                                                        permtoken: str | None) -> None:
    fields = {name: value, "n": 1}
    assert plainly_sendable(topic, fields, permtoken) == _both(topic, fields, permtoken)
