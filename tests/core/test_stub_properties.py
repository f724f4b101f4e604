"""Properties of the stub under random loss, reordering, duplication, wraparound and resets.

The simulation runs a real component (sequencers, link context, journal replay) against the
real stub over a link that misbehaves as hypothesis chooses, at 3, 4, 8 and 16 bits so the link
numbers wrap many times. The application must see every publication exactly once, per source in
order, and end with the publisher's images.
"""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from seqrepair import (
    Delivered,
    GapError,
    Heartbeat,
    HeartbeatOverdue,
    Publication,
    PublishType,
    ReplayComplete,
    RequestGap,
    RequestSourceGap,
    SeqRepairError,
    SequenceSpace,
    SubscriberStub,
    Unrecoverable,
)
from seqrepair.simulation import LinkConditions, Simulation

TOPICS = [f"/weather/wind/{code}" for code in ("LEMD", "EGLL", "LFPG", "EDDF")]


@st.composite
def plans(draw, max_size):
    sources = draw(st.lists(st.sampled_from(["feed.a", "feed.b", "feed.c"]), min_size=1,
                            max_size=3, unique=True))
    size = draw(st.integers(min_value=1, max_value=max_size))
    rows = []
    for _ in range(size):
        fields = draw(st.dictionaries(st.sampled_from(["speed", "gust", "dir"]),
                                      st.one_of(st.none(), st.integers(0, 99)), max_size=3))
        rows.append((draw(st.sampled_from(sources)), draw(st.sampled_from(TOPICS)), fields,
                     draw(st.sampled_from(list(PublishType)))))
    return rows


conditions = st.builds(
    LinkConditions,
    loss=st.floats(0.0, 0.3),
    duplicate=st.floats(0.0, 0.2),
    reorder=st.floats(0.0, 0.5),
    request_loss=st.floats(0.0, 0.3),
    # up to past the stub's retry interval (0.2 s): answers to an earlier attempt arrive late
    latency=st.floats(0.001, 0.5),
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bits=st.sampled_from([3, 4, 8, 16]),
    plan=plans(max_size=300),
    link=conditions,
    reset_points=st.sets(st.integers(0, 299), max_size=3),
    context_capacity=st.sampled_from([2, 8, 64, 1 << 20]),
    announce_resets=st.booleans(),
    replay_limit=st.sampled_from([None, 1, 5, 40]),
    seed=st.integers(0, 2**32),
)
def test_every_publication_arrives_exactly_once_in_order(
    bits, plan, link, reset_points, context_capacity, announce_resets, replay_limit, seed
):
    """With announced resets the reset frame itself may be lost, duplicated or reordered; a
    replay limit makes long source replays go on in pieces (``ReplayComplete(more=True)``)."""
    report = Simulation(
        bits=bits, plan=plan, conditions=link, resets_at=frozenset(reset_points),
        context_capacity=context_capacity, announce_resets=announce_resets,
        replay_limit=replay_limit, seed=seed,
    ).run(max_time=300.0)
    if not report.spurious_resets:  # see SimulationReport.spurious_resets
        assert report.unrecoverable == ()
    assert report.exactly_once_in_order
    assert report.subscriber_images == report.publisher_images


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    bits=st.sampled_from([3, 4, 8]),
    plan=plans(max_size=400),
    seed=st.integers(0, 2**32),
)
def test_without_context_loss_delivery_follows_link_order_exactly(bits, plan, seed):
    link = LinkConditions(loss=0.1, duplicate=0.1, reorder=0.3)
    report = Simulation(bits=bits, plan=plan, conditions=link, seed=seed).run()
    def numbers(publications):
        return [(p.source, p.source_seq) for p in publications]

    assert numbers(report.delivered) == numbers(report.published)
    assert report.stats.source_requests_sent == 0


