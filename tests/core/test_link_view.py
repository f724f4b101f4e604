"""The link view can be lost; the source view cannot (issue 22 §1, DESIGN "Window discipline").

A link number is read within half the space of the number the stub expects, so a sender that
runs further ahead, or a stale frame (of an old link context, reordered past a reset, or an
answer to a voided request), can make a new frame read as a duplicate or take another frame's
slot. Every publication also carries its absolute source number: a frame the link calls old
and its source proves new means the link view is lost, never that the frame is. The stub then
anchors a new view on that frame and replays by source; nothing is dropped.

The first tests show each case by hand; the properties play the adversarial world of
``test_adversarial_world`` and the in-process simulation with stale frames that survive a reset
and a sender that may run past the window, at 3, 4, 5 and 8 bits.
"""

from __future__ import annotations

import attrs
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st
from test_adversarial_world import Config, Copy, World, moves, play
from test_stub import delivered, make, of, pub, replayed

from seqrepair import (
    GapError,
    Heartbeat,
    LinkReset,
    PublishType,
    ReplayComplete,
    RequestGap,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.simulation import LinkConditions, Simulation


def complete(request, **through):
    return ReplayComplete(through=through, request=request)


# ---------------------------------------------------------------------- by hand


def test_a_sender_a_lap_ahead_is_caught_by_source_numbers_and_replayed():
    # 3 bits: wire numbers 1..7, read within 3 of the expected one
    stub = make(bits=3)
    for n in (1, 2, 3):
        assert delivered(stub.receive(pub(n, n), 0.0)) == [("feed.a", n)]
    # the sender ran on: 4..7 and 8 (wire 1) went out, only wire 1 arrives; the link reads it
    # as number 1 again, a duplicate, but feed.a 8 was never delivered
    events = stub.receive(pub(1, 8), 0.1)
    assert delivered(events) == []
    (ask,) = of(RequestSourceGap, events)
    assert ask.request.after == {"feed.a": 3}
    assert ask.request.link_through == 1
    assert stub.stats.link_view_lost == 1
    replay = [stub.receive(replayed(n), 0.2) for n in (4, 5, 6, 7, 8)]
    assert [delivered(e) for e in replay] == [[("feed.a", n)] for n in (4, 5, 6, 7, 8)]
    assert stub.receive(complete(ask.request, **{"feed.a": 8}), 0.3) == []
    # the link goes on from the anchor: wire 2 is the next number
    assert stub.expected_link_seq == 2
    assert delivered(stub.receive(pub(2, 9), 0.4)) == [("feed.a", 9)]
    assert stub.stats.unrecoverable == 0


def test_a_slot_that_holds_another_publication_is_proof_and_neither_is_lost():
    stub = make(bits=8)
    stub.receive(pub(1, 1), 0.0)
    stale = pub(3, 40, source="feed.b")  # an old context's frame, reordered past a reset
    assert stub.receive(stale, 0.0) == []  # held: nothing tells it apart yet
    events = stub.receive(pub(3, 3), 0.0)  # the real number 3
    (ask,) = of(RequestSourceGap, events)
    assert ask.request.after == {"feed.a": 1}
    out = []
    for seq in (2, 3):
        out += delivered(stub.receive(replayed(seq), 0.1))
    out += delivered(stub.receive(replayed(40, source="feed.b"), 0.1))
    out += delivered(stub.receive(complete(ask.request, **{"feed.a": 3, "feed.b": 40}), 0.2))
    assert out == [("feed.a", 2), ("feed.a", 3), ("feed.b", 40)]
    assert delivered(stub.receive(pub(4, 4), 0.3)) == [("feed.a", 4)]


def test_a_heartbeat_in_the_slot_of_a_publication_is_proof():
    stub = make(bits=8)
    stub.receive(pub(1, 1), 0.0)
    stub.receive(Heartbeat(link_seq=3), 0.0)  # stale, in number 3's slot
    (ask,) = of(RequestSourceGap, stub.receive(pub(3, 2), 0.0))
    out = delivered(stub.receive(replayed(2), 0.1))
    stub.receive(complete(ask.request, **{"feed.a": 2}), 0.2)
    assert out == [("feed.a", 2)]
    assert stub.stats.link_view_lost == 1


def test_copies_of_the_same_frame_are_duplicates_not_proof():
    stub = make(bits=8)
    stub.receive(pub(1, 1), 0.0)
    stub.receive(pub(3, 3), 0.0)
    stub.receive(pub(3, 3), 0.0)  # a duplicate of a held frame
    stub.receive(pub(1, 1), 0.0)  # a duplicate of a delivered one
    stub.receive(Heartbeat(link_seq=5), 0.0)
    stub.receive(Heartbeat(link_seq=5), 0.0)
    assert stub.stats.link_view_lost == 0
    assert stub.stats.duplicates == 3
    assert stub.stats.source_requests_sent == 0


def test_a_late_original_of_a_given_up_gap_is_delivered_not_dropped():
    stub = make(bits=16, max_retries=1, retry_interval=0.1)
    stub.receive(pub(1, 1), 0.0)
    stub.receive(pub(3, 3), 0.0)
    stub.poll(0.1)  # number 2 is asked for
    events = stub.poll(1.0)  # then by source, and nothing answers until it is given up
    now = 1.0
    while not of(Unrecoverable, events) and now < 600.0:
        now = stub.next_deadline
        events = stub.poll(now)
    assert [e.source for e in of(Unrecoverable, events) if e.source] == ["feed.a"]
    assert delivered(events) == [("feed.a", 3)]
    now += 0.1
    # number 2's original arrives at last: the link says old, its source says new. Nothing of
    # feed.b was delivered after it and what the link holds of feed.b comes later: in order.
    events = stub.receive(pub(2, 7, source="feed.b"), now)
    assert delivered(events) == [("feed.b", 7)]
    assert of(RequestSourceGap, events) == []
    assert stub.stats.link_view_lost == 0


def test_a_stale_publication_its_source_delivered_does_not_fill_the_slot_of_a_lost_one():
    stub = make(bits=8)
    for n in (1, 2, 3):
        stub.receive(pub(n, n), 0.0)
    # number 4 (feed.a 4) is lost; a stale copy of feed.a 2 arrives numbered 4
    assert stub.receive(pub(4, 2), 0.0) == []
    assert stub.expected_link_seq == 4  # the slot is still missing
    (ask,) = of(RequestGap, stub.poll(0.1))
    assert (ask.request.link_from, ask.request.link_to) == (4, 4)
    events = stub.receive(pub(4, 4, retransmit=True), 0.2)
    assert delivered(events) == [("feed.a", 4)]


def test_a_reopened_slot_that_really_carried_a_delivered_publication_settles():
    stub = make(bits=8)
    stub.receive(pub(1, 1), 0.0)
    stub.receive(pub(2, 2), 0.0)
    stub.receive(pub(3, 2), 0.0)  # the component really numbered a copy of feed.a 2 as 3
    (ask,) = of(RequestGap, stub.poll(0.1))
    assert stub.receive(pub(3, 2, retransmit=True), 0.2) == []  # it says so: the slot is done
    assert stub.expected_link_seq == 4
    assert delivered(stub.receive(pub(4, 3), 0.3)) == [("feed.a", 3)]
    assert ask.request.link_from == 3


def test_a_stale_frame_in_a_reset_context_takes_no_slot_and_costs_no_replay():
    """A reset starts a new session: the new context's frames are read once the replay the
    reset owes has said, by ``through``, how far the old contexts went per source."""
    stub = make(bits=8)
    stub.receive(pub(1, 1), 0.0)
    (ask,) = of(RequestSourceGap, stub.receive(pub(0, 5), 0.1))  # reset: feed.a 5 at 0
    assert stub.receive(pub(2, 3, source="feed.b"), 0.1) == []  # stale, old context, slot 2
    assert stub.receive(pub(2, 7), 0.1) == []  # the new context's number 2: held, nothing asked
    out = []
    for seq in (2, 3, 4):
        out += delivered(stub.receive(replayed(seq), 0.2))
    out += delivered(stub.receive(replayed(3, source="feed.b"), 0.2))
    events = stub.receive(complete(ask.request, **{"feed.a": 4, "feed.b": 3}), 0.3)
    out += delivered(events)
    assert of(RequestSourceGap, events) == []
    assert out == [("feed.a", 2), ("feed.a", 3), ("feed.a", 4), ("feed.b", 3), ("feed.a", 5)]
    assert stub.stats.stale_dropped == 1
    assert stub.stats.link_view_lost == 0
    (gap,) = of(RequestGap, stub.poll(0.4))  # number 1 of the new context is missing
    assert (gap.request.link_from, gap.request.link_to) == (1, 1)
    events = stub.receive(pub(1, 6, retransmit=True), 0.5)
    assert delivered(events) == [("feed.a", 6), ("feed.a", 7)]


def test_the_floor_of_a_source_a_filter_keeps_from_the_stub_guards_the_fast_paths():
    """feed.b is answered through 9 and none of it delivered (a filter): a feed.b frame at or
    below 9 is stale on the in-order paths too, and feed.b's later deliveries still count."""
    stub = make(bits=8)
    stub.receive(pub(1, 1), 0.0)
    (ask,) = of(RequestSourceGap, stub.receive(pub(0, 2), 0.1))  # reset: feed.a 2 at 0
    done = stub.receive(complete(ask.request, **{"feed.a": 2, "feed.b": 9}), 0.2)
    assert delivered(done) == [("feed.a", 2)]
    assert stub.receive(pub(1, 3, source="feed.b"), 0.3) == []  # stale: no slot taken
    assert stub.receive_many([pub(1, 4, source="feed.b")], 0.3) == []
    assert stub.stats.stale_dropped == 2
    events = stub.receive_many([pub(1, 10, source="feed.b"), pub(2, 11, source="feed.b")], 0.4)
    assert [(p.source, p.source_seq) for e in events for p in e.publications] == [
        ("feed.b", 10), ("feed.b", 11)]
    # a copy of feed.b 11 in the next slot is not delivered again by the batch path
    again = stub.receive_many([pub(3, 11, source="feed.b"), pub(4, 12, source="feed.b")], 0.5)
    assert [p.source_seq for e in again for p in getattr(e, "publications", ())] == []
    assert delivered(again) == []


def test_a_give_up_of_the_replay_names_what_it_owed_and_counts_it():
    stub = make(bits=8, max_retries=2, retry_interval=0.1)
    stub.receive(pub(1, 1), 0.0)
    assert of(RequestSourceGap, stub.receive(pub(0, 5), 0.1))
    events = []
    for t in (0.3, 0.6, 1.0, 2.0):
        events += stub.poll(t)
    lost = of(Unrecoverable, events)
    assert [(u.source, u.after, u.reason) for u in lost] == [
        ("feed.a", 1, "give-up"), (None, None, "give-up")]
    assert stub.stats.unrecoverable >= 1
    assert stub.stats.sources_abandoned == 1
    assert delivered(events) == [("feed.a", 5)]  # the new context is released


def test_a_copy_read_ahead_that_its_source_has_does_not_move_the_highest_number():
    """A copy of frame 1 that lived past the window reads 3 ahead of the expected 5 (as 8, a
    number not sent yet). Its source has it, so it moves nothing: a source request names the
    highest number seen as ``link_through``, and the component, reading 8's wire number as its
    frame 1, would cut the replay short of the slots the stub then counts as covered."""
    stub = make(bits=3)
    for n in (1, 2, 3, 4):
        stub.receive(pub(n, n), 0.0)
    assert stub.receive(pub(1, 1), 0.1) == []
    assert stub.buffered == 0
    stub.receive(pub(6, 6), 0.1)  # 5 is missing
    (ask,) = of(RequestGap, stub.poll(0.2))
    (source,) = of(RequestSourceGap, stub.receive(GapError("context-lost", ask.request), 0.3))
    assert source.request.link_through == 6
    assert source.request.after == {"feed.a": 4}
    assert delivered(stub.receive(replayed(5), 0.4)) == [("feed.a", 5)]
    assert stub.receive(complete(source.request, **{"feed.a": 5}), 0.4) != []  # 6 drains
    assert stub.expected_link_seq == 7
    # the frame the component numbers 8 (wire 1) is the next one, not a copy
    assert delivered(stub.receive(pub(7, 7), 0.5) + stub.receive(pub(1, 8), 0.5)) == [
        ("feed.a", 7), ("feed.a", 8)]


def test_consumed_through_names_the_last_wire_number_consumed():
    stub = make(bits=3)
    assert stub.consumed_through is None  # no link frame yet
    stub.receive(pub(1, 1), 0.0)
    assert stub.consumed_through == 1
    stub.receive(pub(3, 3), 0.0)
    assert stub.consumed_through == 1  # 2 is missing
    stub.receive(Heartbeat(link_seq=2), 0.0)
    assert stub.consumed_through == 3
    for n in range(4, 9):
        stub.receive(pub(n if n <= 7 else n - 7, n), 0.0)
    assert stub.consumed_through == 1  # wrapped: 8 is wire 1
    stub.receive(pub(0, 9), 0.1)  # a reset: frame 0 is held for the replay
    assert stub.consumed_through == 0


def test_a_refused_replay_after_losing_the_view_names_the_loss_and_releases_the_anchor():
    stub = make(bits=3)
    for n in (1, 2, 3):
        stub.receive(pub(n, n), 0.0)
    (ask,) = of(RequestSourceGap, stub.receive(pub(1, 8), 0.1))
    events = stub.receive(GapError("refused", ask.request, "no"), 0.2)
    assert [(u.source, u.after) for u in of(Unrecoverable, events)] == [
        ("feed.a", 3), (None, None)]
    assert delivered(events) == [("feed.a", 8)]  # 4..7 are named lost, the anchor comes
    assert stub.stats.unrecoverable >= 1


# ---------------------------------------------------------------------- the adversarial world


class LooseWorld(World):
    """The adversarial world, with two of its network assumptions dropped on request:

    * ``stale``: a reset no longer kills what is on the wire: publications (and answers) of
      the old link context still arrive, in any order, after the new context's frames;
    * ``window``: the component sends up to this far ahead of the number the stub expects
      (the world's own rule is half the space), less than a lap.
    """

    def __init__(self, config: Config, *, stale: bool, window: int | bool) -> None:
        self.stale = stale
        self.window = window
        # a publication sent past the window to heal the stub (see heartbeat), with the number
        # the stub expected then, until the stub has moved: nothing more is sent meanwhile
        self.forced: tuple[Copy, int] | None = None
        super().__init__(config)

    def lapping(self) -> bool:
        """Would the next frame be a lap ahead of the stub? ``ahead`` is read from wire numbers,
        so after a publication forced ``space.max - 1`` ahead the next number reads as 0 ahead
        while it is a whole lap on. No reading of link numbers can see a lap (the frame takes
        the expected slot; its source may be one a filter thins out), so the world, which
        promises to stay less than a lap ahead, waits until the stub has moved: its expected
        number changed, or it took the forced frame and holds nothing (a whole lap on, or
        anchored there)."""
        if self.forced is None:
            return False
        copy, expected = self.forced
        if self.stub.expected_link_seq == expected and self.stub_generation == self.generation and (
            copy in self.to_subscriber or self.stub.buffered
        ):
            return True
        self.forced = None
        return False

    def has_credit(self) -> bool:
        if self.lapping():
            return False
        if self.window is False or self.healing:  # healing: the sender keeps the window
            return super().has_credit()
        return self.ahead() < self.window

    def heartbeat(self) -> None:
        """Heartbeats keep to the window (only publications run past it: a heartbeat carries
        no source number, so one a lap ahead in the slot of a lost frame cannot be told from
        it, which is why the component keeps the window). While healing, a component whose
        subscriber's window has not moved and who has nothing in flight either way sends a
        publication anyway (a new one if none is queued): stale frames may have led the stub
        to expect numbers not sent yet, and only a publication sent now can show it its view
        is lost. Then nothing more goes out until the stub has moved (:meth:`lapping`)."""
        if World.has_credit(self) and not self.lapping():
            super().heartbeat()
        elif (
            self.healing and self.ahead() > self.half and not self.stub.buffered
            and not self.to_subscriber and not self.to_component and not self.lapping()
        ):
            if not self.queue:  # one more, which the stub must deliver too
                extra = self._journal(self.config.sources[0])
                self.healing.append(extra)
                self.queue.append(extra)
            expected = self.stub.expected_link_seq
            self.send(self.queue.pop(0))
            self.forced = (self.to_subscriber[-1], expected)

    def reset(self, with_publication: bool) -> None:
        if not self.stale:
            super().reset(with_publication)
            return
        # Stale heartbeats are not kept: a heartbeat carries no source number, so one of an
        # old context in the slot of a lost frame cannot be told from it. A transport keeps
        # them out (over AMQP a new context is a new link); publications prove themselves.
        # An old reset frame is a stale frame now, no longer the attach.
        kept = [attrs.evolve(c, reset_frame=False) for c in self.to_subscriber
                if not all(isinstance(f, Heartbeat) for f in c.rest())]
        asked = list(self.to_component)
        super().reset(with_publication)
        self.to_subscriber[:0] = kept
        self.to_component[:0] = asked

    def expire(self) -> None:
        """Copies of older contexts live on (until they arrive, or the script drops them); a
        copy lives as many numbers as the sender may run ahead (half the space, or the window),
        so an answer to a request for the oldest number outstanding can still come."""
        lifetime = self.half if self.window is False else max(self.half, self.window)
        oldest = self.position - lifetime
        self.to_subscriber = [
            c for c in self.to_subscriber
            if (c.generation != self.generation and self.stale)
            or (c.generation == self.generation and (c.position is None or c.position >= oldest))
        ]
        self.to_component = [
            a for a in self.to_component
            if (a.generation != self.generation and self.stale)
            or (a.generation == self.generation and (a.position is None or a.position >= oldest))
        ]

    def arrivable(self) -> list[Copy]:
        """Frames of old contexts arrive after the new context's frames, never of a context
        the stub has not entered: one whose reset frame did not reach it (a later reset drops
        it, a heartbeat) brings link numbers of a link it never attached, and the first of
        them reads as the next number of its own (feed.a 2 in slot 1, where feed.a 1 was
        lost: with sources a filter thins out, nothing can tell). The world's premise holds:
        nothing of a new link overtakes its reset frame."""
        if self.stub_generation == self.generation:
            return self.to_subscriber
        return [c for c in self.to_subscriber
                if c.reset_frame or c.generation <= self.stub_generation]


@st.composite
def loose_configs(draw: st.DrawFn) -> tuple[Config, bool, int | bool]:
    bits = draw(st.sampled_from([3, 4, 5, 8]))
    config = Config(
        bits=bits,
        sources=draw(st.sampled_from([("feed.a",), ("feed.a", "feed.b", "feed.c")])),
        before_attach=draw(st.integers(0, 2)),
        context_capacity=draw(st.sampled_from([1, 3, 1 << 10])),
        replay_limit=draw(st.sampled_from([None, 2])),
        reliable_repair=draw(st.booleans()),
        announce_resets=draw(st.booleans()),
        missed_heartbeats=3,
    )
    half = (2**bits - 2) // 2
    window = draw(st.sampled_from([False, half + 1, 2**bits - 2]))
    stale = draw(st.booleans()) if window is not False else True
    return config, stale, window


def _one_source_capacity_1(sources: tuple[str, ...] = ("feed.a",)) -> Config:
    return Config(bits=3, sources=sources, before_attach=0, context_capacity=1,
                  replay_limit=None, reliable_repair=True, announce_resets=False,
                  missed_heartbeats=3)


P, S, A, D, X = ("publish", 0), ("send", 0), ("arrive", 0), ("drop", 0), ("duplicate", 0)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=loose_configs(), script=moves)
# The world's healing publication, forced 6 ahead of a stub that expects 1 (the reset's
# replay ran past the new context, whose frames 1..4 then took no slot), was followed by
# one a whole lap on, read as the expected number: the world now waits for the stub to move.
@example(setup=(_one_source_capacity_1(), False, 6),
         script=[P, P, P, ("reset", 6), A, S, A, P, P, S, S, A, A, P, P, S, S, A, D,
                 ("tick", 3), S, D])
