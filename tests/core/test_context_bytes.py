"""A link context bounded in bytes: it evicts the oldest frames, never the ones it must keep."""

from __future__ import annotations

import pytest

from seqrepair import GapError, GapRequest, LinkContext, LinkSequencer, SourceSequencer
from seqrepair.core.context import FRAME_OVERHEAD, frame_size
from seqrepair.core.messages import Heartbeat, Publication


def _stamper(bits: int = 16) -> tuple[LinkSequencer, SourceSequencer]:
    return LinkSequencer(bits=bits), SourceSequencer(source="feed.a")


def _next(link: LinkSequencer, src: SourceSequencer, pad: int = 100) -> Publication:
    return link.stamp(src.stamp("/t", {"pad": "x" * pad}), now=0.0)


def test_frame_size_counts_the_strings_and_values_of_a_publication() -> None:
    small = Publication("/t", "s", 1, "update", {"a": "x"})
    large = Publication("/t", "s", 1, "update", {"a": "x" * 1000})
    assert frame_size(Heartbeat(link_seq=1, timestamp=0.0)) == FRAME_OVERHEAD
    assert frame_size(large) - frame_size(small) == 999
    assert frame_size(small) > FRAME_OVERHEAD


def test_the_oldest_frames_go_once_the_bytes_pass_the_bound() -> None:
    link, src = _stamper()
    one = frame_size(_next(*_stamper()))
    context = LinkContext(bits=16, capacity=1000, max_bytes=10 * one)
    for _ in range(25):
        context.record(_next(link, src))
    assert context.bytes == 10 * one
    assert context.newest_bytes(3) == 3 * one
    assert context.newest_bytes(100) == 10 * one
    frames = context.answer(GapRequest(16, 25))
    assert [f.link_seq for f in frames] == list(range(16, 26))
    lost = context.answer(GapRequest(15, 16))
    assert isinstance(lost, GapError)
    assert lost.reason == "context-lost"


def test_frames_to_keep_stay_past_the_bound_and_go_once_released() -> None:
    link, src = _stamper()
    one = frame_size(_next(*_stamper()))
    context = LinkContext(bits=16, capacity=1000, max_bytes=4 * one)
    for n in range(1, 11):
        context.record(_next(link, src), keep=n)  # nothing acknowledged: all kept
    assert context.bytes == 10 * one
    assert [f.link_seq for f in context.answer(GapRequest(1, 10))] == list(range(1, 11))
    context.trim(keep=6)  # 1..4 acknowledged
    assert context.bytes == 6 * one
    assert isinstance(context.answer(GapRequest(4, 4)), GapError)
    context.trim(keep=0)
    assert context.bytes == 4 * one


def test_a_smaller_bound_applies_at_the_next_trim_and_a_reset_empties_the_count() -> None:
    link, src = _stamper()
    one = frame_size(_next(*_stamper()))
    context = LinkContext(bits=16, capacity=1000, max_bytes=100 * one)
    for _ in range(50):
        context.record(_next(link, src))
    assert context.bytes == 50 * one
    context.max_bytes = 5 * one
    context.trim()
    assert context.bytes == 5 * one
    link.reset()
    context.record(link.heartbeat(0.0))  # frame 0: a new context
    assert context.bytes == FRAME_OVERHEAD
    assert context.newest_bytes(1) == FRAME_OVERHEAD


def test_the_frame_capacity_still_bounds_a_context_of_small_frames() -> None:
    link, src = _stamper()
    context = LinkContext(bits=16, capacity=8, max_bytes=1 << 30)
    for _ in range(20):
        context.record(_next(link, src, pad=0))
    assert context.bytes == 8 * frame_size(_next(*_stamper(), pad=0))
    assert isinstance(context.answer(GapRequest(12, 12)), GapError)
    assert len(context.answer(GapRequest(13, 20))) == 8  # type: ignore[arg-type]


def test_a_numbered_run_whose_size_raises_holds_nothing_of_it() -> None:
    """``record_numbered`` without sizes measures every publication before it holds any: a
    size that raises (a field value whose length fails) leaves the context as it was, its
    frames and their running byte totals still side by side."""

    class Odd(str):
        def __len__(self) -> int:
            raise ValueError("no length")

    context = LinkContext(bits=16, capacity=100, max_bytes=10_000)
    context.record(Publication("/a", "s", 1, link_seq=0))
    before = (context.recorded, context.bytes, context.next_number())
    run = [Publication("/a", "s", 2), Publication("/a", "s", 3, fields={"k": Odd("x")}),
           Publication("/a", "s", 4)]
    with pytest.raises(ValueError, match="no length"):
        context.record_numbered(run, context.next_number())
    assert (context.recorded, context.bytes, context.next_number()) == before
    context.record_numbered([Publication("/a", "s", 2)], context.next_number())
    assert context.recorded == 2
    assert context.bytes > before[1]
