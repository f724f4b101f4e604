"""A source replay read in steps (issue 24): it pauses after every slice of journal entries it
reads, whether it sends them or skips them, so its reader can let others have the event loop."""

from __future__ import annotations

import itertools

import pytest

from seqrepair.core.messages import Publication, ReplayComplete, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal import GapFillService, Journal, Replay

pytestmark = pytest.mark.redis


def fill(journal: Journal, source: str, rows: list[tuple[str, str | None]]) -> None:
    seq = SourceSequencer(source=source, bits=16, start_after=journal.high_water(source))
    journal.append([seq.stamp(topic, {"n": i}, permtoken=token)
                    for i, (topic, token) in enumerate(rows)], 16)


def _replay(journal: Journal, entitlement: Entitlement) -> Replay:
    service = GapFillService(journal, page_size=10)
    service.attach("L", entitlement, start_after={})
    replay = service.answer_source_gap("L", SourceGapRequest({"feed.a": 0}), now=0.0)
    assert isinstance(replay, Replay), replay
    return replay


def test_a_replay_of_entries_the_link_may_not_see_pauses_every_slice(journal: Journal) -> None:
    fill(journal, "feed.a", [("/secret/x", None)] * 95)
    replay = _replay(journal, Entitlement(topics=("/weather/#",)))
    steps = list(replay.steps(scan_slice=10))
    # 95 entries read and skipped: a pause after each 10, then the closing frame
    assert steps[:-1] == [None] * 9
    assert isinstance(steps[-1], ReplayComplete)
    assert steps[-1].through == {"feed.a": 95}
    assert (replay.scanned, replay.filtered, replay.sent) == (95, 95, 0)


def test_pauses_count_sent_entries_too_and_iterating_gives_the_frames_alone(
    journal: Journal,
) -> None:
    fill(journal, "feed.a", [("/weather/a", None), ("/secret/x", None)] * 15)
    stepped = list(_replay(journal, Entitlement(topics=("/weather/#",))).steps(scan_slice=4))
    pauses = [i for i, frame in enumerate(stepped) if frame is None]
    assert len(pauses) == 30 // 4  # one per 4 entries read, sent or not
    between = [pauses[0]] + [b - a - 1 for a, b in itertools.pairwise(pauses)]
    assert all(n == 2 for n in between)  # of every 4 read, 2 sent: never more between pauses
    plain = list(_replay(journal, Entitlement(topics=("/weather/#",))))
    assert None not in plain
    assert [f for f in stepped if f is not None] == plain
    assert [p.source_seq for p in plain if isinstance(p, Publication)] == list(range(1, 30, 2))