# The same lap without a reset: frames 1..6 lost, the forced 7, then feed.b 2 a lap on.
@example(setup=(_one_source_capacity_1(("feed.a", "feed.b", "feed.c")), False, 6),
         script=[("publish", 1), P, P, P, P, P, S, S, S, S, S, S, D, D, D, D, D, D])
# A copy of frame 1 (feed.a 1, delivered) read 3 ahead of the expected 5 as number 8 moved the
# stub's highest number to one not sent yet; the replay it then asked for was cut at feed.a 6
# (the component read link_through 1 as its frame 1) and the number 8 sent later and lost was
# taken as covered: feed.a 8 was lost without an Unrecoverable (fixed in the stub).
@example(setup=(_one_source_capacity_1(), False, 6),
         script=[P, P, P, P, S, X, A, S, S, X, ("drop", 1), ("arrive", 1), P, X, X, A, A, P,
                 S, S, ("tick", 4), ("arrive", 2), P, S, ("drop", 2), ("tick", 4), A, A, A,
                 A, P, S, A, ("answer", 0), S, D])
# Two resets, the first one's frame 0 (a heartbeat) dropped by the second: its feed.a 2 reached
# a stub still in the first context, in the slot of the lost feed.a 1 (now: it waits).
@example(setup=(attrs.evolve(_one_source_capacity_1(), reliable_repair=False), True, False),
         script=[P, P, S, D, ("reset", 6), S, ("reset", 6)])
