"""The component's link context answers gap requests, or says the context is lost."""

import pytest

from seqrepair import GapError, GapRequest, Heartbeat, LinkContext, LinkSequencer, SourceSequencer
from seqrepair.core.errors import InvalidConfigError


def filled(bits, count, capacity=100, max_range=50):
    context = LinkContext(bits=bits, capacity=capacity, max_range=max_range)
    link = LinkSequencer(bits=bits)
    src = SourceSequencer(source="feed.a")
    for _ in range(count):
        context.record(link.stamp(src.stamp("/t", {}), now=0.0))
    return context, link, src


def test_answers_a_range_across_the_wrap_as_retransmissions():
    context, _, _ = filled(bits=3, count=12)  # link 1..7, 1..5
    frames = context.answer(GapRequest(link_from=6, link_to=2))
    assert [(f.link_seq, f.source_seq) for f in frames] == [(6, 6), (7, 7), (1, 8), (2, 9)]
    assert all(f.retransmit for f in frames)


def test_heartbeats_are_resent_as_they_were_marked_as_retransmissions():
    context = LinkContext(bits=8)
    beat = Heartbeat(link_seq=1, timestamp=3.0)
    context.record(beat)
    assert context.answer(GapRequest(1, 1)) == [
        Heartbeat(link_seq=1, timestamp=3.0, retransmit=True)
    ]
    assert context.answer(GapRequest(2, 2)) == []  # the next number: not sent yet


def test_a_range_more_than_half_the_space_behind_is_context_lost_not_unanswered():
    context = LinkContext(bits=4)  # numbers 1..15, half 7
    for n in range(1, 13):
        context.record(Heartbeat(link_seq=n, timestamp=float(n)))
    # 12 - 3 = 9 behind: read as 6 ahead, which no subscriber of this context can ask for
    error = context.answer(GapRequest(3, 3))
    assert isinstance(error, GapError)
    assert error.reason == "context-lost"
    assert error.request == GapRequest(3, 3)
    # 7 behind (half the space) is still answered
    assert [f.link_seq for f in context.answer(GapRequest(5, 5))] == [5]
    assert context.answer(GapRequest(13, 13)) == []  # the probe of the next number


def test_range_older_than_the_capacity_is_context_lost():
    context, _, _ = filled(bits=16, count=30, capacity=10)
    error = context.answer(GapRequest(link_from=5, link_to=6))
    assert isinstance(error, GapError)
    assert error.reason == "context-lost"
    assert error.request == GapRequest(5, 6)


def test_absurd_range_is_refused_and_out_of_space_is_refused():
    context, _, _ = filled(bits=16, count=30, max_range=50)
    assert context.answer(GapRequest(link_from=1, link_to=60000)).reason == "refused"
    assert context.answer(GapRequest(link_from=1, link_to=70000)).reason == "refused"


def test_a_reset_voids_the_old_context():
    context, link, src = filled(bits=16, count=20)
    link.reset()
    for _ in range(3):
        context.record(link.stamp(src.stamp("/t", {}), now=0.0))
    assert [f.source_seq for f in context.answer(GapRequest(1, 2))] == [22, 23]
    assert context.answer(GapRequest(3, 3)) == []  # not sent yet: nothing to resend


def test_a_link_that_has_sent_nothing_yet_has_lost_nothing():
    # a subscriber's overdue probe can reach the component before the link's first frame
    fresh = LinkContext(bits=16)
    assert fresh.answer(GapRequest(1, 1)) == []
    assert fresh.answer(GapRequest(1, 40)) == []
    assert fresh.answer(GapRequest(1, 60000)).reason == "refused"  # the range is still bounded
    fresh.record(Heartbeat(link_seq=1, timestamp=0.0))
    assert fresh.answer(GapRequest(1, 2)) == [Heartbeat(link_seq=1, timestamp=0.0, retransmit=True)]


def test_a_resend_reads_the_context_as_it_is_iterated():
    context, link, src = filled(bits=3, count=6, capacity=4)  # holds link 3..6
    resend = context.resend(GapRequest(link_from=3, link_to=6))
    assert len(resend) == 4
    frames = iter(resend)
    assert next(frames).source_seq == 3
    context.record(link.stamp(src.stamp("/t", {}), now=0.0))  # link 7: drops link 3
    assert next(frames).source_seq == 4  # still held: read now, not when asked
    for _ in range(2):  # links 1 and 2 after the wrap: 4 and 5 dropped
        context.record(link.stamp(src.stamp("/t", {}), now=0.0))
    assert list(frames) == [GapError("context-lost", GapRequest(5, 6), "range no longer held")]


def test_a_resend_of_a_context_that_was_reset_meanwhile_ends_without_a_word():
    context, link, src = filled(bits=16, count=10)
    resend = context.resend(GapRequest(link_from=2, link_to=5))
    link.reset()
    context.record(link.stamp(src.stamp("/t", {}), now=0.0))
    assert list(resend) == []  # the subscriber voided its requests of the old context


def test_frames_without_link_numbers_cannot_be_recorded():
    context = LinkContext(bits=16)
    src = SourceSequencer(source="feed.a")
    with pytest.raises(InvalidConfigError, match="link number"):
        context.record(src.stamp("/t", {}))


@pytest.mark.parametrize(
    ("option", "value"), [("capacity", 0), ("max_range", -1), ("capacity", "9")]
)
def test_bad_context_configuration_is_a_typed_error(option, value):
    with pytest.raises(InvalidConfigError):
        LinkContext(bits=16, **{option: value})
