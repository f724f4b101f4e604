"""The journal publisher's shortcut for "can this be journaled as is?" never says yes wrongly.

(Here with the AMQP tests because the publisher's speed is measured by bench_amqp; the
publisher's own tests are in tests/journal.)
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqrepair.core.errors import InvalidMessageError
from seqrepair.journal.format import journal_form, plainly_journaled

text = st.text(max_size=8)  # surrogates, non-ASCII and all
leaves = (st.none() | st.booleans() | st.integers() | st.floats() | text | st.binary(max_size=3))
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(text, inner, max_size=3), max_leaves=8)


def _kept_as_is(topic: object, fields: object, token: object) -> bool:
    try:
        return journal_form(topic, fields, token) == fields  # type: ignore[arg-type]
    except InvalidMessageError:
        return False


@given(text | st.integers(), st.dictionaries(text | st.integers(), values, max_size=4),
       st.none() | text)
def test_the_shortcut_says_yes_only_when_the_real_check_passes(
    topic: object, fields: dict, token: object
) -> None:
    if plainly_journaled(topic, fields, token):
        assert _kept_as_is(topic, fields, token)


@pytest.mark.parametrize(
    ("topic", "fields", "token"),
    [("/a", {"x": math.nan}, None), ("/a", {"x": math.inf}, None), ("/a", {"x": "\ud800"}, None),
     ("/\ud800", {}, None), ("/a", {}, "\ud800"), ("/a", {"\ud800": 1}, None),
     ("/a", {"x": object()}, None), ("/a", {1: 1}, None), ("/a", {"x": [1]}, None)],
)
def test_the_shortcut_leaves_anything_unusual_to_the_real_check(
    topic: str, fields: dict, token: str | None
) -> None:
    assert not plainly_journaled(topic, fields, token)


def test_the_shortcut_takes_what_publishers_usually_send() -> None:
    assert plainly_journaled("/load/a", {"n": 1, "t": 1.5, "s": "x", "b": True, "z": None}, None)
    assert plainly_journaled("/load/a", {}, "gold")


def test_a_publications_own_fields_take_the_shortcut() -> None:
    """A component checks each publication it receives: one whose fields need nothing is
    itself in the journal's form, not a copy built and validated again."""
    from seqrepair.core.messages import Publication
    from seqrepair.journal.format import as_journaled

    pub = Publication(topic="/load/a", source="s", source_seq=1, fields={"n": 1, "t": 1.5})
    assert plainly_journaled(pub.topic, pub.fields, pub.permtoken)
    assert as_journaled(pub) is pub
    nested = Publication(topic="/load/a", source="s", source_seq=2, fields={"xs": (1, 2)})
    assert as_journaled(nested).fields == {"xs": [1, 2]}


def test_values_json_would_change_are_published_in_their_json_form() -> None:
    assert journal_form("/a", {"xs": (1, 2), "m": {1: "one"}, "n": 3}, None) == {
        "xs": [1, 2], "m": {"1": "one"}, "n": 3}
