"""Packed rows under load and at large numbers: a page of ``count`` publications asks Redis for
about ``count / ROW_MOST`` packed rows, not ``count`` rows (``XRANGE COUNT`` counts rows, and a
packed row holds up to ROW_MOST publications); and the append and trim scripts write and answer
numbers above 10^14 as decimal text (Lua's ``tostring`` and ``..`` of a number give ``1e+15``:
an invalid stream ID, a marker's ``through`` or a conflict's high-water unreadable)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import redis

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import Journal, SequenceConflictError, envelope
from seqrepair.journal.format import MAX_JOURNAL_SEQ, meta_key
from seqrepair.journal.selection import NotSelected

pytestmark = pytest.mark.redis

SOURCE = "feed.bounds"
SEL = "/a"
_RANGE = re.compile(r"^(XRANGE|XREVRANGE) \S+ \S+ \S+ COUNT (\d+)$")


def _pub(seq: int) -> Publication:
    return Publication("/a", SOURCE, seq, PublishType.UPDATE, {"n": seq})


def _rows_asked(client: redis.Redis, read: Callable[[], Any]) -> tuple[int, int]:
    """``(calls, rows)``: the XRANGE/XREVRANGE calls the scripts made during ``read()`` and
    the rows they asked for in all (the COUNTs), seen by MONITOR."""
    calls = rows = 0
    with client.monitor() as monitor:
        read()
        client.echo("rows-asked-done")
        for command in monitor.listen():
            text = command["command"]
            if text == "ECHO rows-asked-done":
                break
            match = _RANGE.match(text)
            if match and command["client_type"] == "lua":
                calls += 1
                rows += int(match.group(2))
    return calls, rows


@pytest.mark.parametrize("count", [1000, 2000])
def test_a_page_asks_for_the_rows_it_needs(redis_client: redis.Redis, count: int) -> None:
    monitored = redis.Redis(connection_pool=redis_client.connection_pool)
    journal = Journal(redis_client, page_size=count)
    total = envelope.ROW_MOST * 100
    for start in range(1, total + 1, 1024):
        journal.append([_pub(n) for n in range(start, start + 1024)], 32)
    enough = count // envelope.ROW_MOST + 4  # a first row cut, the row holding the end
    for label, read in [
        ("forward to +", lambda: journal._page(SOURCE, "1-0", "+", count)),
        ("forward to hw", lambda: journal._page(SOURCE, "30-0", f"{total}-0", count)),
        ("rows", lambda: journal._page(SOURCE, "30-0", f"{total}-0", count, positional=True)),
        ("back", lambda: journal._page(SOURCE, "-", f"({total - 30}-0", count, reverse=True)),
    ]:
        calls, rows = _rows_asked(monitored, read)
        assert rows <= enough, (label, calls, rows)
        assert len(read()[2]) == count
    # still one range call for a page of entries written one each (not a row at a time)
    plain = "feed.plain"
    journal.append([Publication("/a", plain, n, PublishType.UPDATE, {}) for n in range(1, 8)],
                   32)
    for start in range(8, count + 100, 7):
        journal.append([Publication("/a", plain, n, PublishType.UPDATE, {})
                        for n in range(start, start + 7)], 32)
    calls, _ = _rows_asked(monitored, lambda: journal._page(plain, "1-0", "+", count))
    assert calls <= 3
    assert [p.source_seq for p in journal.read_range(SOURCE, 1, total)] == list(
        range(1, total + 1))


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
