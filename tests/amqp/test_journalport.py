"""The component's journal port: journal before fan-out, whoever journaled first."""

from __future__ import annotations

import pytest

from seqrepair.amqp.component.journalport import (
    JournalGapError,
    NotJournaledError,
    RedisJournalPort,
    StaleNumberingError,
    Unsent,
)
from seqrepair.core.messages import Publication
from seqrepair.journal.errors import (
    JournalResponseError,
    JournalTimeoutError,
    JournalUnavailableError,
    SequenceConflictError,
    TrimmedRangeError,
)


class FakeJournal:
    """The journal's contiguity rule, a record of what was asked of it, and Redis failures
    on demand."""

    def __init__(self) -> None:
        self.held: dict[str, list[int]] = {}
        self.stored: dict[tuple[str, int], Publication] = {}
        self.calls: list[str] = []
        self.moving = False  # another writer appends before each of ours (a race)
        self.down: set[str] = set()  # sources whose every call fails: nothing written
        self.refusing: set[str] = set()  # sources whose appends get an error reply (out of memory)
        self.replies_lost: set[str] = set()  # sources whose appends are written, then time out
        self.late: set[str] = set()  # sources whose appends time out unwritten, to land later
        self.landing: dict[str, list[Publication]] = {}  # ... just before their next append
        self.trimmed: dict[str, int] = {}  # retention: per source, the last number trimmed
        self.trims_racing: dict[str, list[int]] = {}  # trims that land just before each read
        self.bits: dict[str, int] = {}  # per source, the width of its first append
        self.lost: set[str] = set()  # sources whose appends time out unwritten, never to land
        self.recorded: dict[str, str] = {}  # brought_by, as the append script records it

    def _reach(self, source: str) -> None:
        if source in self.down:
            raise JournalUnavailableError("connection refused", source=source)

    def high_water(self, source: str) -> int:
        self.calls.append("high_water")
        self._reach(source)
        return len(self.held.get(source, []))

    def append(self, pubs: list[Publication], bits: int, brought_by: str | None = None) -> int:
        self.calls.append(f"append {pubs[0].source_seq}..{pubs[-1].source_seq}")
        self._reach(pubs[0].source)
        if pubs[0].source in self.lost:
            raise JournalTimeoutError("no reply in time (never written)", source=pubs[0].source)
        if brought_by and not self.held.get(pubs[0].source):  # its first journaling
            self.recorded.setdefault(pubs[0].source, brought_by)
        if pubs[0].source in self.refusing:
            raise JournalResponseError("OOM command not allowed", source=pubs[0].source)
        if pubs[0].source in self.landing:  # an earlier append, late: after any reads since
            self._write(self.landing.pop(pubs[0].source))
        if pubs[0].source in self.late:
            self.landing[pubs[0].source] = list(pubs)
            raise JournalTimeoutError("no reply in time (written later)", source=pubs[0].source)
        if self.moving:
            self.held.setdefault(pubs[0].source, []).append(len(self.held[pubs[0].source]) + 1)
        held = self._write(pubs)
        self.bits.setdefault(pubs[0].source, bits)
        if pubs[0].source in self.replies_lost:
            raise JournalTimeoutError("written, but the reply timed out", source=pubs[0].source)
        return len(held)

    def _write(self, pubs: list[Publication]) -> list[int]:
        """The journal's append script: a contiguous continuation, else nothing written."""
        held = self.held.setdefault(pubs[0].source, [])
        if pubs[0].source_seq != len(held) + 1:
            raise SequenceConflictError("conflict", expected=len(held) + 1)
        held.extend(p.source_seq for p in pubs)
        self.stored.update(((p.source, p.source_seq), p) for p in pubs)
        return held

    def read_range(self, source: str, first: int, last: int) -> list[Publication]:
        self._reach(source)
        if self.trims_racing.get(source):
            self.trim(source, self.trims_racing[source].pop(0))
        through = self.trimmed.get(source, 0)
        if first <= through:  # as the journal's reads: a trimmed number is an error, not a skip
            raise TrimmedRangeError(f"trimmed through {through}", source=source,
                                    trimmed_through=through, requested=first)
        return [self.stored[(source, seq)] for seq in range(first, last + 1)]

    def trim(self, source: str, through: int) -> None:
        """Retention removes ``source``'s numbers through ``through`` (capped at what it
        holds)."""
        through = min(through, len(self.held.get(source, [])))
        self.trimmed[source] = max(self.trimmed.get(source, 0), through)

    def sources(self) -> list[str]:
        return sorted(self.held)

    def high_waters(self, sources: list[str]) -> dict[str, tuple[int, int]]:
        return {source: (len(self.held.get(source, [])), self.trimmed.get(source, 0))
                for source in sources}

    def bit_widths(self, sources: list[str]) -> dict[str, int]:
        return {source: self.bits[source] for source in sources if source in self.bits}

    def publisher_journals(self, source: str, through: int) -> None:
        held = self.held.setdefault(source, [])
        held.extend(range(len(held) + 1, through + 1))