def test_many_wraps_at_eight_bits_with_a_reset():
    plan = [(f"feed.{i % 3}", TOPICS[i % 4], {"n": i}, PublishType.UPDATE) for i in range(5000)]
    report = Simulation(bits=8, plan=plan, conditions=LinkConditions(loss=0.02, reorder=0.1,
                        duplicate=0.02), resets_at=frozenset({2500}), seed=7).run()
    assert report.exactly_once_in_order
    assert report.resets == 1
    assert report.stats.link_repaired > 0
    assert report.stats.resets == 1


def test_a_reset_long_after_the_last_delivery_is_replayed_in_pieces():
    plan = [(f"feed.{i % 3}", TOPICS[i % 4], {"n": i}, PublishType.UPDATE) for i in range(2000)]
    report = Simulation(bits=8, plan=plan, conditions=LinkConditions(loss=0.05, reorder=0.1),
                        context_capacity=8, resets_at=frozenset({600, 1400}),
                        replay_limit=7, seed=3).run()
    assert report.unrecoverable == ()
    assert report.exactly_once_in_order
    assert report.stats.source_continued > 0
    assert report.subscriber_images == report.publisher_images


def test_an_announced_reset_survives_losing_its_reset_frame():
    plan = [(f"feed.{i % 3}", TOPICS[i % 4], {"n": i}, PublishType.UPDATE) for i in range(3000)]
    report = Simulation(bits=4, plan=plan, conditions=LinkConditions(loss=0.3, reorder=0.2,
                        duplicate=0.1), resets_at=frozenset({700, 1500, 2200}),
                        announce_resets=True, seed=1).run()
    assert report.events["reset_frame_lost"] == 2  # of three: the seed makes it so
    assert report.unrecoverable == ()
    assert report.exactly_once_in_order
    assert report.stats.resets == 3


class ReorderBuffer(RuleBasedStateMachine):
    """The stub's reorder buffer against a model: deliver the contiguous prefix, nothing more.

    Frames arrive in any order within the window, duplicated at will, across the wrap of a
    3-bit space; no time passes, so nothing is requested or given up.
    """

    def __init__(self):
        super().__init__()
        self.stub = SubscriberStub(bits=3, max_buffer=1000)
        self.space = SequenceSpace(bits=3)
        self.received = set()  # absolute positions that have arrived
        self.next_undelivered = 1  # the model's delivery point
        self.delivered = []

    def frame(self, position):
        wire = self.space.wire(position)
        if position % 4 == 0:
            return Heartbeat(link_seq=wire)
        return Publication(topic="/t", source="s", source_seq=position,
                           ptype=PublishType.UPDATE, fields={}, link_seq=wire)

    @rule(offset=st.integers(0, 2))
    def arrive(self, offset):
        # within the window the sender's flow control allows (< half the space ahead)
        position = self.next_undelivered + offset
        self.feed(position)

    @precondition(lambda self: self.next_undelivered > 1)
    @rule(back=st.integers(1, 3))
    def duplicate_of_old(self, back):
        self.feed(max(1, self.next_undelivered - back))

    def feed(self, position):
        for event in self.stub.receive(self.frame(position), now=0.0):
            assert isinstance(event, Delivered), event
            self.delivered.append(event.publication.source_seq)
        self.received.add(position)
        while self.next_undelivered in self.received:
            self.next_undelivered += 1

    @invariant()
    def delivers_exactly_the_contiguous_prefix(self):
        expected = [p for p in range(1, self.next_undelivered) if p % 4 != 0]
        assert self.delivered == expected
        assert self.stub.buffered == len([p for p in self.received if p >= self.next_undelivered])
        assert self.stub.expected_link_seq == self.space.wire(self.next_undelivered)


TestReorderBuffer = ReorderBuffer.TestCase
TestReorderBuffer.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)


frames = st.one_of(
    st.builds(Heartbeat, link_seq=st.integers(0, 40)),
    st.builds(Publication, topic=st.just("/t"), source=st.sampled_from(["a", "b"]),
              source_seq=st.integers(1, 30), ptype=st.just(PublishType.UPDATE),
              fields=st.just({}), link_seq=st.one_of(st.none(), st.integers(0, 40)),
              retransmit=st.booleans()),
    st.integers(), st.text(max_size=3), st.none(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(frames, st.booleans()), max_size=60))