# Two resets at one now sent two equal frames 0: the stub took the second for a copy of the
# first and read the new context's feed.a 2 in the slot of the lost feed.a 1 (LinkSequencer).
@example(setup=(attrs.evolve(_one_source_capacity_1(), reliable_repair=False), True, False),
         script=[P, ("reset", 6), A, S, D, ("answer", 0), ("reset", 6)])
def test_no_silent_loss_with_stale_frames_or_a_sender_past_the_window(setup, script):
    """Invariants 1 and 2 of the adversarial world (each publication at most once, in order,
    as journaled; the rest named ``Unrecoverable``; no stall) hold with stale frames of old
    contexts and with a sender past the window; invariant 3 (a reliable repair channel loses
    nothing) holds with stale frames inside the window."""
    config, stale, window = setup
    note(f"stale={stale} window={window}")
    world = LooseWorld(config, stale=stale, window=window)
    play(world, script)
    world.heal()

    published = world.published()
    got = {(p.source, p.source_seq) for p in world.delivered}
    assert len(got) == len(world.delivered)
    missing = [p for p in published if (p.source, p.source_seq) not in got]
    assert [p for p in missing if not world.covered(p)] == []
    assert world.healing_delivered()
    if config.reliable_repair and window is False:
        assert world.unrecoverable == []
        assert missing == []


