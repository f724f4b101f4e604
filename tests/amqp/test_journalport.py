"""The component's journal port: journal before fan-out, whoever journaled first."""

from __future__ import annotations

import pytest

from seqrepair.amqp.journalport import JournalGapError, RedisJournalPort
from seqrepair.core.messages import Publication
from seqrepair.journal.errors import SequenceConflictError


class FakeJournal:
    """The journal's contiguity rule, and a record of what was asked of it."""

    def __init__(self) -> None:
        self.held: dict[str, list[int]] = {}
        self.calls: list[str] = []
        self.moving = False  # another writer appends before each of ours (a race)

    def high_water(self, source: str) -> int:
        self.calls.append("high_water")
        return len(self.held.get(source, []))

    def append(self, pubs: list[Publication], bits: int) -> int:
        self.calls.append(f"append {pubs[0].source_seq}..{pubs[-1].source_seq}")
        held = self.held.setdefault(pubs[0].source, [])
        if self.moving:
            held.append(len(held) + 1)
        if pubs[0].source_seq != len(held) + 1:
            raise SequenceConflictError("conflict", expected=len(held) + 1)
        held.extend(p.source_seq for p in pubs)
        return len(held)

    def publisher_journals(self, source: str, through: int) -> None:
        held = self.held.setdefault(source, [])
        held.extend(range(len(held) + 1, through + 1))


def pubs(first: int, last: int) -> list[Publication]:
    return [Publication("/t", "s", i, "update", {}) for i in range(first, last + 1)]


def test_a_component_journaling_alone_appends_each_batch_once_without_reads() -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    for first in (1, 5, 9):
        port.append(pubs(first, first + 3))
    assert journal.held["s"] == list(range(1, 13))
    assert journal.calls == ["high_water", "append 1..4", "append 5..8", "append 9..12"]


def test_behind_a_journaling_publisher_nothing_is_appended_twice_and_no_batch_is_encoded_for_nothing() -> None:  # noqa: E501
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    journal.publisher_journals("s", 8)
    port.append(pubs(1, 4))  # held: skipped
    port.append(pubs(5, 8))
    journal.publisher_journals("s", 12)
    port.append(pubs(9, 12))  # looks like a continuation: refused once, then known
    journal.publisher_journals("s", 16)
    journal.calls.clear()
    port.append(pubs(13, 16))  # the port now asks first: no refused append
    assert journal.calls == ["high_water"]
    port.append(pubs(17, 18))  # the publisher did not journal these: the port does
    assert journal.held["s"] == list(range(1, 19))
    assert journal.calls == ["high_water", "high_water", "append 17..18"]


def test_a_hole_is_refused_and_a_journal_that_keeps_moving_is_not_taken_for_held() -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    port.append(pubs(1, 2))
    with pytest.raises(JournalGapError):
        port.append(pubs(5, 6))
    journal.moving = True
    with pytest.raises(JournalGapError, match="moved under three appends"):
        port.append(pubs(3, 10))  # another writer gets one in before each attempt