def test_hostile_input_raises_only_seqrepair_errors_and_never_breaks_order(script):
    stub = SubscriberStub(bits=4, nak_delay=0.0, retry_interval=0.01, max_retries=2)
    now = 0.0
    last = {}
    for frame, then_poll in script:
        now += 0.01
        try:
            events = stub.receive(frame, now)
        except SeqRepairError:
            events = []
        if then_poll:
            events += stub.poll(now)
        for event in events:
            if isinstance(event, Delivered):
                pub = event.publication
                assert pub.source_seq > last.get(pub.source, 0)
                last[pub.source] = pub.source_seq


@settings(max_examples=500, deadline=None)
@given(
    since=st.floats(0.0, 2e9),
    interval=st.floats(1e-3, 3600.0),
    missed_heartbeats=st.integers(1, 50),
    late_by=st.integers(0, 20),
)
def test_heartbeat_overdue_counts_whole_intervals_despite_float_rounding(
    since, interval, missed_heartbeats, late_by
):
    """The alert fires missed_heartbeats intervals into a silence and says so: never one
    short because the deadline's sum rounded down; each later alert adds one; a poll that comes
    late counts the intervals that really passed."""

    def silent_stub():
        stub = SubscriberStub(heartbeat_interval=interval, missed_heartbeats=missed_heartbeats,
                              overdue_policy="wait")
        stub.receive(Publication(topic="/t", source="s", source_seq=1, link_seq=1), now=since)
        return stub

    def alerts(events):
        return [(e.missed, e.since) for e in events if isinstance(e, HeartbeatOverdue)]

    stub = silent_stub()
    deadline = stub.next_deadline
    assert stub.poll(now=math.nextafter(deadline, -math.inf)) == []
    assert alerts(stub.poll(now=deadline)) == [(missed_heartbeats, since)]
    for more in (1, 2, 3):
        assert alerts(stub.poll(now=stub.next_deadline)) == [(missed_heartbeats + more, since)]

    stub = silent_stub()
    intervals = missed_heartbeats + late_by
    assert alerts(stub.poll(now=since + intervals * interval)) == [(intervals, since)]



@st.composite
def reattaches(draw):
    """A subscriber re-attaches after ``before`` publications (some of whose frames it never
    got) and sends resume_point(). The component either kept the link context and goes on
    numbering it (perhaps also answering the request with a replay, which may come before or
    among the link's frames), or lost it: it replays by source, then starts the link at 0, the
    new link perhaps overtaking the replay's ReplayComplete. ``after`` more publications follow
    on the link; some of those frames are lost once, never a reset frame or the last frame."""
    before = draw(st.integers(1, 6))
    after = draw(st.integers(0, 10))
    return {
        "before": before,
        "after": after,
        "lost_before": draw(st.sets(st.integers(1, before))),
        "kept": draw(st.booleans()),
        "also_replays": draw(st.booleans()),
        "complete_at": draw(st.integers(0, after + 1)),  # how many link frames precede it
        "overlap": draw(st.integers(0, after)),  # new publications the lost context's replay has
        "lost_after": draw(st.sets(st.integers(0, after), max_size=3)),
    }