# ---------------------------------------------------------------------- the simulation


@settings(max_examples=80, deadline=None)
@given(
    bits=st.sampled_from([3, 4, 5, 8]),
    seed=st.integers(0, 10_000),
    loss=st.sampled_from([0.02, 0.1, 0.2]),
)
def test_the_simulation_with_loss_reordering_and_resets_delivers_exactly(bits, seed, loss):
    """Narrow links, 20% reordering, duplication, resets: the rules that keep stale frames out
    of slots (an original its source delivered by link reopens its slot) cost nothing here."""
    plan = [(f"feed.{'abc'[i % 3]}", f"/t/{i % 5}", {"v": i}, PublishType.UPDATE)
            for i in range(240)]
    report = Simulation(
        bits=bits, plan=plan,
        conditions=LinkConditions(loss=loss, reorder=0.2, duplicate=0.05, reorder_delay=0.05),
        resets_at=frozenset({60, 120, 180}), seed=seed,
    ).run(max_time=120)
    assert report.exactly_once_in_order, (report.stats, report.unrecoverable)
    assert report.unrecoverable == ()


def test_stale_publications_that_outlive_a_reset_cost_no_publication_at_8_bits():
    """The stress that lost a publication with ``unrecoverable 0`` (10% loss, 20% reordering,
    resets, an 8-bit link whose old publications outlive a reset), on fixed seeds."""
    plan = [(f"feed.{'abc'[i % 3]}", f"/t/{i % 5}", {"v": i}, PublishType.UPDATE)
            for i in range(400)]
    for seed in range(10):
        report = Simulation(
            bits=8, plan=plan,
            conditions=LinkConditions(loss=0.1, reorder=0.2, duplicate=0.05,
                                      reorder_delay=0.05),
            resets_at=frozenset({100, 200, 300}), seed=seed, stale_after_reset=True,
        ).run(max_time=120)
        assert report.events["stale"] > 0
        assert report.exactly_once_in_order, (seed, report.stats)
        assert report.unrecoverable == ()


