"""The window discipline of a link (seqrepair.core.window): never more numbers outstanding
than half the link space, whatever the width, with wraps and resets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqrepair.core.errors import InvalidSequenceError, SeqRepairError
from seqrepair.core.sequence import SequenceSpace
from seqrepair.core.window import LinkWindow, window_size


@pytest.mark.parametrize(("bits", "size"), [(2, 1), (3, 3), (4, 7), (5, 15), (8, 127),
                                            (16, 32767)])
def test_the_window_is_half_the_link_space(bits: int, size: int) -> None:
    assert window_size(bits) == size == (2**bits - 2) // 2
    assert LinkWindow(bits).size == size


def test_the_window_is_no_larger_than_the_frames_a_context_keeps() -> None:
    assert window_size(16, 1000) == 1000
    assert window_size(32, 65_536) == 65_536
    assert window_size(8, 65_536) == 127


def test_a_window_over_half_the_space_is_refused() -> None:
    with pytest.raises(InvalidSequenceError):
        LinkWindow(8, 128)
    with pytest.raises(SeqRepairError):
        LinkWindow(8, -1)


def test_two_bits_one_number_at_a_time() -> None:
    w = LinkWindow(2)
    space = SequenceSpace(2)
    for n in range(1, 10):  # wire 1, 2, 3, 1, 2, ...
        assert w.room() == 1
        w.stamped()
        assert w.room() == 0
        with pytest.raises(InvalidSequenceError):
            w.stamped()
        assert w.ack(space.wire(n))
        assert w.acked_through == n


def test_an_old_or_repeated_or_unsent_ack_moves_nothing() -> None:
    w = LinkWindow(8)
    w.stamped(100)
    assert w.ack(60)
    assert not w.ack(60)
    assert not w.ack(50)  # older
    assert not w.ack(200)  # never stamped: reads as older than 60 in the window
    assert not w.ack(0)
    assert w.acked_through == 60
    assert w.room() == 127 - 40


def test_stale_resends_are_those_at_or_below_the_ack() -> None:
    w = LinkWindow(4)  # M = 15, W = 7
    w.stamped(7)
    assert not w.stale(3)
    w.ack(5)
    assert [w.stale(n) for n in (1, 5, 6, 7)] == [True, True, False, False]
    w.stamped(5)  # absolute 8..12: wire 8..12
    w.ack(12)
    assert [w.stale(n) for n in (6, 8, 12)] == [True, True, True]


def test_a_reset_starts_a_fresh_window() -> None:
    w = LinkWindow(3)
    w.stamped(3)
    w.reset()
    assert (w.room(), w.acked_through, w.stale(1)) == (3, 0, False)


@given(bits=st.integers(2, 12), steps=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)),
                                                max_size=60))
def test_outstanding_never_exceeds_the_window(bits: int, steps: list[tuple[int, int]]) -> None:
    """A sender that stamps what room allows and a receiver that acks some of what it got:
    every stamped number is within half the space of the receiver's acknowledged point."""
    w = LinkWindow(bits)
    space = SequenceSpace(bits)
    stamped = acked = 0
    for send, take in steps:
        n = min(send, w.room())
        w.stamped(n)
        stamped += n
        assert 0 <= stamped - acked <= w.size <= space.half
        acked = min(stamped, acked + take)
        if acked:
            w.ack(space.wire(acked))
        assert w.acked_through == acked