def pubs(first: int, last: int, source: str = "s") -> list[Publication]:
    return [Publication("/t", source, i, "update", {}) for i in range(first, last + 1)]


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


def test_after_a_failed_append_the_port_says_which_sources_the_journal_took() -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    port.append(pubs(1, 2, "a") + pubs(1, 2, "b"))
    journal.down.add("b")
    batch = pubs(3, 4, "a") + pubs(3, 4, "b") + pubs(1, 1, "c")
    with pytest.raises(NotJournaledError) as failed:
        port.append(batch)
    assert failed.value.condition == "amqp:internal-error"
    assert failed.value.source == "b"  # the one whose outcome is unknown
    assert journal.held == {"a": [1, 2, 3, 4], "b": [1, 2]}  # c was never tried
    assert port.journaled(batch) == [0, 1]  # a's part, known without asking the journal
    assert (port.held("a"), port.held("b"), port.held("c")) == (4, None, None)
    journal.down.clear()
    assert port.high_water("b") == 2
    assert port.held("b") == 2


def test_an_append_whose_reply_is_lost_is_read_back_not_guessed() -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    port.append(pubs(1, 2))
    journal.replies_lost.add("s")
    with pytest.raises(NotJournaledError):
        port.append(pubs(3, 5))
    assert journal.held["s"] == [1, 2, 3, 4, 5]  # written after all
    assert port.held("s") is None  # the port does not claim to know
    assert port.journaled(pubs(3, 5)) == []
    assert port.unsent("s", 2) == Unsent([], range(3, 3))  # nothing read before the high-water
    assert port.high_water("s") == 5
    assert [p.source_seq for p in port.unsent("s", 2).publications] == [3, 4, 5]


def test_what_the_port_cannot_read_from_the_journal_is_an_internal_error() -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    journal.down.add("s")
    with pytest.raises(NotJournaledError, match="high-water cannot be read") as failed:
        port.high_water("s")
    assert failed.value.condition == "amqp:internal-error"
    journal.down.clear()
    journal.replies_lost.add("s")
    with pytest.raises(NotJournaledError):
        port.append(pubs(1, 2))
    assert port.high_water("s") == 2
    journal.down.add("s")
    with pytest.raises(NotJournaledError, match="cannot be read back"):
        port.unsent("s", 0)


@pytest.mark.parametrize(
    ("trims", "read", "trimmed"),
    [
        ([4], [5, 6], range(3, 5)),  # trimmed before the read: the rest is read
        ([6], [], range(3, 7)),  # all of it
        ([9], [], range(3, 7)),  # and past what the port read
        ([2], [3, 4, 5, 6], range(3, 3)),  # only what went out: nothing unsent is lost
        ([3, 5], [6], range(3, 6)),  # a trim racing the read back: read again past it
    ],
)
def test_what_retention_trimmed_before_it_was_read_back_is_passed_over_and_named(
    trims: list[int], read: list[int], trimmed: range
) -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    port.append(pubs(1, 2))
    journal.replies_lost.add("s")
    with pytest.raises(NotJournaledError):
        port.append(pubs(3, 6))
    journal.replies_lost.clear()
    assert port.high_water("s") == 6
    journal.publisher_journals("s", 9)  # journaled since the port read 6 (not its to read)
    journal.trim("s", trims[0])
    journal.trims_racing["s"] = trims[1:]

    unsent = port.unsent("s", 2)

    assert [p.source_seq for p in unsent.publications] == read
    assert unsent.trimmed == trimmed


@pytest.mark.parametrize(
    ("known", "failure", "untouched"),
    [
        (False, "down", True),  # the high-water read failed: no append was tried
        (True, "down", False),  # the append was sent: it may have been written
        (True, "refusing", False),
        (True, "replies_lost", False),
    ],
)
def test_a_failed_call_says_whether_it_surely_wrote_nothing(
    known: bool, failure: str, untouched: bool
) -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    if known:
        port.append(pubs(1, 2))
    getattr(journal, failure).add("s")
    with pytest.raises(NotJournaledError) as failed:
        port.append(pubs(3, 4) if known else pubs(1, 2))
    assert failed.value.untouched is untouched