# ---------------------------------------------------------------------- a replay in progress


def test_a_replay_whose_answers_keep_arriving_is_neither_retried_nor_given_up():
    """Issue 22 §3: a component killed and restarted under load streams a long replay; the
    stub gave up after 6 retries while answers were still coming. Answers (delivered or
    duplicates) reset the give-up clock and hold retries back; when they stop, a retry asks
    only after what was delivered."""
    stub = make(bits=16, max_retries=3, retry_interval=0.2)
    stub.receive(pub(1, 1), 0.0)
    (ask,) = of(RequestSourceGap, stub.receive(pub(0, 1), 0.0))  # a reset mid-stream
    now, asked = 0.0, []
    # 20 s of replay, an answer every 0.1 s: for the first 3 s only ones delivered already
    # (a component replaying from further back than asked), then new ones
    for step in range(200):
        now += 0.1
        asked += of(RequestSourceGap, stub.poll(now))
        stub.receive(replayed(1 if step < 30 else step - 28), now)
    assert asked == []
    assert of(Unrecoverable, stub.poll(now)) == []
    assert stub.stats.sources_abandoned == 0
    # the answers stop: the retry asks after what was delivered, not from the start
    last = stub.last_delivered["feed.a"]
    retry = of(RequestSourceGap, stub.poll(now + 1.0))
    assert [r.request.after for r in retry] == [{"feed.a": last}]
    assert retry[0].request.request_id == ask.request.request_id


