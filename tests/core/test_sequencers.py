"""Source and link sequencers: numbering, wrap, reset, heartbeats on idle links."""

import pytest

from seqrepair import Heartbeat, LinkSequencer, PublishType, SourceSequencer
from seqrepair.core.errors import InvalidConfigError, InvalidMessageError


def test_source_sequencer_numbers_consecutively_after_its_recovered_high_water():
    src = SourceSequencer(source="feed.a", bits=32, start_after=41)
    first = src.stamp("/weather/wind/LEMD", {"speed": 3}, PublishType.IMAGE)
    second = src.stamp("/weather/wind/LEMD", {"speed": 4})
    assert (first.source, first.source_seq, second.source_seq) == ("feed.a", 42, 43)
    assert second.ptype is PublishType.UPDATE
    assert src.high_water == 43


def test_source_numbers_are_absolute_and_wrap_only_on_the_wire():
    src = SourceSequencer(source="feed.a", bits=3)
    seqs, wires = [], []
    for _ in range(9):
        seqs.append(src.stamp("/t", {}).source_seq)
        wires.append(src.wire_seq)
    assert seqs == list(range(1, 10))
    assert wires == [1, 2, 3, 4, 5, 6, 7, 1, 2]


def test_bad_input_consumes_no_number():
    src = SourceSequencer(source="feed.a")
    with pytest.raises(InvalidMessageError):
        src.stamp("", {})
    assert src.stamp("/t", {}).source_seq == 1


@pytest.mark.parametrize("start_after", [-1, "3", 1.5])
def test_start_after_must_be_a_non_negative_integer(start_after):
    with pytest.raises(InvalidConfigError):
        SourceSequencer(source="feed.a", start_after=start_after)


def test_link_numbers_count_heartbeats_and_wrap_to_one():
    src = SourceSequencer(source="feed.a")
    link = LinkSequencer(bits=2, heartbeat_interval=1.0)  # 1..3
    frames = [link.stamp(src.stamp("/t", {}), now=0.0) for _ in range(2)]
    frames.append(link.heartbeat(now=0.5))
    frames += [link.stamp(src.stamp("/t", {}), now=0.6) for _ in range(2)]
    assert [f.link_seq for f in frames] == [1, 2, 3, 1, 2]
    assert isinstance(frames[2], Heartbeat)
    assert link.absolute == 5


def test_reset_makes_the_next_frame_zero_then_continues_from_one():
    link = LinkSequencer(bits=16)
    src = SourceSequencer(source="feed.a")
    link.stamp(src.stamp("/t", {}), now=0.0)
    link.reset()
    numbers = [link.stamp(src.stamp("/t", {}), now=0.0).link_seq for _ in range(3)]
    assert numbers == [0, 1, 2]


def test_poll_yields_a_heartbeat_only_after_an_idle_interval():
    link = LinkSequencer(bits=16, heartbeat_interval=1.0)
    assert link.poll(10.0) is None  # starts the clock
    assert link.next_deadline == 11.0
    assert link.poll(10.9) is None
    beat = link.poll(11.0)
    assert beat == Heartbeat(link_seq=1, timestamp=11.0)
    link.stamp(SourceSequencer(source="s").stamp("/t", {}), now=11.5)
    assert link.poll(12.4) is None  # traffic resets the idle timer
    assert link.poll(12.5).link_seq == 3


@pytest.mark.parametrize("interval", [0, -1, "1"])
def test_heartbeat_interval_must_be_positive(interval):
    with pytest.raises(InvalidConfigError):
        LinkSequencer(bits=16, heartbeat_interval=interval)


@pytest.mark.parametrize("source", ["", None, 3])
def test_source_name_must_be_a_non_empty_string(source):
    with pytest.raises(InvalidConfigError):
        SourceSequencer(source=source)


def test_a_link_stamps_only_publications_and_a_bad_one_consumes_no_number():
    link = LinkSequencer(bits=8)
    with pytest.raises(InvalidMessageError):
        link.stamp("not a publication", 0.0)
    pub = SourceSequencer(source="feed.a").stamp("/a", {}, PublishType.UPDATE)
    assert link.stamp(pub, 0.0).link_seq == 1


@pytest.mark.parametrize("now", ["soon", float("nan"), -float("inf"), None])
def test_a_bad_now_is_a_typed_error_and_consumes_no_number(now):
    link = LinkSequencer(bits=8, heartbeat_interval=1.0)
    pub = SourceSequencer(source="feed.a").stamp("/a", {}, PublishType.UPDATE)
    with pytest.raises(InvalidConfigError):
        link.stamp(pub, now)
    with pytest.raises(InvalidConfigError):
        link.poll(now)
    assert link.poll(0.0) is None
    assert link.poll(1.0) == Heartbeat(link_seq=1, timestamp=1.0)


def test_two_resets_at_one_now_send_different_frames_0():
    """A stub tells a copy of its reset frame from a new reset's by the heartbeat's timestamp:
    a link reset twice at one ``now`` must not send two equal frames 0."""
    link = LinkSequencer(bits=3)
    link.reset()
    first = link.heartbeat(5.0)
    link.heartbeat(5.0)  # number 1: an ordinary heartbeat keeps the now it is given
    link.reset()
    second = link.heartbeat(5.0)
    assert (first.link_seq, second.link_seq) == (0, 0)
    assert first.timestamp == 5.0
    assert second.timestamp is not None
    assert second.timestamp > first.timestamp
    link.reset()
    assert link.heartbeat(9.0).timestamp == 9.0  # a later now is kept as given