def test_a_failure_after_another_source_was_written_is_not_untouched() -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    journal.down.add("b")  # b's high-water cannot be read: but a's append went through
    with pytest.raises(NotJournaledError) as failed:
        port.append(pubs(1, 2, "a") + pubs(1, 2, "b"))
    assert (failed.value.untouched, failed.value.source) == (False, "b")
    with pytest.raises(NotJournaledError) as read:
        port.high_water("b")
    assert (read.value.untouched, read.value.source) == (True, "b")  # a read writes nothing


def test_a_late_write_under_numbers_the_component_gave_is_not_taken_for_held() -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    port.append(pubs(1, 2), numbered={"s"})
    journal.late.add("s")  # 3..4 time out unwritten; they land before the next append
    with pytest.raises(NotJournaledError):
        port.append(pubs(3, 4), numbered={"s"})
    journal.late.clear()
    assert port.high_water("s") == 2  # read before the late write landed
    fresh = [*pubs(1, 1, "a"), Publication("/t", "s", 3, "update", {"other": True})]
    with pytest.raises(StaleNumberingError) as stale:
        port.append(fresh, numbered={"a", "s"})  # numbered from the stale high-water
    assert (stale.value.source, stale.value.untouched) == ("s", False)  # a's append went in
    assert journal.held == {"s": [1, 2, 3, 4], "a": [1]}  # the late write only
    assert "other" not in journal.stored[("s", 3)].fields
    assert port.held("s") is None  # forgotten: what landed is read back, not guessed
    assert port.journaled(fresh) == [0]  # a's only
    assert port.high_water("s") == 4
    assert [p.source_seq for p in port.unsent("s", 2).publications] == [3, 4]
    port.append(pubs(5, 5), numbered={"s"})  # numbered again after it
    assert journal.held["s"] == [1, 2, 3, 4, 5]


def test_a_stale_numbering_found_without_a_round_trip_writes_nothing() -> None:
    journal = FakeJournal()
    port = RedisJournalPort(journal)
    port.append(pubs(1, 3), numbered={"s"})
    journal.calls.clear()
    with pytest.raises(StaleNumberingError) as stale:
        port.append(pubs(3, 4), numbered={"s"})  # the port knows 3 is held
    assert stale.value.untouched
    assert journal.calls == []
    assert journal.held["s"] == [1, 2, 3]
    port.append(pubs(3, 4))  # numbered by their publisher: 3 is a duplicate, skipped
    assert journal.held["s"] == [1, 2, 3, 4]


class _MarkingJournal:
    """A relay's journal: appends may skip numbers, each skip journaled under ``not_selected``
    (recorded here per append)."""

    def __init__(self) -> None:
        self.hw: dict[str, int] = {}
        self.markers: list[tuple[int, str | None]] = []  # (first number of the append, text)

    def high_water(self, source: str) -> int:
        return self.hw.get(source, 0)

    def append(self, pubs: list[Publication], bits: int, *,
               not_selected: str | None = None) -> int:
        self.markers.append((pubs[0].source_seq, not_selected))
        self.hw[pubs[0].source] = pubs[-1].source_seq
        return pubs[-1].source_seq


def _pubs(source: str, *seqs: int) -> list[Publication]:
    return [Publication("/w/a", source, seq, "update", {"n": seq}) for seq in seqs]


def test_a_relay_journals_a_skip_past_an_upstream_loss_as_lost_not_as_not_selected() -> None:
    from seqrepair.journal.selection import LOST_UPSTREAM

    journal = _MarkingJournal()
    port = RedisJournalPort(journal, not_selected="/w/#")
    port.append(_pubs("s", 1, 2, 5))  # 3..4 not selected
    port.note_lost("s", 5)  # upstream: what follows 5 is lost
    port.append(_pubs("s", 6, 7))  # contiguous: no marker, the loss still pending
    port.append(_pubs("s", 20))  # 8..19: lost, not "not selected"
    port.append(_pubs("s", 25))  # 21..24: not selected again
    port.note_lost(None, None)  # a loss naming no source: every source's next skip
    port.append(_pubs("t", 3))
    port.append(_pubs("s", 30))
    port.append(_pubs("s", 35))
    assert journal.markers == [
        (1, "/w/#"), (6, "/w/#"), (20, LOST_UPSTREAM), (25, "/w/#"),
        (3, LOST_UPSTREAM), (30, LOST_UPSTREAM), (35, "/w/#"),
    ]
