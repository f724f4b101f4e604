"""Marked tail probes in the simulation (issue 27: the stub never stalls): a component whose
window is full and whose subscriber has not moved for a step resends its newest frame marked
with its link context; the stub takes it by ``receive_tail_probe`` only when it is in that
context (an old context's probe, reordered past a reset, is read as any resend: the epoch
check of the AMQP adapter). With losses, reordering, duplicates, resets (announced or not),
stale frames of old contexts and replays that run past the new context's first frames (a
component before ``link_through``: the stale-window case), every publication arrives once,
in order, nothing is given up, at 3, 4 and 5 bits."""

from __future__ import annotations

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from seqrepair import Publication, PublishType, SubscriberStub
from seqrepair.simulation import InMemoryComponent, LinkConditions, Simulation


def _run(bits: int, seed: int, loss: float, reorder: float, size: int, resets: set[int],
         sources: str, announce: bool, stale: bool, cut: bool, mark: bool = True):
    plan = [(f"feed.{sources[i % len(sources)]}", f"/t/{i % 5}", {"v": i}, PublishType.UPDATE)
            for i in range(size)]
    return Simulation(
        bits=bits, plan=plan,
        conditions=LinkConditions(loss=loss, reorder=reorder, duplicate=0.05,
                                  reorder_delay=0.05),
        resets_at=frozenset(r for r in resets if r < size), seed=seed,
        stale_after_reset=stale, announce_resets=announce,
        component=InMemoryComponent(bits, 1 << 20, None, cut_at_link=cut),
        tail_probes=True, mark_tail_probes=mark,
    ).run(max_time=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bits=st.sampled_from([3, 4, 5]),
    seed=st.integers(0, 100_000),
    loss=st.sampled_from([0.05, 0.2, 0.35]),
    reorder=st.sampled_from([0.0, 0.2, 0.5]),
    size=st.integers(60, 200),
    resets=st.sets(st.integers(1, 199), min_size=1, max_size=4),
    sources=st.sampled_from(["a", "abc"]),
    announce=st.booleans(),
    stale=st.booleans(),
    cut=st.booleans(),
)
def test_marked_tail_probes_never_cost_or_repeat_a_publication(
    bits, seed, loss, reorder, size, resets, sources, announce, stale, cut
):
    report = _run(bits, seed, loss, reorder, size, resets, sources, announce, stale, cut)
    note(f"stats={report.stats} events={dict(report.events)}")
    assert report.exactly_once_in_order, (report.stats, report.unrecoverable)
    assert report.unrecoverable == ()
    assert len(report.delivered) == size  # no stall


def test_marked_probes_move_windows_of_stale_frames_and_lose_nothing(monkeypatch):
    # replays past the new context's first frames (no cut at link_through), heavy loss: the
    # windows fill with stale frames (publications the reset's replay delivered), and the
    # marked probes move the stub's highest number over them
    moved = []
    take = SubscriberStub.receive_tail_probe

    def counting(stub, frame, now):
        highest = stub._highest  # the stub's own state, read to see what the mark did
        out = take(stub, frame, now)
        if stub._highest > highest and isinstance(frame, Publication) and (
                frame.source_seq <= stub._stale_floor.get(frame.source, 0)):
            moved.append(frame)
        return out

    monkeypatch.setattr(SubscriberStub, "receive_tail_probe", counting)
    for seed in range(10):
        report = _run(4, seed, 0.35, 0.0, 120, {30, 70}, "a", True, False, False)
        assert report.exactly_once_in_order
        assert report.unrecoverable == ()
        assert len(report.delivered) == 120
    assert moved
