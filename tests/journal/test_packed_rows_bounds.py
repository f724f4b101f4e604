"""Packed rows at large numbers: the append and trim scripts write and answer numbers above
10^14 as decimal text (Lua's ``tostring`` and ``..`` of a number give ``1e+15``: an invalid
stream ID, a marker's ``through`` or a conflict's high-water unreadable)."""

from __future__ import annotations

import pytest

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import Journal, SequenceConflictError, envelope
from seqrepair.journal.format import MAX_JOURNAL_SEQ, meta_key
from seqrepair.journal.selection import NotSelected

pytestmark = pytest.mark.redis

SOURCE = "feed.bounds"
SEL = "/a"


def _pub(seq: int) -> Publication:
    return Publication("/a", SOURCE, seq, PublishType.UPDATE, {"n": seq})


BIG = 10**15  # above 10^14: Lua's %.14g no longer writes it as digits


def test_a_relay_gap_above_10_to_the_14_is_a_marker(journal: Journal) -> None:
    """A relay whose upstream is past 10^14 journals from there: its first marker's
    ``through`` was written ``1e+15`` (held, unreadable), the next marker's ID refused."""
    packed = [_pub(BIG + 10 + i) for i in range(envelope.PACK_MIN)]
    assert journal.append(packed, 32, not_selected=SEL) == BIG + 17
    assert journal.append([_pub(BIG + 20)], 32, not_selected=SEL,
                          before=(BIG + 18, "/before")) == BIG + 20
    assert list(journal.iter_entries(SOURCE, BIG + 1)) == [
        NotSelected(SOURCE, 1, BIG + 9, SEL), *packed,
        NotSelected(SOURCE, BIG + 18, BIG + 18, "/before"),
        NotSelected(SOURCE, BIG + 19, BIG + 19, SEL), _pub(BIG + 20)]


def test_a_conflict_and_a_trim_near_the_top_are_answered_as_numbers(journal: Journal) -> None:
    top = MAX_JOURNAL_SEQ - 100
    journal.client.hset(meta_key(SOURCE), mapping={"high_water": top, "bits": 32})
    assert journal.append([_pub(top + 1 + i) for i in range(10)], 32) == top + 10
    for batch in ([_pub(top + 5)], [_pub(top + 5 + i) for i in range(10)]):
        with pytest.raises(SequenceConflictError) as caught:  # was a ValueError (1e+15)
            journal.append(batch, 32)
        assert caught.value.expected == top + 11
    assert journal.trim_through(SOURCE, top + 3, now=1.0) == (top + 3, top + 3)
    assert journal.trim_through(SOURCE, top + 2, now=2.0) == (top + 3, 0)
    assert [p.source_seq for p in journal.iter_range(SOURCE, top + 4)] == list(
        range(top + 4, top + 11))
