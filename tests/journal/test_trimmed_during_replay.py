"""Numbers retention trims while a source replay reads them (issue 27): the replay's
``GAP-ERROR`` ``trimmed`` names the items those numbers held that the link may see, where the
journal's trimmed-items summary knows them (journal/trimsummary.py), like the answer to a
request from below the trim; ``items`` None where it does not."""

from __future__ import annotations

import time

import pytest

from seqrepair.core.messages import GapError, Publication, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal import GapFillService, Journal, Replay
from seqrepair.journal.trimsummary import record_trim

pytestmark = pytest.mark.redis

TOPICS = ["/weather/a", "/weather/b", "/secret/x", "/weather/c"]


def _filled(journal: Journal) -> Replay:
    seq = SourceSequencer(source="feed.a", bits=16, start_after=0)
    journal.append([seq.stamp(TOPICS[i % 4] if i < 60 else "/weather/late", {"n": i})
                    for i in range(100)], 16)
    service = GapFillService(journal, page_size=10)
    service.attach("L", Entitlement(topics=("/weather/#",)), start_after={})
    replay = service.answer_source_gap("L", SourceGapRequest({"feed.a": 0}), now=0.0)
    assert isinstance(replay, Replay), replay
    return replay


def _trimmed_mid_replay(journal: Journal, summarized: bool) -> tuple[list[object], GapError]:
    frames = iter(_filled(journal))
    sent = [next(frames) for _ in range(5)]  # within the first page
    assert [p.source_seq for p in sent if isinstance(p, Publication)] == [1, 2, 4, 5, 6]
    if summarized:
        record_trim(journal, "feed.a", 1, 70)  # as the retention pass does before it trims
    journal.trim_through("feed.a", 70, now=time.time())
    rest = list(frames)
    assert isinstance(rest[-1], GapError), rest[-1]
    return rest, rest[-1]


def test_a_range_trimmed_during_a_replay_names_the_items_the_link_may_see(
        journal: Journal) -> None:
    rest, error = _trimmed_mid_replay(journal, summarized=True)
    assert error.reason == "trimmed"
    assert error.trimmed_through == {"feed.a": 70}
    # what the page read before the trim was sent: the loss starts after it, and holds the
    # /weather/ items (not /secret/x: outside the pattern) of the numbers not sent
    reached = max([6, *(p.source_seq for p in rest if isinstance(p, Publication))])
    assert reached < 70
    assert error.items == {"feed.a": ("/weather/a", "/weather/b", "/weather/c",
                                      "/weather/late")}


def test_without_a_summary_the_items_are_unknown(journal: Journal) -> None:
    _rest, error = _trimmed_mid_replay(journal, summarized=False)
    assert error.trimmed_through == {"feed.a": 70}
    assert error.items is None