def test_a_replay_that_stops_answering_is_given_up_named_and_counted():
    stub = make(bits=16, max_retries=2, retry_interval=0.2)
    stub.receive(pub(1, 1), 0.0)
    stub.receive(pub(0, 9), 0.0)  # a reset: feed.a 9 waits for the replay
    stub.receive(replayed(2), 0.1)
    events = []
    for t in (0.5, 1.0, 2.0, 4.0):
        events += stub.poll(t)
    assert [(u.source, u.after, u.reason) for u in of(Unrecoverable, events)] == [
        ("feed.a", 2, "give-up"), (None, None, "give-up")]
    assert stub.stats.unrecoverable == 1
    assert stub.stats.sources_abandoned == 1
    assert delivered(events) == [("feed.a", 9)]


def test_a_resent_copy_of_an_announced_reset_heartbeat_is_no_new_reset():
    """A range request of the old context that the component answers from the new one (the
    numbers straddle the reset) resends its frame 0, flagged as a retransmission. That copy
    of the announced reset's heartbeat, arriving after the replay released the new context,
    is a duplicate: taken for a new reset, it voided the context the component goes on
    numbering, and the window stalled (bits=4, seed=60, resets {12, 33}, announced)."""
    stub = make(bits=4)
    stub.receive(pub(1, 1), 0.0)
    (ask,) = of(RequestSourceGap, stub.link_reset(0.1))
    beat = Heartbeat(link_seq=0, timestamp=0.1)
    assert stub.receive(beat, 0.1) == []
    assert stub.receive(pub(1, 3), 0.1) == []  # held until the replay says how far
    out = delivered(stub.receive(replayed(2), 0.2))
    out += delivered(stub.receive(complete(ask.request, **{"feed.a": 2}), 0.2))
    out += delivered(stub.receive(pub(2, 4), 0.3))
    assert out == [("feed.a", 2), ("feed.a", 3), ("feed.a", 4)]
    events = stub.receive(attrs.evolve(beat, retransmit=True), 0.4)
    assert of(LinkReset, events) == []
    assert of(RequestSourceGap, events) == []
    assert stub.stats.resets == 1
    assert stub.expected_link_seq == 3
    assert delivered(stub.receive(pub(3, 5), 0.5)) == [("feed.a", 5)]


