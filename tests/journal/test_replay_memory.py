"""A source replay holds about one journal page at a time (issue 24): reading a 20,000-entry
range of 1 KiB publications through a real redis-server, the Python memory it takes at its peak
follows ``page_size``, not the range, and nothing of the pages stays once they are read."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from seqrepair.core.messages import Publication, ReplayComplete, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.journal import GapFillService, Journal, Replay

pytestmark = pytest.mark.redis

ENTRIES = 20_000
PAD = 1024
ENTRY_COST = 5 * PAD
"""What one entry of the page being read may cost in Python at the peak, the reply being parsed:
redis-py's read buffer, the reply text and the parsed rows all hold it (4.3 KiB measured for a
1 KiB publication). Before issue 24's fix the decoded page was held beside the parsed rows
(7.9 KiB measured)."""


def _fill(journal: Journal) -> None:
    pad = "x" * PAD
    for start in range(1, ENTRIES + 1, 1000):
        journal.append([Publication("/history/a", "src-a", seq, fields={"pad": pad, "n": seq})
                        for seq in range(start, start + 1000)], 32)


def _peak_of_replay(journal: Journal, page_size: int) -> tuple[int, int, int]:
    """(sent, tracemalloc peak, bytes still held after) of one replay "after 0", its frames
    taken and dropped one by one as a reader with credit would."""
    service = GapFillService(journal, page_size=page_size)  # max_range 100,000: all of it
    service.attach("L", Entitlement(topics=("/history/#",)), start_after={})
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        replay = service.answer_source_gap("L", SourceGapRequest({"src-a": 0}), now=0.0)
        assert isinstance(replay, Replay), replay
        sent = 0
        closing = None
        for frame in replay.steps(scan_slice=page_size):
            if isinstance(frame, Publication):
                sent += 1
                assert frame.source_seq == sent
            elif frame is not None:
                closing = frame
            del frame
        assert isinstance(closing, ReplayComplete), closing
        assert closing.through == {"src-a": ENTRIES}
        del replay, closing
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return sent, peak - base, current - base


@pytest.mark.parametrize("page_size", [100, 1000])
def test_a_replay_of_20000_entries_holds_about_one_page(journal: Journal, page_size: int) -> None:
    _fill(journal)
    sent, peak, left = _peak_of_replay(journal, page_size)
    assert sent == ENTRIES
    bound = page_size * ENTRY_COST + (256 << 10)  # the page, plus the service's own state
    assert peak < bound, f"peak {peak} B over {bound} B (page {page_size})"
    assert peak < ENTRIES * PAD // 4  # far below the range itself (~20 MB of payload)
    assert left < 64 << 10, f"{left} B still held after the replay"
