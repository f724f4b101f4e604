"""A link's cover point: where a source replay may stop because the link itself carries on.

A subscriber whose link context broke asks for a replay after the numbers it delivered and
names the highest link number it had seen. Per source, the replay may stop just before the
first publication the link numbered after that number; reading the number any later than the
subscriber meant only makes the replay longer, never shorter.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqrepair import LinkContext, LinkSequencer, SourceSequencer
from seqrepair.core.errors import InvalidSequenceError


class Link:
    """A link context fed as a component feeds it: publications of sources a and b."""

    def __init__(self, bits=8, capacity=1000):
        self.context = LinkContext(bits=bits, capacity=capacity)
        self.sequencer = LinkSequencer(bits=bits)
        self.sources = {name: SourceSequencer(source=name) for name in ("a", "b")}
        self.sent = []  # (wire link number, source, source number)

    def send(self, *names):
        for name in names:
            frame = self.sequencer.stamp(self.sources[name].stamp("/t", {}), now=0.0)
            self.context.record(frame)
            self.sent.append((frame.link_seq, name, frame.source_seq))

    def beat(self):
        frame = self.sequencer.heartbeat(0.0)
        self.context.record(frame)
        self.sent.append((frame.link_seq, None, None))

    def reset(self):
        self.sequencer.reset()
        self.beat()  # the reset frame, numbered 0


def test_each_source_stops_just_before_its_first_publication_numbered_after_the_point():
    link = Link()
    link.send("a", "b", "a", "a", "b", "a", "b")  # link 1..7; a: 1..4, b: 1..3
    cover = link.context.cover(3)  # the subscriber had seen link number 3
    assert cover.limit("a") == 2  # a's 3rd went out as link 4
    assert cover.limit("b") == 1  # b's 2nd as link 5


def test_a_source_the_link_has_not_carried_since_has_no_limit_until_it_does():
    link = Link()
    link.send("a", "b", "a")
    cover = link.context.cover(3)
    assert cover.limit("b") is None  # the replay reads all the journal holds of b
    link.beat()
    link.send("b")  # the link numbers b's 2nd meanwhile (link 5): later pages stop before it
    assert cover.limit("b") == 1


def test_the_number_is_read_as_its_latest_use_in_a_link_that_wrapped():
    link = Link(bits=3)  # numbers 1..7, then 1 again
    link.send(*["a"] * 16)  # link numbers 1..7, 1..7, 1, 2; a: 1..16
    cover = link.context.cover(2)  # link numbers 2, 9 and 16 were all 2: the latest counts
    assert cover.limit("a") is None  # nothing numbered after the 16th yet
    link.send("a")
    assert cover.limit("a") == 16


def test_after_a_reset_the_reset_frame_is_the_point_a_new_context_starts_from():
    link = Link()
    link.send("a", "b", "a")
    link.reset()
    link.send("b", "a")
    cover = link.context.cover(0)
    assert (cover.limit("a"), cover.limit("b")) == (2, 1)


def test_a_number_the_current_context_has_not_used_covers_none_of_it():
    link = Link()
    link.send(*["a"] * 20)
    link.reset()  # the subscriber, not yet aware, names a number of the old context
    link.send("a", "b")
    cover = link.context.cover(17)
    assert (cover.limit("a"), cover.limit("b")) == (20, 0)


def test_frames_the_context_no_longer_holds_only_make_the_replay_longer():
    link = Link(capacity=4)
    link.send("a", "b", "a", "b", "a", "b", "a", "b")  # only link 5..8 still held
    cover = link.context.cover(2)  # the frames 3 and 4 after the point are gone
    assert cover.limit("a") == 2  # a's 3rd (link 5), the first held, not a's 2nd (link 3)
    assert cover.limit("b") == 2


def test_a_reset_during_the_replay_leaves_sources_not_yet_seen_unlimited():
    link = Link()
    link.send("a")
    cover = link.context.cover(1)
    link.reset()
    link.send("a", "b")
    assert cover.limit("a") is None  # the new context's frames belong to another point
    assert cover.limit("b") is None


@pytest.mark.parametrize("number", [-1, 256, 1.5, "3", None])
def test_a_number_outside_the_link_space_is_a_typed_error(number):
    with pytest.raises(InvalidSequenceError):
        LinkContext(bits=8).cover(number)


@given(
    bits=st.sampled_from([3, 4, 8]),
    names=st.lists(st.sampled_from(["a", "b", None]), min_size=1, max_size=60),
    seen=st.integers(0, 59),
    capacity=st.sampled_from([3, 10, 1000]),
)
def test_the_link_carries_everything_of_a_source_past_its_limit(bits, names, seen, capacity):
    """Whatever a subscriber saw, every publication past a source's limit went out on the link
    after the last frame it saw: a replay that stops at the limit leaves nothing behind."""
    link = Link(bits=bits, capacity=capacity)
    for name in names:
        link.send(name) if name else link.beat()
    seen = min(seen, len(link.sent) - 1)
    cover = link.context.cover(link.sent[seen][0])
    for name in ("a", "b"):
        limit = cover.limit(name)
        if limit is None:
            continue
        later = [seq for _, source, seq in link.sent[seen + 1 :] if source == name]
        carried_from = link.sources[name].high_water - len(later) + 1
        assert limit + 1 >= carried_from
