"""A source replay stops where the link takes over.

After a link reset the subscriber asks for everything after what it delivered, naming the
highest link number it had seen (``link_through``). The component replays each source only up
to its first publication the link numbered after that point: the rest reaches the subscriber on
the link. Without the point, a replay runs to the journal's high-water and everything the new
link context carried meanwhile arrives twice (the stub drops the copies).
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqrepair import (
    GapError,
    Heartbeat,
    Publication,
    PublishType,
    RequestGap,
    RequestSourceGap,
    SubscriberStub,
)
from seqrepair.simulation import InMemoryComponent, LinkConditions, Simulation

PLAN = [
    (f"feed.{'ab'[i % 2]}", "/weather/wind/LEMD", {"speed": i % 90}, PublishType.UPDATE)
    for i in range(3000)
]


def run(component=None, **options):
    return Simulation(
        bits=8, plan=PLAN, conditions=LinkConditions(latency=0.05),
        resets_at=frozenset({500, 1500, 2500}), seed=1, component=component, **options,
    ).run()


def test_after_a_reset_the_replay_carries_only_what_the_new_context_does_not():
    aware, unaware = run(), run(InMemoryComponent(bits=8, cut_at_link=False))
    assert aware.exactly_once_in_order
    assert unaware.exactly_once_in_order
    assert aware.resets == unaware.resets == 3
    # The simulated reset frame is a publication: the subscriber saw it (the point is 0), so
    # the replay covers it too, and one copy per reset is all that is left.
    assert aware.stats.duplicates <= aware.resets
    assert unaware.stats.duplicates > 100
    assert aware.stats.source_repaired < unaware.stats.source_repaired


def stamped(link, seq):
    return Publication(topic="/t", source="feed.a", source_seq=seq, ptype=PublishType.UPDATE,
                       fields={}, link_seq=link)


def source_requests(events):
    return [e.request for e in events if isinstance(e, RequestSourceGap)]


def test_a_reset_asks_from_the_reset_frame_and_retries_keep_the_point():
    stub = SubscriberStub(bits=3, jitter=0.0, seed=1)
    for n in range(1, 10):  # link numbers 1..7, 1, 2
        stub.receive(stamped(stub.space.wire(n), n), now=0.0)
    (request,) = source_requests(stub.receive(Heartbeat(link_seq=0), now=0.1))
    assert request.link_through == 0  # only the new context's frame 0 seen
    (retry,) = source_requests(stub.poll(now=5.0))
    assert (retry.request_id, retry.link_through) == (request.request_id, 0)


def test_a_lost_context_asks_through_the_highest_number_seen_in_wire_form():
    stub = SubscriberStub(bits=3, nak_delay=0.0, jitter=0.0, seed=1)
    for n in (*range(1, 9), 11):  # absolute 9 and 10 missing; 11 is wire 4
        stub.receive(stamped(stub.space.wire(n), n), now=0.0)
    (gap,) = [e.request for e in stub.poll(now=0.1) if isinstance(e, RequestGap)]
    (request,) = source_requests(stub.receive(GapError("context-lost", gap), now=0.2))
    assert request.after == {"feed.a": 8}
    assert request.link_through == 4


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bits=st.sampled_from([3, 4, 8]),
    loss=st.floats(0.0, 0.3),
    reorder=st.floats(0.0, 0.5),
    duplicate=st.floats(0.0, 0.2),
    resets=st.sets(st.integers(0, 399), min_size=1, max_size=4),
    capacity=st.sampled_from([2, 16, 1 << 20]),
    announce=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_a_replay_cut_at_the_point_loses_nothing(
    bits, loss, reorder, duplicate, resets, capacity, announce, seed
):
    """Random loss, reordering and duplication around resets, at link widths that wrap every
    few frames and with contexts so small that link requests fall back to source replays: the
    cut replays still deliver every publication exactly once, in order."""
    report = Simulation(
        bits=bits, plan=PLAN[:400],
        conditions=LinkConditions(loss=loss, reorder=reorder, duplicate=duplicate),
        resets_at=frozenset(resets), context_capacity=capacity, announce_resets=announce,
        seed=seed,
    ).run()
    if not report.spurious_resets:  # see SimulationReport.spurious_resets
        assert report.unrecoverable == ()
    assert report.exactly_once_in_order
    assert report.subscriber_images == report.publisher_images
