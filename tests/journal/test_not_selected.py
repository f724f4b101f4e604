"""A relay's journal: a filtered feed's numbers are journaled with the ranges between them as
not selected (selection.py), read over as covered, never as loss."""

from __future__ import annotations

import pytest

from seqrepair.core.errors import InvalidMessageError
from seqrepair.core.messages import (
    GapError,
    Publication,
    PublishType,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.core.topics import TopicPattern
from seqrepair.journal import GapFillService, Journal, Replay, SequenceConflictError
from seqrepair.journal.selection import NotSelected

pytestmark = pytest.mark.redis

SEL = "/weather/#"


def pub(seq: int, topic: str = "/weather/x") -> Publication:
    return Publication(topic=topic, source="feed.a", source_seq=seq, ptype=PublishType.UPDATE,
                       fields={"n": seq})


def test_gaps_become_markers_and_reads_pass_over_them(journal: Journal) -> None:
    assert journal.append([pub(3), pub(4), pub(9)], 32, not_selected=SEL) == 9
    assert journal.append([pub(12)], 32, not_selected=SEL) == 12
    assert journal.high_water("feed.a") == 12
    assert [p.source_seq for p in journal.iter_range("feed.a", 1, 12)] == [3, 4, 9, 12]
    entries = list(journal.iter_entries("feed.a", 1))
    assert entries[0] == NotSelected("feed.a", 1, 2, SEL)
    assert entries[3] == NotSelected("feed.a", 5, 8, SEL)
    assert entries[5] == NotSelected("feed.a", 10, 11, SEL)
    # a read starting inside a marker starts with it, then goes on
    inside = list(journal.iter_entries("feed.a", 6, 10))
    assert inside == [NotSelected("feed.a", 5, 8, SEL), pub(9),
                      NotSelected("feed.a", 10, 11, SEL)]
    assert [p.source_seq for p in journal.read_range("feed.a", 6, 12)] == [9, 12]
    assert journal.read_range("feed.a", 10, 11) == []


def test_a_small_page_crosses_markers(redis_client: object) -> None:
    journal = Journal(redis_client, page_size=2)  # type: ignore[arg-type]
    journal.append([pub(n) for n in range(2, 40, 3)], 32, not_selected=SEL)
    assert [p.source_seq for p in journal.iter_range("feed.a", 1, 40)] == list(range(2, 40, 3))
    assert [p.source_seq for p in journal.iter_range("feed.a", 7)] == list(range(8, 40, 3))


def test_without_a_selection_a_gap_is_still_refused(journal: Journal) -> None:
    journal.append([pub(1)], 32)
    with pytest.raises(SequenceConflictError):
        journal.append([pub(3)], 32)
    with pytest.raises(SequenceConflictError):  # overlap: never a marker
        journal.append([pub(1), pub(5)], 32, not_selected=SEL)
    with pytest.raises(InvalidMessageError):
        journal.append([pub(6), pub(5)], 32, not_selected=SEL)
    assert journal.high_water("feed.a") == 1


def test_covers() -> None:
    marker = NotSelected("feed.a", 1, 2, "/weather/#,/news/*")
    assert marker.covers((TopicPattern("/weather/wind/#"), TopicPattern("/news/x")))
    assert not marker.covers((TopicPattern("/sport/#"),))
    assert not marker.covers((TopicPattern("/#"),))


def test_covers_tokens_when_the_selection_narrowed_them() -> None:
    marker = NotSelected("feed.a", 1, 2, "/weather/#;tokens=a,b")
    assert marker.tokens() == frozenset({"a", "b"})
    assert marker.covers((TopicPattern("/weather/x"),), frozenset({"a"}))
    assert not marker.covers((TopicPattern("/weather/x"),), frozenset({"a", "c"}))
    assert not marker.covers((TopicPattern("/weather/x"),), frozenset({"*"}))
    assert NotSelected("feed.a", 1, 2, "/weather/#;tokens=").covers(
        (TopicPattern("/weather/x"),), frozenset())
    assert NotSelected("feed.a", 1, 2, "/weather/#").tokens() is None


def test_a_replay_passes_over_what_its_link_would_not_have_been_sent(journal: Journal) -> None:
    """A relay's journal: numbers not selected under a selection covering the link count as
    covered (ReplayComplete through them); for a link they do not cover, one trimmed answer
    per run of them (the relay lacks them), through the run's end, before what comes next."""
    sel = "/weather/a/*"
    journal.append([pub(2, "/weather/a/x"), pub(5, "/weather/a/y"), pub(9, "/weather/a/x")],
                   32, not_selected=sel)
    journal.append([pub(12, "/weather/b/z")], 32, not_selected="/weather/#")
    service = GapFillService(journal)
    service.attach("in", Entitlement(topics=["/weather/a/*"]), start_after={})
    replay = service.answer_source_gap("in", SourceGapRequest({"feed.a": 0}), now=0.0)
    assert isinstance(replay, Replay)
    out = list(replay)
    assert [p.source_seq for p in out[:-1]] == [2, 5, 9]
    assert out[-1] == ReplayComplete(through={"feed.a": 12}, request=SourceGapRequest(
        {"feed.a": 0}))
    service.attach("out", Entitlement(topics=["/weather/b/#"]), start_after={})
    lacking = service.answer_source_gap("out", SourceGapRequest({"feed.a": 0}), now=0.0)
    assert isinstance(lacking, Replay)
    first = list(lacking)
    assert len(first) == 1
    error = first[0]
    assert isinstance(error, GapError)
    assert error.reason == "trimmed"
    assert error.trimmed_through == {"feed.a": 8}  # markers 1, 3-4, 6-8 in one answer
    assert "not selected by this relay's upstream subscription" in error.detail
    rest = list(service.answer_source_gap("out", SourceGapRequest({"feed.a": 8}), now=0.0))
    assert [p.source_seq for p in rest[:-1]] == [12]  # 10-11 were selected under /weather/#
    assert isinstance(rest[-1], ReplayComplete)


def test_an_image_folds_across_markers(redis_client: object) -> None:
    journal = Journal(redis_client, page_size=1)  # type: ignore[arg-type]
    image = Publication(topic="/weather/x", source="feed.a", source_seq=3,
                        ptype=PublishType.IMAGE, fields={"a": 1, "b": 2})
    update = Publication(topic="/weather/x", source="feed.a", source_seq=7,
                         ptype=PublishType.UPDATE, fields={"b": 3})
    journal.append([image, update], 32, not_selected=SEL)
    folded = journal.latest_image("feed.a", "/weather/x")
    assert folded is not None
    assert dict(folded.fields) == {"a": 1, "b": 3}


def test_paging_back_counts_publications_not_markers(journal: Journal) -> None:
    """The image fold pages back until a page comes short: markers must not make it short."""
    journal.append([pub(n) for n in range(3, 30, 3)], 32, not_selected=SEL)
    trimmed, page = journal.page_back("feed.a", 30, 4)
    assert trimmed == 0
    assert [p.source_seq for p in page] == [27, 24, 21, 18]
    _, last = journal.page_back("feed.a", 5, 4)
    assert [p.source_seq for p in last] == [3]


def test_a_first_skip_is_before_the_subscription_only_through_where_it_started(
        journal: Journal) -> None:
    """A relay whose subscription started after 5 journals 8 first: 1..5 were published
    before it subscribed, 6..7 after, not selected by it (issue 27: all of 1..7 were marked
    before the subscription, so a link naming the source was owed 6..7 and the relay asked
    its upstream for numbers it had filtered out)."""
    from seqrepair.journal.selection import BEFORE_SUBSCRIPTION

    assert journal.append([pub(8), pub(11)], 32, not_selected=SEL,
                          before=(5, BEFORE_SUBSCRIPTION)) == 11
    assert [e for e in journal.iter_entries("feed.a", 1) if isinstance(e, NotSelected)] == [
        NotSelected("feed.a", 1, 5, BEFORE_SUBSCRIPTION), NotSelected("feed.a", 6, 7, SEL),
        NotSelected("feed.a", 9, 10, SEL)]


def test_a_subscription_that_started_at_the_first_skip_s_end_marks_it_all_before(
        journal: Journal) -> None:
    from seqrepair.journal.selection import BEFORE_SUBSCRIPTION

    journal.append([pub(8)], 32, not_selected=SEL, before=(7, BEFORE_SUBSCRIPTION))
    assert [e for e in journal.iter_entries("feed.a", 1) if isinstance(e, NotSelected)] == [
        NotSelected("feed.a", 1, 7, BEFORE_SUBSCRIPTION)]


def test_a_lost_marker_names_its_items_only_to_links_its_selection_covers() -> None:
    """Numbers lost upstream of a relay carried under /weather/#: a link on /weather/wind/#
    is told the items the upstream named (it could be owed no other); a wider link (/#)
    may be owed items nobody named there: unknown (None), as is a marker without items."""
    from seqrepair.journal.selection import LOST_UPSTREAM, lost_selection

    marker = NotSelected("feed.a", 3, 9, lost_selection({"/weather/wind/a", "/weather/b"},
                                                        SEL))
    assert marker.lost
    assert not marker.covers((TopicPattern("/weather/#"),))  # lacking for everyone
    assert marker.lost_items((TopicPattern("/weather/wind/#"),)) == (
        "/weather/b", "/weather/wind/a")  # narrowed to what the link sees by its caller
    assert marker.lost_items((TopicPattern("/#"),)) is None
    assert NotSelected("feed.a", 3, 9, LOST_UPSTREAM).lost_items(
        (TopicPattern("/weather/#"),)) is None
    assert lost_selection(None, SEL) == LOST_UPSTREAM
    assert NotSelected("feed.a", 3, 9, LOST_UPSTREAM + ";{bad").lost_items(
        (TopicPattern("/weather/#"),)) is None


def test_a_lost_marker_names_its_items_only_to_links_that_see_every_token_it_was_named_for(
) -> None:
    """The items are topics only, named for the relay's view: a link that sees fewer tokens
    (a narrower grant, a deny exception) cannot be told which of them it may see, so none
    (None) rather than items it may not see."""
    from seqrepair.journal.selection import lost_selection

    wind = (TopicPattern("/weather/wind/#"),)
    every = NotSelected("feed.a", 3, 9, lost_selection({"/weather/wind/a"}, "/weather/#"))
    assert every.lost_items(wind, frozenset({"*"})) == ("/weather/wind/a",)
    assert every.lost_items(wind, frozenset({"*"}), frozenset({"secret"})) is None
    assert every.lost_items(wind, frozenset({"gold"})) is None
    narrowed = NotSelected("feed.a", 3, 9, lost_selection(
        {"/weather/wind/a"}, "/weather/#;tokens=gold,silver"))
    assert narrowed.lost_items(wind, frozenset({"gold", "silver"})) == ("/weather/wind/a",)
    assert narrowed.lost_items(wind, frozenset({"gold"})) is None
    assert narrowed.lost_items(wind, frozenset({"gold", "silver"}),
                               frozenset({"silver"})) is None
