"""A numbering publisher that reuses numbers the journal holds is refused, not taken as a resend.

A publication at or below what went out of its source is either a resend (the same publication
again: skipped, as ever) or a publisher that started again below the source's high-water without
a journal of its own (another publication under a used number). Skipped, the second kind would
be acknowledged and never delivered; the component compares it with what the journal holds and
rejects the whole message (``amqp:precondition-failed``), telling the next number the source may
use. Nothing of a rejected message is journaled or fanned out.

The component runs in memory on :class:`~tests.amqp.test_journalport.FakeJournal`, as in
:mod:`tests.amqp.test_numbering`.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Delivery, Message, symbol

from .test_journal_outage import ACCEPTED, RELEASED, SOURCE, numbered, outcome
from .test_numbering import Harness

REUSED = (Delivery.REJECTED, "amqp:precondition-failed")


def other(first: int, last: int, source: str = SOURCE, *, variant: int = 1) -> Message:
    """Publications ``first..last`` of ``source`` that are not the ones :func:`numbered` sends
    under those numbers (the field ``n`` is the number plus 1000 times ``variant``)."""
    body = [
        {"source": source, "source_seq": seq, "source_bits": 32, "topic": "/plain/x",
         "fields": {"n": seq + 1000 * variant}}
        for seq in range(first, last + 1)
    ]
    return Message(body=body, properties={"message-type": "PUBLICATIONS"})


def info(delivery: object) -> dict[str, object]:
    """The condition's info, each value with its AMQP type (WIRE.md: typed, never repr text)."""
    cond = delivery.local.condition  # type: ignore[attr-defined]
    return {str(key): (type(value).__name__, value) for key, value in cond.info.items()}


def test_a_publisher_that_starts_again_from_one_is_refused_and_told_where_to_go_on() -> None:
    h = Harness()
    assert outcome(h.send(numbered(1, 5))) == ACCEPTED
    restarted = h.send(other(1, 2))

    assert outcome(restarted) == REUSED
    assert info(restarted) == {"expected": ("ulong", 6), "got": ("ulong", 1)}
    assert h.journaled(SOURCE) == [(seq, seq) for seq in range(1, 6)]
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 6)]
    assert h.component.stats["duplicates"] == 0  # not counted as resends


def test_nothing_of_a_message_that_reuses_a_number_is_journaled_not_even_its_new_numbers(
) -> None:
    h = Harness()
    h.send(numbered(1, 5))
    refused = h.send(other(4, 7))  # 4 and 5 reused, 6 and 7 new
    after = h.send(numbered(6, 7))  # the publication the journal holds next is still 6

    assert outcome(refused) == REUSED
    assert info(refused)["got"] == ("ulong", 4)
    assert outcome(after) == ACCEPTED
    assert h.journaled(SOURCE) == [(seq, seq) for seq in range(1, 8)]
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 8)]
    assert h.component.ingested[SOURCE] == 7


def test_a_resend_of_the_same_publications_is_still_skipped_as_a_duplicate() -> None:
    h = Harness()
    h.send(numbered(1, 5))
    again = h.send(numbered(1, 5))  # its acknowledgement was lost: sent again
    overlapping = h.send(numbered(4, 8))  # re-cut with new ones behind

    assert [outcome(again), outcome(overlapping)] == [ACCEPTED, ACCEPTED]
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 9)]  # once each
    assert h.component.stats["duplicates"] == 7


def test_only_the_reusing_source_of_a_batch_matters_and_the_batch_is_refused_whole() -> None:
    h = Harness()
    h.send(numbered(1, 3, "feed.a"))
    h.send(numbered(1, 3, "feed.b"))
    mixed = Message(body=numbered(3, 4, "feed.a").body + other(2, 2, "feed.b").body,
                    properties={"message-type": "PUBLICATIONS"})

    assert outcome(h.send(mixed)) == REUSED
    assert h.journaled("feed.a") == [(1, 1), (2, 2), (3, 3)]  # its 4 was not taken either
    assert outcome(h.send(numbered(3, 4, "feed.a"))) == ACCEPTED


def test_numbers_retention_trimmed_cannot_be_compared_and_are_taken_as_resends() -> None:
    h = Harness()
    h.send(numbered(1, 5))
    h.journal.trim(SOURCE, 3)
    trimmed = h.send(other(2, 3))
    compared = h.send(other(3, 4))  # 3 is trimmed, 4 is held: 4 differs

    assert outcome(trimmed) == ACCEPTED  # a limit: what is gone cannot be told from a resend
    assert outcome(compared) == REUSED
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 6)]


def test_a_journal_that_cannot_be_read_for_the_comparison_releases_the_message() -> None:
    h = Harness()
    h.send(numbered(1, 5))
    h.journal.down.add(SOURCE)
    released = h.send(numbered(4, 6))
    h.journal.down.clear()
    again = h.send(numbered(4, 6))

    assert outcome(released) == RELEASED  # untouched: sending it again is safe
    assert outcome(again) == ACCEPTED
    assert h.received() == [(SOURCE, seq, seq) for seq in range(1, 7)]


@pytest.mark.parametrize("resent_from", [1, 3, 5])
def test_the_rejection_names_the_first_number_that_differs(resent_from: int) -> None:
    h = Harness()
    h.send(numbered(1, 5))
    body = numbered(resent_from, 5).body
    body[-1]["fields"] = {"n": -1}  # only the last one differs from what the journal holds
    refused = h.send(Message(body=body, properties={"message-type": "PUBLICATIONS"}))

    assert outcome(refused) == REUSED
    assert info(refused) == {"expected": ("ulong", 6), "got": ("ulong", 5)}
    assert symbol("expected") in refused.local.condition.info  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(1, 4), st.integers(0, 2)),
                max_size=30))
def test_resends_and_reused_numbers_in_any_order_lose_nothing_acknowledged(
    sends: list[tuple[int, int, int]],
) -> None:
    """Messages that resend, overlap or reuse numbers, in any mix: each is accepted exactly
    when every number it shares with the journal carries the same publication; subscribers get
    what was accepted, once each, in order, and nothing of a refused message."""
    h = Harness()
    held: list[int] = []  # per number (index + 1), the variant the journal holds
    for back, length, variant in sends:
        first = max(1, len(held) + 1 - back)  # from a number it holds, or the next one
        last = first + length - 1
        delivery = h.send(other(first, last, variant=variant))
        shared = held[first - 1:last]
        if all(kept == variant for kept in shared):
            assert outcome(delivery) == ACCEPTED
            held.extend([variant] * (last - len(held)))
        else:
            assert outcome(delivery) == REUSED
            first_differing = first + next(i for i, kept in enumerate(shared) if kept != variant)
            assert info(delivery) == {"expected": ("ulong", len(held) + 1),
                                      "got": ("ulong", first_differing)}
    expected = [(SOURCE, seq, seq + 1000 * v) for seq, v in enumerate(held, start=1)]
    assert h.received() == expected
    assert h.journaled(SOURCE) == [(seq, n) for _, seq, n in expected]
