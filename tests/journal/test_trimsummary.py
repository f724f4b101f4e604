"""The bounded summary of what retention trimmed (journal/trimsummary.py): the items each
trimmed span held, merged while small, unknown past its bounds, never a partial answer."""

from __future__ import annotations

import pytest

from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal import Journal, RetentionPolicy, apply_retention, trimsummary
from seqrepair.journal.trimsummary import summary_key, trimmed_items, visible_topics

pytestmark = pytest.mark.redis


def fill(journal: Journal, topics: list[tuple[str, str | None]], first: int = 1) -> None:
    seq = SourceSequencer(source="feed.a", bits=8, start_after=first - 1)
    journal.append([seq.stamp(topic, {"i": i}, permtoken=token)
                    for i, (topic, token) in enumerate(topics)], 8)


def test_retention_passes_name_the_items_of_what_they_trimmed(journal: Journal) -> None:
    fill(journal, [("/a", None), ("/b", "t2"), ("/a", None)] * 10)
    apply_retention(journal, "feed.a", RetentionPolicy(max_count=20), now=0.0)
    fill(journal, [("/c", None)] * 5, first=31)
    apply_retention(journal, "feed.a", RetentionPolicy(max_count=20), now=0.0)
    assert journal.info("feed.a").trimmed_through == 15
    # adjacent passes merged into one span
    assert journal.client.llen(summary_key("feed.a")) == 1
    assert trimmed_items(journal, "feed.a", 1, 15) == {("/a", None), ("/b", "t2")}
    assert trimmed_items(journal, "feed.a", 3, 4) == {("/a", None), ("/b", "t2")}
    assert trimmed_items(journal, "feed.a", 1, 16) is None  # 16 never summarized
    held = trimmed_items(journal, "feed.a", 1, 15) or set()
    assert visible_topics(held, lambda topic, token: token is None) == ("/a",)


def test_past_its_bounds_a_span_is_unknown_never_partial(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trimsummary, "MAX_ITEMS", 3)
    fill(journal, [(f"/t/{i}", None) for i in range(10)])
    apply_retention(journal, "feed.a", RetentionPolicy(max_count=8), now=0.0)  # 1..2
    assert trimmed_items(journal, "feed.a", 1, 2) == {("/t/0", None), ("/t/1", None)}
    apply_retention(journal, "feed.a", RetentionPolicy(max_count=4), now=0.0)  # 3..6: 4 items
    assert trimmed_items(journal, "feed.a", 1, 2) is not None
    assert trimmed_items(journal, "feed.a", 3, 3) is None
    assert trimmed_items(journal, "feed.a", 1, 6) is None
    monkeypatch.setattr(trimsummary, "MAX_SPANS", 2)
    monkeypatch.setattr(trimsummary, "MAX_ITEMS", 1)
    apply_retention(journal, "feed.a", RetentionPolicy(max_count=3), now=0.0)  # 7
    assert trimmed_items(journal, "feed.a", 7, 7) == {("/t/6", None)}
    assert trimmed_items(journal, "feed.a", 1, 2) is None  # its span was dropped
    journal.client.rpush(summary_key("feed.a"), "not json")
    assert trimmed_items(journal, "feed.a", 7, 7) is None