@settings(max_examples=300, deadline=None)
@given(reattaches())
def test_a_reattach_delivers_everything_once_whether_or_not_the_context_was_kept(case):
    """After resume_point() the stub asks for nothing more by source and gives nothing up:
    a kept context is repaired by link range, a lost one by the replay that answers it."""
    before, after = case["before"], case["after"]
    total = before + after
    every = [Publication(topic="/t", source="s", source_seq=n) for n in range(1, total + 1)]
    stub = SubscriberStub(bits=16, nak_delay=0.05, seed=1)
    events = []
    for n in range(1, before + 1):  # the old link
        if n not in case["lost_before"]:
            events += stub.receive(every[n - 1].with_link(n), 0.0)
    request = stub.resume_point()
    events = [e for e in events if isinstance(e, Delivered)]

    def replay(through):
        after_seq = request.after.get("s", 0)
        frames = [p.with_link(None, retransmit=True) for p in every[after_seq:through]]
        return [*frames, ReplayComplete(through={"s": through}, request=request)]

    if case["kept"]:  # the link goes on from before + 1, and stays up
        link = {n: every[n - 1].with_link(n) for n in range(1, total + 1)}
        link[total + 1] = Heartbeat(link_seq=total + 1)
        frames = [link[n] for n in range(before + 1, total + 2)]
        answer = replay(total) if case["also_replays"] else []
        head = []
    else:  # the replay, then the new link from 0
        link = {n: p.with_link(n) for n, p in enumerate(every[before:])}
        link[0] = link[0] if after else Heartbeat(link_seq=0)
        frames = [link[n] for n in sorted(link)]
        *head, complete = replay(before + case["overlap"])
        answer = [complete]
    lost = {id(frames[i]) for i in case["lost_after"] if 0 < i < len(frames) - 1}
    at = min(case["complete_at"], len(frames))
    stream = head + frames[:at] + answer + frames[at:]

    now = 0.0
    for frame in stream:
        now += 0.001
        if id(frame) not in lost:
            events += stub.receive(frame, now)
    while now < 30.0:  # the component answers link requests from the context it has
        now = max(now + 0.001, stub.next_deadline or now + 1.0)
        for event in stub.poll(now):
            events.append(event)
            if isinstance(event, RequestGap):
                req = event.request
                for n in range(req.link_from, req.link_to + 1):
                    frame = link.get(n)
                    if isinstance(frame, Publication):
                        frame = frame.with_link(n, retransmit=True)
                    if frame is not None:
                        events += stub.receive(frame, now)

    got = [e.publication.source_seq for e in events if isinstance(e, Delivered)]
    assert got == list(range(1, total + 1))
    assert [e for e in events if isinstance(e, RequestSourceGap | Unrecoverable)] == []
    assert stub.stats.source_requests_sent == 1


def _kept_context_passed_over(rng):
    """A kept link context that passed over, of each source, numbers a replay gave that the
    stub never read, its resume_point() request, the link's frames after it (``link`` by
    number), and the request's answer cut where the link carries on (``replay``, ``cut``)."""
    stub = SubscriberStub(bits=16, nak_delay=0.05, seed=1)
    sources = ("a", "b", "c")
    top = dict.fromkeys(sources, 0)
    link: dict[int, Publication] = {}
    events = []
    number = 0
    for _ in range(rng.randint(1, 6)):  # the old link, some of it lost
        source = rng.choice(sources)
        top[source] += 1
        number += 1
        link[number] = Publication("/t", source, top[source]).with_link(number)
        if number == 1 or rng.random() > 0.25:
            events += stub.receive(link[number], 0.0)
    through = number
    request = stub.resume_point()
    for source in sources:  # passed over as given, never numbered
        top[source] += rng.randint(0, 4)
    for _ in range(rng.randint(0, 8)):  # numbered after the resume point
        source = rng.choice(sources)
        top[source] += 1
        number += 1
        link[number] = Publication("/t", source, top[source]).with_link(number)
    replay: list[object] = []
    cut: dict[str, int] = {}
    for source in sources:
        first = min([p.source_seq for n, p in link.items() if n > through
                     and p.source == source] or [top[source] + 1])
        replay += [Publication("/t", source, seq).with_link(None, retransmit=True)
                   for seq in range(request.after.get(source, 0) + 1, first)]
        cut[source] = first - 1
    replay.append(ReplayComplete(through=cut, request=request))
    return stub, sources, top, link, events, through, number, request, replay, cut