def test_a_stale_copy_answering_the_probe_for_the_next_number_asks_the_source():
    """The replay a reset owed ran past the new context's start (the stub asked after what
    an answer of the old context had delivered), so the new context's first frames sit at or
    below the stale floor and none takes a slot. The copy that answers the probe for the next
    number proves the component sent it: the slot goes to source repair rather than staying
    asked for forever (bits=5, seed=64778, resets {1, 18, 154, 169}, announced)."""
    stub = make(bits=8)
    stub.receive(pub(1, 1), 0.0)
    (ask,) = of(RequestSourceGap, stub.link_reset(0.1))
    stub.receive(Heartbeat(link_seq=0, timestamp=0.1), 0.1)
    out = []
    for seq in (2, 3, 4, 5):
        out += delivered(stub.receive(replayed(seq), 0.2))
    stub.receive(complete(ask.request, **{"feed.a": 5}), 0.2)
    assert out == [("feed.a", 2), ("feed.a", 3), ("feed.a", 4), ("feed.a", 5)]
    assert stub.expected_link_seq == 1
    # the new context's frame 1 carried feed.a 4: the answer to the probe for number 1
    (again,) = of(RequestSourceGap, stub.receive(pub(1, 4, retransmit=True), 0.3))
    assert again.request.after == {"feed.a": 5}
    assert again.request.link_through == 1
    stub.receive(complete(again.request, **{"feed.a": 5}), 0.4)
    assert stub.expected_link_seq == 2
    assert delivered(stub.receive(pub(2, 6), 0.5)) == [("feed.a", 6)]
    assert stub.stats.unrecoverable == 0


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bits=st.sampled_from([3, 4, 5, 8]),
    seed=st.integers(0, 100_000),
    loss=st.sampled_from([0.02, 0.1, 0.2]),
    reorder=st.sampled_from([0.2, 0.5]),
    size=st.integers(60, 240),
    resets=st.sets(st.integers(1, 239), min_size=1, max_size=4),
    sources=st.sampled_from(["a", "abc"]),
    announce=st.booleans(),
)
@example(bits=4, seed=60, loss=0.2, reorder=0.5, size=60, resets={12, 33}, sources="a",
         announce=True)  # a resent copy of the announced reset's heartbeat: no new reset
