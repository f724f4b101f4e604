"""``SubscriberStub.receive_many``: a transfer's frames at once, as ``receive`` takes each.

The batch path must be the per-frame path with its deliveries grouped: the same deliveries in
the same order, the same requests and notices, the same counters and the same state afterwards,
whatever the link did (loss, duplication, reordering, resets, replays) and however the frames
were split into batches.
"""

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqrepair import (
    Delivered,
    DeliveredRun,
    Heartbeat,
    InvalidMessageError,
    InvalidSequenceError,
    LinkSequencer,
    RequestGap,
    SourceSequencer,
    SubscriberStub,
)

SOURCES = ["feed.a", "feed.b", "feed.c"]


def flattened(events):
    """The events with every DeliveredRun spelled out as one Delivered per publication."""
    out = []
    for event in events:
        if isinstance(event, DeliveredRun):
            out.extend(Delivered(pub) for pub in event.publications)
        else:
            out.append(event)
    return out


def snapshot(stub):
    return (stub.stats, stub.expected_link_seq, stub.buffered, stub.last_delivered,
            stub.next_deadline)


def in_order(count, bits=16, sources=("feed.a",)):
    sequencers = [SourceSequencer(source=name) for name in sources]
    link = LinkSequencer(bits=bits)
    return [link.stamp(sequencers[i % len(sources)].stamp("/weather/wind/LEMD", {"n": i}), 0.0)
            for i in range(count)]


def test_an_in_order_batch_is_one_run_of_deliveries():
    frames = in_order(300, bits=8, sources=("feed.a", "feed.b"))  # wraps past 255
    stub = SubscriberStub(bits=8)

    events = stub.receive_many(frames, 1.0)

    assert events == [DeliveredRun(tuple(frames))]
    assert stub.stats.delivered == 300
    assert stub.expected_link_seq == 46  # 301 wraps to 1 after 255 and on to 46
    assert stub.last_delivered == {"feed.a": 150, "feed.b": 150}


def test_frames_after_a_gap_are_buffered_and_the_run_resumes_once_it_is_filled():
    frames = in_order(10)
    stub = SubscriberStub(bits=16, nak_delay=0.0)

    first = stub.receive_many(frames[:3] + frames[4:], 1.0)
    refill = stub.receive_many([frames[3]], 1.1)

    assert first == [DeliveredRun(tuple(frames[:3]))]
    assert [e.publication for e in refill] == frames[3:]
    assert stub.stats.gaps_detected == 1
    assert stub.buffered == 0


def test_a_publication_already_delivered_by_source_does_not_take_the_next_slot_of_a_run():
    frames = in_order(3)
    stale = attrs.evolve(frames[2], link_seq=4)  # a later link number, an old source number
    real = in_order(4)[3]  # what link number 4 carried, lost on the way

    stub = SubscriberStub(bits=16, nak_delay=0.05)
    events = stub.receive_many([*frames, stale], 1.0)

    assert events == [DeliveredRun(tuple(frames))]
    assert stub.stats.duplicates == 1
    # the stale copy may sit in the slot of a frame that was lost: the slot is asked for again
    assert stub.expected_link_seq == 4
    (ask,) = [e for e in stub.poll(1.1) if isinstance(e, RequestGap)]
    assert (ask.request.link_from, ask.request.link_to) == (4, 4)
    resent = stub.receive(attrs.evolve(real, retransmit=True), 1.2)
    assert [e.publication.source_seq for e in resent if isinstance(e, Delivered)] == [4]
    assert stub.expected_link_seq == 5


@pytest.mark.parametrize(("bad", "error"), [
    (object(), InvalidMessageError),
    (Heartbeat(link_seq=70_000), InvalidSequenceError),  # outside a 16-bit space
])
def test_an_invalid_frame_anywhere_in_a_batch_leaves_the_stub_unchanged(bad, error):
    frames = in_order(5)
    stub = SubscriberStub(bits=16)
    stub.receive_many(frames[:2], 1.0)
    before = snapshot(stub)

    with pytest.raises(error):
        stub.receive_many([*frames[2:4], bad, frames[4]], 2.0)

    assert snapshot(stub) == before
    assert stub.receive_many(frames[2:], 2.0) == [DeliveredRun(tuple(frames[2:]))]


def test_an_empty_batch_is_nothing():
    stub = SubscriberStub()
    assert stub.receive_many([], 1.0) == []
    assert stub.stats == SubscriberStub().stats


# --------------------------------------------------------------------------- differential


@st.composite
def links(draw):
    """Frames a misbehaving link hands over: lost, duplicated, reordered, reset, replayed."""
    bits = draw(st.sampled_from([3, 4, 8]))
    sequencers = {name: SourceSequencer(source=name) for name in SOURCES}
    link = LinkSequencer(bits=bits)
    sent = []
    published = []
    for action in draw(st.lists(st.sampled_from(["pub"] * 8 + ["again", "heartbeat", "reset"]),
                                max_size=120)):
        if action == "pub":
            pub = sequencers[draw(st.sampled_from(SOURCES))].stamp("/w/x", {"n": len(sent)})
            published.append(pub)
            sent.append(link.stamp(pub, 0.0))
        elif action == "again" and published:  # sent once more, under a new link number
            sent.append(link.stamp(draw(st.sampled_from(published)), 0.0))
        elif action == "heartbeat":
            sent.append(link.heartbeat(0.0))
        else:
            link.reset()
    frames = []
    for frame in sent:
        fate = draw(st.sampled_from(["keep"] * 6 + ["lose", "twice", "swap", "replay"]))
        if fate == "lose":
            continue
        frames.append(frame)
        if fate == "twice":
            frames.append(frame)
        elif fate == "swap" and len(frames) > 1:
            frames[-1], frames[-2] = frames[-2], frames[-1]
        elif fate == "replay" and hasattr(frame, "source"):
            frames.append(frame.with_link(None, retransmit=True))  # a source-level replay
    cuts = sorted(draw(st.lists(st.integers(0, len(frames)), max_size=8)))
    batches = [frames[a:b] for a, b in zip([0, *cuts], [*cuts, len(frames)], strict=True)]
    return bits, batches


@settings(max_examples=300, deadline=None)
@given(links())
def test_receive_many_is_receive_frame_by_frame_with_runs_grouped(link):
    bits, batches = link
    one_by_one = SubscriberStub(bits=bits, nak_delay=0.0, seed=3)
    batched = SubscriberStub(bits=bits, nak_delay=0.0, seed=3)

    now = 0.0
    for batch in batches:
        now += 0.01
        expected = [event for frame in batch for event in one_by_one.receive(frame, now)]
        assert flattened(batched.receive_many(batch, now)) == expected
        assert snapshot(batched) == snapshot(one_by_one)
        now += 0.3  # past the retry interval: polls ask for gaps and source replays alike
        assert batched.poll(now) == one_by_one.poll(now)