def _interleaved_some_lost(rng, stub, frames, replay, events):
    """``frames`` (some lost, the last kept) and ``replay`` interleaved in a random order into
    ``stub``, its events added to ``events``; the time it ends at."""
    lost = {id(frame) for frame in frames[:-1] if rng.random() < 0.2}
    stream: list[object] = []
    while replay or frames:
        if frames and (not replay or rng.random() < 0.5):
            stream.append(frames.pop(0))
        else:
            stream.append(replay.pop(0))
    now = 0.0
    for frame in stream:
        now += 0.001
        if id(frame) not in lost:
            events += stub.receive(frame, now)
    return now


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False))
def test_a_kept_context_that_passed_numbers_over_delivers_them_in_order_whatever_overtakes(rng):
    """Review of the late replay of a continued resume: the component kept the link context
    but passed over, of each source, numbers a replay gave that the stub never read (they went
    with the connection). Its answer to resume_point() replays each source after what the stub
    delivered, cut where the link carries on past the resume point (so it alone brings what
    was passed over); the link's frames after that point, some lost and resent by range, come
    in any interleaving with that answer. Every source is delivered once, complete and in
    order, with no Unrecoverable (on main before the fix, about half the cases lost some)."""
    stub, sources, top, link, events, through, number, _request, replay, cut = (
        _kept_context_passed_over(rng))
    frames: list[object] = [link[n] for n in range(through + 1, number + 1)]
    frames.append(Heartbeat(link_seq=number + 1))
    now = _interleaved_some_lost(rng, stub, frames, replay, events)
    while now < 60.0:
        now = max(now + 0.001, stub.next_deadline or now + 1.0)
        for event in stub.poll(now):
            events.append(event)
            if isinstance(event, RequestGap):  # resent from the context
                for n in range(event.request.link_from, event.request.link_to + 1):
                    events += stub.receive(link[n].with_link(n, retransmit=True)
                                           if n in link else Heartbeat(link_seq=n), now)
            elif isinstance(event, RequestSourceGap):  # the answer ended: its end again
                events += stub.receive(ReplayComplete(through=cut, request=event.request), now)
    for source in sources:
        mine = [e.publication.source_seq for e in events
                if isinstance(e, Delivered) and e.publication.source == source]
        assert mine == list(range(1, top[source] + 1)), (source, stub.stats)
    assert [e for e in events if isinstance(e, Unrecoverable)] == []


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False))
def test_a_refused_resume_of_a_kept_context_is_asked_again_and_delivers_everything(rng):
    """As above, but the component refuses the resume's request (its resend budget): the
    refusal overtakes or follows the link's frames, the stub asks again and the retry is
    answered. Every source is delivered once, complete and in order, with no Unrecoverable."""
    stub, sources, top, link, events, through, number, request, replay, cut = (
        _kept_context_passed_over(rng))
    answer = replay
    replay = [GapError("refused", request, "over the resend budget")]
    frames: list[object] = [link[n] for n in range(through + 1, number + 1)]
    frames.append(Heartbeat(link_seq=number + 1))
    now = _interleaved_some_lost(rng, stub, frames, replay, events)
    while now < 60.0:
        now = max(now + 0.001, stub.next_deadline or now + 1.0)
        for event in stub.poll(now):
            events.append(event)
            if isinstance(event, RequestGap):  # resent from the context
                for n in range(event.request.link_from, event.request.link_to + 1):
                    events += stub.receive(link[n].with_link(n, retransmit=True)
                                           if n in link else Heartbeat(link_seq=n), now)
            elif isinstance(event, RequestSourceGap):  # the retry: answered in full
                for frame in answer[:-1]:
                    events += stub.receive(frame, now)
                events += stub.receive(ReplayComplete(through=cut, request=event.request), now)
                answer = []
    for source in sources:
        mine = [e.publication.source_seq for e in events
                if isinstance(e, Delivered) and e.publication.source == source]
        assert mine == list(range(1, top[source] + 1)), (source, stub.stats)
    assert [e for e in events if isinstance(e, Unrecoverable)] == []