@example(bits=5, seed=64778, loss=0.1, reorder=0.2, size=205, resets={1, 18, 154, 169},
         sources="a", announce=True)  # the probe's stale answer proves the next number sent
# An old context's resent frame past the highest number, taken for a tail probe, claimed
# numbers the new context had not sent (issue 27 audit: the stub's stale-window stall): a
# lone resent copy, or one older than what its source carried or holds in this context,
# moves nothing.
@example(bits=4, seed=0, loss=0.2, reorder=0.2, size=120, resets={117}, sources="a",
         announce=False)
@example(bits=5, seed=587, loss=0.02, reorder=0.5, size=104, resets={1, 86}, sources="a",
         announce=True)
@example(bits=5, seed=591, loss=0.02, reorder=0.5, size=108, resets={12, 85}, sources="a",
         announce=True)
@example(bits=5, seed=506, loss=0.02, reorder=0.2, size=152, resets={1, 7, 135}, sources="a",
         announce=True)  # an old original and its resent copy, both held until the replay
@example(bits=4, seed=49382, loss=0.02, reorder=0.5, size=190, resets={119, 121, 136},
         sources="abc", announce=True)  # an old answer and its duplicate: no tail probe
def test_stale_publications_after_resets_never_cost_a_publication(
    bits, seed, loss, reorder, size, resets, sources, announce
):
    """Issue 22 §1, "the core too": publications of old link contexts outlive each reset and
    arrive, reordered, among the new context's frames, numbered as its slots. A reset is a
    new session: the new context is read once the replay its reset owes has said (``through``)
    how far the old ones went, and nothing at or below that takes a slot. Every publication is
    delivered once, in its source's order, and nothing is given up, at 3, 4, 5 and 8 bits.
    Announced resets too (``link_reset``, the in-band frame 0 a heartbeat the link may delay
    past later frames: it is still the announced reset's frame, not a new reset)."""
    plan = [(f"feed.{sources[i % len(sources)]}", f"/t/{i % 5}", {"v": i}, PublishType.UPDATE)
            for i in range(size)]
    report = Simulation(
        bits=bits, plan=plan,
        conditions=LinkConditions(loss=loss, reorder=reorder, duplicate=0.05,
                                  reorder_delay=0.05),
        resets_at=frozenset(r for r in resets if r < size), seed=seed, stale_after_reset=True,
        announce_resets=announce,
    ).run(max_time=60)
    note(f"stale={report.events['stale']} stats={report.stats}")
    assert report.exactly_once_in_order, (report.stats, report.unrecoverable)
    assert report.unrecoverable == ()
    assert len(report.published) == size  # no stall: everything was published and delivered
