"""The subscriber stub, scenario by scenario (DESIGN.md, "Subscriber stub semantics")."""

import pytest

from seqrepair import (
    BufferOverflow,
    Delivered,
    Disconnect,
    GapError,
    GapRequest,
    Heartbeat,
    HeartbeatOverdue,
    InvalidSequenceError,
    LinkReset,
    Publication,
    PublishType,
    ReplayComplete,
    RequestGap,
    RequestSourceGap,
    SourceGapRequest,
    SubscriberStub,
    Unrecoverable,
)
from seqrepair.core.errors import InvalidConfigError, InvalidMessageError


def pub(link, seq, source="feed.a", retransmit=False):
    return Publication(topic="/weather/wind/LEMD", source=source, source_seq=seq,
                       ptype=PublishType.UPDATE, fields={"speed": seq}, link_seq=link,
                       retransmit=retransmit)


def replayed(seq, source="feed.a"):
    return pub(None, seq, source=source, retransmit=True)


def delivered(events):
    return [(e.publication.source, e.publication.source_seq) for e in events
            if isinstance(e, Delivered)]


def of(kind, events):
    return [e for e in events if isinstance(e, kind)]


def make(**options):
    defaults = dict(bits=16, heartbeat_interval=1.0, missed_heartbeats=3, nak_delay=0.05,
                    jitter=0.0, seed=1)
    defaults.update(options)
    return SubscriberStub(**defaults)


def test_in_order_frames_are_delivered_at_once_and_heartbeats_only_fill_numbers():
    stub = make()
    assert delivered(stub.receive(pub(1, 10), now=0.0)) == [("feed.a", 10)]
    assert stub.receive(Heartbeat(link_seq=2), now=0.1) == []
    assert delivered(stub.receive(pub(3, 11), now=0.2)) == [("feed.a", 11)]
    stats = stub.stats
    assert (stats.delivered, stats.heartbeats, stats.duplicates) == (2, 1, 0)
    assert stub.expected_link_seq == 4


def test_a_frame_ahead_is_buffered_and_released_when_the_gap_fills():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    assert stub.receive(pub(3, 3), now=0.01) == []
    assert stub.buffered == 1
    events = stub.receive(pub(2, 2), now=0.02)  # a late original within the nak delay
    assert delivered(events) == [("feed.a", 2), ("feed.a", 3)]
    assert stub.stats.requests_sent == 0


def test_missing_range_is_requested_only_after_the_nak_delay():
    stub = make(nak_delay=0.05)
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(5, 5), now=1.0)
    assert stub.next_deadline == pytest.approx(1.05)
    assert of(RequestGap, stub.poll(now=1.04)) == []
    assert of(RequestGap, stub.poll(now=1.05)) == [RequestGap(GapRequest(2, 4))]
    events = []
    for link in (2, 3, 4):
        events += stub.receive(pub(link, link, retransmit=True), now=1.1)
    assert delivered(events) == [("feed.a", n) for n in (2, 3, 4, 5)]
    assert stub.stats.link_repaired == 3


def test_gap_request_crosses_the_wrap():
    stub = make(bits=3)  # 1..7
    for link in range(1, 8):
        stub.receive(pub(link, link), now=0.0)
    stub.receive(pub(3, 10), now=0.0)  # 8 and 9 (wire 1 and 2) missing
    assert of(RequestGap, stub.poll(now=1.0)) == [RequestGap(GapRequest(1, 2))]


def test_nearby_gaps_coalesce_and_several_gaps_go_out_together():
    stub = make(coalesce=1)
    for link in (1, 3, 5, 6, 20):
        stub.receive(pub(link, link), now=0.0)
    requests = of(RequestGap, stub.poll(now=1.0))
    # 2 and 4 are one received number apart: one request; 7..19 is two further away.
    assert requests == [RequestGap(GapRequest(2, 4)), RequestGap(GapRequest(7, 19))]


def test_outstanding_requests_are_bounded():
    stub = make(coalesce=0, max_outstanding=2)
    stub.receive(pub(1, 1), now=0.0)
    for link in (3, 5, 7, 9):
        stub.receive(pub(link, link), now=0.0)
    first = of(RequestGap, stub.poll(now=1.0))
    assert first == [RequestGap(GapRequest(2, 2)), RequestGap(GapRequest(4, 4))]
    stub.receive(pub(2, 2, retransmit=True), now=1.01)
    stub.receive(pub(4, 4, retransmit=True), now=1.01)
    assert of(RequestGap, stub.poll(now=1.02)) == [
        RequestGap(GapRequest(6, 6)), RequestGap(GapRequest(8, 8))]


def test_retries_back_off_then_ask_by_source_and_move_on():
    stub = make(retry_interval=0.1, backoff=2.0, max_retries=3)
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)
    sent_at = []
    now = 0.0
    events = []
    while now < 5.0 and not of(RequestSourceGap, events):
        now = stub.next_deadline
        events = stub.poll(now)
        if of(RequestGap, events):
            sent_at.append(round(now, 3))
    assert sent_at == [0.05, 0.15, 0.35]  # waits of 0.1 then 0.2 (backoff), no jitter
    # the link context never answered: the journal may, so the range is asked for by source
    # (a link range given up would name no publication)
    (ask,) = of(RequestSourceGap, events)
    assert ask.request.after == {"feed.a": 1}
    assert of(Unrecoverable, events) == []
    events = stub.receive(replayed(2), now + 0.01)
    events += stub.receive(ReplayComplete(through={"feed.a": 2}, request=ask.request), now + 0.02)
    assert delivered(events) == [("feed.a", 2), ("feed.a", 3)]  # it does not stall forever
    assert stub.stats.unrecoverable == 0


def test_a_source_repair_nobody_answers_ends_in_an_unrecoverable_naming_the_source():
    stub = make(retry_interval=0.1, backoff=2.0, max_retries=2)
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)
    events: list = []
    now = 0.0
    while now < 600.0 and not of(Unrecoverable, events):
        now = stub.next_deadline
        events = stub.poll(now)
    named = [(e.source, e.after, e.reason) for e in of(Unrecoverable, events) if e.source]
    assert named == [("feed.a", 1, "give-up")]
    assert delivered(events) == [("feed.a", 3)]  # named, then it moves on
    assert stub.stats.unrecoverable >= 1


def test_jitter_spreads_retries_deterministically_per_seed():
    def retry_time(seed):
        stub = make(jitter=0.5, seed=seed)
        stub.receive(pub(1, 1), now=0.0)
        stub.receive(pub(3, 3), now=0.0)
        stub.poll(now=0.05)
        return stub.next_deadline

    assert retry_time(1) == retry_time(1)
    assert len({retry_time(seed) for seed in range(5)}) > 1
    assert all(0.25 <= retry_time(seed) <= 0.35 for seed in range(5))


def test_duplicates_are_dropped_and_counted():
    stub = make()
    events = stub.receive(pub(1, 1), now=0.0)
    events += stub.receive(pub(1, 1), now=0.0)
    events += stub.receive(pub(2, 2), now=0.0)
    events += stub.receive(pub(1, 1, retransmit=True), now=0.0)
    assert delivered(events) == [("feed.a", 1), ("feed.a", 2)]
    assert stub.stats.duplicates == 2


def test_link_reset_holds_new_frames_until_the_source_replay_completes():
    stub = make()
    for link in (1, 2):
        stub.receive(pub(link, link), now=0.0)
    stub.receive(pub(4, 4), now=0.0)  # 3 is missing when the link resets
    events = stub.receive(pub(0, 7), now=0.1)
    assert of(LinkReset, events) == [LinkReset(previous_expected=3, abandoned=2)]
    request = SourceGapRequest(after={"feed.a": 2})
    assert of(RequestSourceGap, events) == [RequestSourceGap(request)]
    assert delivered(stub.receive(pub(1, 8), now=0.1)) == []  # held
    replay = []
    for seq in (3, 4, 5, 6, 7):
        replay += stub.receive(replayed(seq), now=0.2)
    assert delivered(replay) == [("feed.a", n) for n in (3, 4, 5, 6, 7)]
    # the component cuts the replay where the new context starts (LinkCover): feed.a 8 is the
    # link's, so through names 7; what is at or below it is of the old contexts (stale)
    done = stub.receive(ReplayComplete(through={"feed.a": 7}, request=request), now=0.3)
    assert delivered(done) == [("feed.a", 8)]  # 7 was already delivered by the replay
    assert delivered(stub.receive(pub(2, 9), now=0.3)) == [("feed.a", 9)]
    assert stub.stats.resets == 1


def test_a_replay_past_the_new_context_costs_a_replay_not_the_publication():
    # a component that replays to its high-water whatever the link carries: feed.a 8, the
    # new context's number 1, reads as stale; its slot is found missing, and the answer to
    # the link request (at or below the floor too) is left to a replay
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    (ask,) = of(RequestSourceGap, stub.receive(pub(0, 2), now=0.1))
    stub.receive(pub(1, 3), now=0.1)  # held
    done = stub.receive(ReplayComplete(through={"feed.a": 3}, request=ask.request), now=0.2)
    assert delivered(done) == [("feed.a", 2)]
    stub.receive(Heartbeat(link_seq=2), now=0.3)
    (gap,) = of(RequestGap, stub.poll(0.4))
    assert (gap.request.link_from, gap.request.link_to) == (1, 1)
    (again,) = of(RequestSourceGap, stub.receive(pub(1, 3, retransmit=True), now=0.5))
    assert delivered(stub.receive(replayed(3), now=0.6)) == [("feed.a", 3)]
    stub.receive(ReplayComplete(through={"feed.a": 3}, request=again.request), now=0.6)
    assert delivered(stub.receive(pub(3, 4), now=0.7)) == [("feed.a", 4)]
    assert stub.stats.unrecoverable == 0


def test_announced_reset_needs_no_frame_zero_when_that_frame_is_lost():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)  # 2 is missing when the new context is announced
    events = stub.link_reset(now=0.1)
    assert of(LinkReset, events) == [LinkReset(previous_expected=2, abandoned=2)]
    request = SourceGapRequest(after={"feed.a": 1})
    assert of(RequestSourceGap, events) == [RequestSourceGap(request)]
    assert stub.expected_link_seq == 0
    # frame 0 (the reset heartbeat) is lost; the new context's frame 1 is held
    assert delivered(stub.receive(pub(1, 5), now=0.1)) == []
    replay = stub.receive(replayed(2), now=0.2) + stub.receive(replayed(3), now=0.2)
    done = stub.receive(ReplayComplete(through={"feed.a": 4}, request=request), now=0.3)
    assert delivered(replay + done) == [("feed.a", 2), ("feed.a", 3), ("feed.a", 5)]
    assert (stub.stats.resets, stub.stats.unrecoverable) == (1, 0)
    assert stub.expected_link_seq == 2


def test_frame_zero_of_an_announced_reset_is_the_same_reset_not_another():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    announced = stub.link_reset(now=0.1)
    assert stub.receive(Heartbeat(link_seq=0, timestamp=5.0), now=0.1) == []
    request = of(RequestSourceGap, announced)[0].request
    stub.receive(pub(1, 2), now=0.1)
    done = stub.receive(ReplayComplete(through={"feed.a": 1}, request=request), now=0.2)
    assert delivered(done) == [("feed.a", 2)]
    assert (stub.stats.resets, stub.stats.source_requests_sent) == (1, 1)


def test_frame_zero_arriving_after_the_replay_released_the_context_is_not_a_new_reset():
    stub = make()
    request = of(RequestSourceGap, stub.link_reset(now=0.0))[0].request
    stub.receive(ReplayComplete(through={}, request=request), now=0.1)
    assert stub.expected_link_seq == 1
    assert of(LinkReset, stub.receive(Heartbeat(link_seq=0), now=0.2)) == []
    assert delivered(stub.receive(pub(1, 1), now=0.2)) == [("feed.a", 1)]
    assert stub.stats.resets == 1


def test_the_announced_resets_frame_zero_overtaken_by_later_frames_is_still_its_frame():
    # a transport that reorders: the in-band frame 0 (a heartbeat) comes after frame 1. The
    # adapter announces every reset, so it is this reset's frame, not a new reset that would
    # void frame 1 and ask by numbers the component reads in its own context
    stub = make()
    stub.link_reset(now=0.0)
    stub.receive(pub(1, 1), now=0.1)
    assert of(LinkReset, stub.receive(Heartbeat(link_seq=0), now=0.2)) == []
    assert stub.stats.resets == 1


def test_a_second_frame_zero_after_the_new_context_has_frames_is_a_new_reset():
    stub = make()
    stub.link_reset(now=0.0)
    stub.receive(Heartbeat(link_seq=0), now=0.1)  # the announced reset's frame
    stub.receive(pub(1, 1), now=0.1)
    events = stub.receive(Heartbeat(link_seq=0), now=0.2)
    assert len(of(LinkReset, events)) == 1
    assert stub.stats.resets == 2


def test_a_stale_replay_complete_is_ignored():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(0, 5), now=0.1)
    stale = ReplayComplete(through={"feed.a": 9}, request=SourceGapRequest(after={"x": 1}))
    assert stub.receive(stale, now=0.2) == []
    assert stub.buffered == 1  # still held


def test_context_lost_falls_back_to_source_level_repair_and_covers_the_gap():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(2, 2, source="feed.b"), now=0.0)
    stub.receive(pub(6, 6), now=0.0)
    (request,) = of(RequestGap, stub.poll(now=1.0))
    events = stub.receive(GapError("context-lost", request.request), now=1.1)
    (source_request,) = of(RequestSourceGap, events)
    assert source_request.request.after == {"feed.a": 1, "feed.b": 2}
    replay = stub.receive(replayed(4), now=1.2) + stub.receive(replayed(6), now=1.2)
    assert delivered(replay) == [("feed.a", 4), ("feed.a", 6)]
    done = stub.receive(ReplayComplete(through={"feed.a": 6, "feed.b": 2}), now=1.3)
    assert done == []
    assert stub.expected_link_seq == 7  # moved past the covered gap and drained 6 as a dup
    assert delivered(stub.receive(pub(7, 7), now=1.4)) == [("feed.a", 7)]
    assert stub.stats.source_covered == 3


@pytest.mark.parametrize("reason", ["trimmed"])  # refused: repaired by source (test_stub_refused)
def test_a_trimmed_link_gap_is_unrecoverable_and_skipped(reason):
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(4, 4), now=0.0)
    events = stub.receive(GapError(reason, GapRequest(2, 3)), now=0.5)
    assert of(Unrecoverable, events) == [
        Unrecoverable(source=None, after=None, reason=reason, link_from=2, link_to=3)]
    assert delivered(events) == [("feed.a", 4)]


def test_refused_source_replay_names_each_source_and_releases_held_frames():
    stub = make()
    stub.receive(pub(1, 3), now=0.0)
    events = stub.receive(pub(0, 9), now=0.1)
    (req,) = of(RequestSourceGap, events)
    events = stub.receive(GapError("refused", req.request), now=0.2)
    assert of(Unrecoverable, events) == [
        Unrecoverable(source="feed.a", after=3, reason="refused"),
        Unrecoverable(source=None, after=None, reason="refused"),  # sources not named
    ]
    assert delivered(events) == [("feed.a", 9)]


def test_a_replayed_frame_without_a_replay_in_flight_is_not_delivered_out_of_order():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)
    assert stub.receive(replayed(5), now=0.0) == []
    assert stub.stats.stray_dropped == 1


def test_heartbeat_overdue_alerts_and_probes_for_the_next_number():
    stub = make(heartbeat_interval=1.0, missed_heartbeats=3)
    stub.receive(pub(1, 1), now=10.0)
    assert stub.next_deadline == 13.0
    assert stub.poll(now=12.9) == []
    events = stub.poll(now=13.0)
    assert of(HeartbeatOverdue, events) == [HeartbeatOverdue(missed=3, since=10.0)]
    assert of(RequestGap, events) == [RequestGap(GapRequest(2, 2))]
    assert of(HeartbeatOverdue, stub.poll(now=14.0)) == [HeartbeatOverdue(missed=4, since=10.0)]
    stub.receive(Heartbeat(link_seq=2), now=14.5)
    assert stub.poll(now=15.0) == []


@pytest.mark.parametrize(("since", "interval", "missed_heartbeats"), [
    (0.0, 0.3, 3), (12345.3, 0.1, 3), (12345.3, 0.3, 3), (12345.3, 1.1, 3), (0.0, 0.1, 7),
])
def test_an_overdue_alert_counts_every_interval_its_deadline_stands_for(
    since, interval, missed_heartbeats
):
    # 0.9 // 0.3 == 2.0 in floats: a count by floor division alone would say 2 here
    stub = make(heartbeat_interval=interval, missed_heartbeats=missed_heartbeats)
    stub.receive(pub(1, 1), now=since)
    events = stub.poll(now=stub.next_deadline)
    assert of(HeartbeatOverdue, events) == [HeartbeatOverdue(missed_heartbeats, since=since)]
    events = stub.poll(now=stub.next_deadline)
    assert of(HeartbeatOverdue, events) == [HeartbeatOverdue(missed_heartbeats + 1, since=since)]


def test_a_late_poll_counts_the_whole_intervals_that_passed():
    stub = make(heartbeat_interval=0.1, missed_heartbeats=3)
    stub.receive(pub(1, 1), now=0.0)
    assert of(HeartbeatOverdue, stub.poll(now=0.7)) == [HeartbeatOverdue(missed=7, since=0.0)]


def test_silence_counts_from_when_the_adapter_listens_again_after_a_held_thread():
    stub = make(heartbeat_interval=1.0, missed_heartbeats=3)
    stub.receive(pub(1, 1), now=10.0)  # its delivery held the adapter's thread until 14.0
    stub.listening(now=14.0)
    assert stub.next_deadline == 17.0
    assert stub.poll(now=14.0) == []  # frames that came meanwhile are still unread
    stub.receive(pub(2, 2), now=14.5)
    assert stub.next_deadline == 17.5
    events = stub.poll(now=17.5)  # real silence is still reported, from the last frame
    assert of(HeartbeatOverdue, events) == [HeartbeatOverdue(missed=3, since=14.5)]
    assert stub.stats.requests_sent == 1  # that probe only


@pytest.mark.parametrize(("policy", "kind"), [("wait", None), ("disconnect", Disconnect)])
def test_overdue_policy_wait_or_disconnect(policy, kind):
    stub = make(overdue_policy=policy)
    stub.receive(pub(1, 1), now=0.0)
    events = stub.poll(now=3.0)
    assert of(HeartbeatOverdue, events)
    assert of(RequestGap, events) == []
    assert len(of(Disconnect, events)) == (1 if kind else 0)


def test_overflow_is_explicit_and_the_dropped_frames_are_requested_again():
    stub = make(max_buffer=2)
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)
    stub.receive(pub(4, 4), now=0.0)
    events = stub.receive(pub(5, 5), now=0.0)
    assert of(BufferOverflow, events) == [BufferOverflow(limit=2, dropped=1)]
    assert stub.buffered == 2
    assert of(RequestGap, stub.poll(now=1.0)) == [RequestGap(GapRequest(2, 2))]
    events = stub.receive(pub(2, 2, retransmit=True), now=1.1)
    assert delivered(events) == [("feed.a", 2), ("feed.a", 3), ("feed.a", 4)]
    assert of(RequestGap, stub.poll(now=2.0)) == [RequestGap(GapRequest(5, 5))]
    assert delivered(stub.receive(pub(5, 5, retransmit=True), now=2.1)) == [("feed.a", 5)]


def test_resume_point_names_the_last_delivered_number_per_source():
    stub = make()
    stub.receive(pub(1, 41), now=0.0)
    stub.receive(pub(2, 7, source="feed.b"), now=0.0)
    assert stub.resume_point() == SourceGapRequest(after={"feed.a": 41, "feed.b": 7})


def test_bad_frames_raise_typed_errors_and_leave_state_intact():
    stub = make(bits=8)
    stub.receive(pub(1, 1), now=0.0)
    before = (stub.stats, stub.expected_link_seq, stub.buffered)
    with pytest.raises(InvalidSequenceError) as info:
        stub.receive(pub(300, 2), now=0.0)
    assert info.value.got == 300
    with pytest.raises(InvalidMessageError):
        stub.receive({"link_seq": 2}, now=0.0)
    assert (stub.stats, stub.expected_link_seq, stub.buffered) == before
    assert delivered(stub.receive(pub(2, 2), now=0.0)) == [("feed.a", 2)]


@pytest.mark.parametrize(("option", "value"), [
    ("bits", 1), ("heartbeat_interval", 0), ("missed_heartbeats", 0), ("nak_delay", -1),
    ("max_buffer", 0), ("max_retries", 0), ("overdue_policy", "panic"),
])
def test_bad_configuration_is_a_typed_error(option, value):
    with pytest.raises((InvalidConfigError, InvalidSequenceError)):
        make(**{option: value})


def test_source_replay_that_never_completes_gives_up_per_source_and_releases():
    stub = make(retry_interval=0.1, max_retries=2)
    stub.receive(pub(1, 3), now=0.0)
    stub.receive(pub(2, 4, source="feed.b"), now=0.0)
    stub.receive(pub(0, 9), now=0.1)  # reset: held until a replay completes
    retried = of(RequestSourceGap, stub.poll(now=stub.next_deadline))
    assert retried == [RequestSourceGap(SourceGapRequest(after={"feed.a": 3, "feed.b": 4}))]
    events = stub.poll(now=stub.next_deadline)
    assert of(Unrecoverable, events) == [
        Unrecoverable(source="feed.a", after=3, reason="give-up"),
        Unrecoverable(source="feed.b", after=4, reason="give-up"),
        Unrecoverable(source=None, after=None, reason="give-up"),  # sources not named
    ]
    assert delivered(events) == [("feed.a", 9)]


def test_silence_is_measured_from_the_first_poll_when_nothing_has_arrived():
    stub = make(heartbeat_interval=1.0, missed_heartbeats=2)
    assert stub.poll(now=100.0) == []
    assert stub.next_deadline == 102.0
    assert of(HeartbeatOverdue, stub.poll(now=102.0)) == [HeartbeatOverdue(missed=2, since=100.0)]


def test_a_gap_error_with_numbers_outside_the_space_is_rejected():
    stub = make(bits=4)
    stub.receive(pub(1, 1), now=0.0)
    with pytest.raises(InvalidSequenceError):
        stub.receive(GapError("refused", GapRequest(2, 99)), now=0.0)
    assert stub.stats.unrecoverable == 0


# ---------------------------------------------------------------- found in review


def test_stats_repaired_counts_link_and_source_repairs():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)
    stub.poll(now=1.0)
    stub.receive(pub(2, 2, retransmit=True), now=1.1)
    stats = stub.stats
    assert (stats.link_repaired, stats.source_repaired, stats.repaired) == (1, 0, 1)


def test_a_second_reset_with_an_identical_frame_zero_is_a_new_reset():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(Heartbeat(link_seq=0), now=1.0)
    stub.receive(ReplayComplete(through={"feed.a": 1}), now=1.1)
    stub.receive(pub(1, 2), now=1.2)
    stub.receive(pub(2, 3), now=1.3)
    events = stub.receive(Heartbeat(link_seq=0), now=2.0)  # equal to the first frame 0
    assert len(of(LinkReset, events)) == 1
    assert of(RequestSourceGap, events) == [RequestSourceGap(SourceGapRequest({"feed.a": 3}))]
    held = [stub.receive(pub(n, 3 + n), now=2.1) for n in (1, 2, 3)]
    assert [delivered(e) for e in held] == [[], [], []]
    events = stub.receive(ReplayComplete(through={"feed.a": 3}), now=2.2)
    assert delivered(events) == [("feed.a", 4), ("feed.a", 5), ("feed.a", 6)]


def test_a_copy_of_the_reset_frame_before_the_context_moves_on_is_a_duplicate():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(Heartbeat(link_seq=0), now=1.0)
    assert stub.receive(Heartbeat(link_seq=0), now=1.0) == []
    assert stub.stats.resets == 1


def test_the_replay_answering_resume_point_is_delivered():
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    assert stub.resume_point() == SourceGapRequest(after={"feed.a": 3})
    assert delivered(stub.receive(replayed(4), now=5.0)) == [("feed.a", 4)]
    assert delivered(stub.receive(replayed(5), now=5.0)) == [("feed.a", 5)]
    assert stub.receive(ReplayComplete(through={"feed.a": 5}), now=5.0) == []
    assert stub.stats.stray_dropped == 0
    # the component then starts the new link context at 0: that replay was all it owed
    events = stub.receive(pub(0, 6), now=5.1)
    assert of(LinkReset, events) == [LinkReset(previous_expected=4, abandoned=0)]
    assert of(RequestSourceGap, events) == []
    assert delivered(events) == [("feed.a", 6)]
    assert delivered(stub.receive(pub(1, 7), now=5.1)) == [("feed.a", 7)]
    for _ in range(50):
        assert of(RequestSourceGap, stub.poll(now=stub.next_deadline)) == []
    assert (stub.stats.source_requests_sent, stub.stats.resets, stub.stats.unrecoverable) == (
        1, 1, 0)


def test_a_replay_that_keeps_coming_is_not_asked_again_however_long_it_takes():
    # a slow application takes a long replay at 10 ms a publication: far longer than every
    # retry wait together (0.1 + 0.2 = 0.3 s), yet each delivered publication shows it coming
    stub = make(retry_interval=0.1, max_retries=2)
    stub.receive(pub(1, 3), now=0.0)
    [request] = [e.request for e in of(RequestSourceGap, stub.receive(pub(0, 2000), now=0.0))]
    out, now = [], 0.0
    for seq in range(4, 2000):
        now += 0.01
        out += stub.poll(now) + stub.receive(replayed(seq), now)
    out += stub.receive(ReplayComplete(through={"feed.a": 1999}, request=request), now)
    assert of(RequestSourceGap, out) == []
    assert of(Unrecoverable, out) == []
    assert delivered(out) == [("feed.a", seq) for seq in range(4, 2001)]


def test_a_replay_that_stops_coming_is_asked_again_then_given_up_after_what_it_delivered():
    stub = make(retry_interval=0.1, max_retries=2)
    stub.receive(pub(1, 3), now=0.0)
    stub.receive(pub(0, 50), now=0.0)
    out = stub.receive(replayed(4), now=0.05) + stub.receive(replayed(5), now=0.06)
    retried = of(RequestSourceGap, stub.poll(now=stub.next_deadline))  # then it stalls
    assert [r.request.after for r in retried] == [{"feed.a": 5}]
    events = stub.poll(now=stub.next_deadline)
    assert of(Unrecoverable, events) == [Unrecoverable(source="feed.a", after=5, reason="give-up"),
                                         Unrecoverable(source=None, after=None, reason="give-up")]
    assert delivered(out + events) == [("feed.a", 4), ("feed.a", 5), ("feed.a", 50)]
    assert stub.stats.sources_abandoned == 1


def test_a_give_up_reports_what_the_replay_delivered_after_the_request_went_out():
    stub = make(retry_interval=0.1, max_retries=1)
    stub.receive(pub(1, 3), now=0.0)
    stub.receive(pub(0, 50), now=0.0)
    stub.receive(replayed(4), now=0.05)
    events = stub.poll(now=stub.next_deadline)  # it asked after 3; 4 came
    assert of(Unrecoverable, events)[0] == Unrecoverable(source="feed.a", after=4, reason="give-up")


def test_a_component_that_kept_the_link_context_continues_it_and_that_answers_resume_point():
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    stub.resume_point()  # no replay, no ReplayComplete: the link just goes on at 4
    now, events = 0.0, []
    for n in range(4, 84):
        now += 0.25
        events += stub.receive(pub(n, n), now=now) + stub.poll(now=now)
    assert delivered(events) == [("feed.a", n) for n in range(4, 84)]
    assert [e for e in events if not isinstance(e, Delivered)] == []  # no retry, no give-up
    assert (stub.stats.source_requests_sent, stub.stats.unrecoverable) == (1, 0)


def test_a_resumed_link_that_continues_past_a_loss_repairs_it_by_link_range():
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    stub.resume_point()
    assert stub.receive(pub(6, 6), now=0.1) == []  # 4 and 5 lost: an ordinary link gap
    events = stub.poll(now=0.2)
    assert events == [RequestGap(GapRequest(4, 5))]
    events = stub.receive(pub(4, 4, retransmit=True), now=0.3)
    events += stub.receive(pub(5, 5, retransmit=True), now=0.3)
    assert delivered(events) == [("feed.a", 4), ("feed.a", 5), ("feed.a", 6)]
    for _ in range(50):
        assert of(RequestSourceGap, stub.poll(now=stub.next_deadline)) == []
    assert stub.stats.unrecoverable == 0


def test_a_replay_that_still_comes_for_a_resume_the_link_answered_is_harmless():
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    assert delivered(stub.receive(pub(4, 4), now=0.1)) == [("feed.a", 4)]
    late = [replayed(4), replayed(5), ReplayComplete(through={"feed.a": 5}, request=request)]
    events = [event for frame in late for event in stub.receive(frame, now=0.2)]
    assert delivered(events) == [("feed.a", 5)]  # 4 it has: dropped; 5 it lacks: taken
    assert stub.receive(pub(5, 5), now=0.3) == []  # once: the link's copy is a duplicate
    assert (stub.stats.delivered, stub.stats.unrecoverable) == (5, 0)
    assert stub.poll(now=1.0) == []  # the request stays done; link 5 is no stale slot
    assert delivered(stub.receive(pub(6, 6), now=1.1)) == [("feed.a", 6)]
    assert stub.stats.slots_reopened == 0


def test_the_replay_of_a_resume_the_link_answered_brings_what_the_link_passed_over():
    """The component passed over feed.b 1..2 as given by that replay (WIRE.md: what a replay
    gave, the link never sends live): the replay alone brings them, after the link went on."""
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    assert delivered(stub.receive(pub(4, 4), now=0.1)) == [("feed.a", 4)]  # the link goes on
    late: list[object] = [replayed(n, source="feed.b") for n in (1, 2)]
    late.append(ReplayComplete(through={"feed.a": 3, "feed.b": 2}, request=request))
    events = [event for frame in late for event in stub.receive(frame, now=0.2)]
    assert delivered(events) == [("feed.b", 1), ("feed.b", 2)]
    assert delivered(stub.receive(pub(5, 5), now=0.3)) == [("feed.a", 5)]
    assert (stub.stats.delivered, stub.stats.unrecoverable, stub.stats.stray_dropped) == (
        7, 0, 0)  # its REPLAY-COMPLETE ends the request its answer put in flight again


def test_a_link_frame_that_overtakes_the_replay_of_a_continued_resume_waits_for_it():
    """The link passed feed.c 1..20 over as given by a replay the stub never read (it went with
    the connection), then numbered feed.c 21. Resumed, the link sends 21 on its first credit,
    before the answer to resume_point() that carries 1..20 (cut where the link carries on):
    21 waits for that answer, the request asked again until it comes. Delivered at once, it
    made the stub drop 1..20 as duplicates (lost, no Unrecoverable)."""
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    assert stub.receive(pub(4, 21, source="feed.c"), now=0.1) == []  # waits for the replay
    assert of(RequestSourceGap, stub.poll(now=5.0)) == [
        RequestSourceGap(SourceGapRequest({"feed.a": 3}))]  # still owed: asked again
    late: list[object] = [replayed(n, source="feed.c") for n in range(1, 21)]
    late.append(ReplayComplete(through={"feed.a": 3, "feed.c": 20}, request=request))
    events = [event for frame in late for event in stub.receive(frame, now=5.1)]
    assert delivered(events) == [("feed.c", n) for n in range(1, 22)]
    assert delivered(stub.receive(pub(5, 4), now=5.2)) == [("feed.a", 4)]
    assert (stub.stats.delivered, stub.stats.unrecoverable, stub.stats.duplicates) == (25, 0, 0)


def test_a_resend_that_overtakes_the_running_replay_of_a_continued_resume_waits_for_it():
    """The resume's answer has begun (the link's first frame came before it, in order for its
    source); a resend of a later frame (answers to link ranges and tail probes go before a
    replay's pages) carries a number of a source the replay has not reached yet: it waits."""
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    assert delivered(stub.receive(pub(4, 4), now=0.1)) == [("feed.a", 4)]  # continued
    assert delivered(stub.receive(replayed(1, source="feed.c"), now=0.2)) == [("feed.c", 1)]
    assert stub.receive(pub(5, 9, source="feed.c", retransmit=True), now=0.3) == []
    late: list[object] = [replayed(n, source="feed.c") for n in range(2, 9)]
    late.append(ReplayComplete(through={"feed.a": 3, "feed.c": 8}, request=request))
    events = [event for frame in late for event in stub.receive(frame, now=0.4)]
    assert delivered(events) == [("feed.c", n) for n in range(2, 10)]
    assert stub.stats.unrecoverable == 0


def test_a_source_request_that_replaces_a_continued_resume_holds_the_link_as_it_would():
    """A link gap whose context was lost replaces the resting request of a resume the link
    continued; the new replay brings what the link passed over as given (feed.c 1..20) and the
    resend of link 4 carries feed.c 21, in no gap of that request: it waits for the replay, as
    it would have for the resume's (delivered at once, it made the stub drop 1..20)."""
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    stub.resume_point()
    stub.receive(Heartbeat(link_seq=5), now=0.1)  # continues the context; 4 is missing
    stub.receive(Heartbeat(link_seq=7), now=0.1)  # and 6
    events = stub.receive(GapError("context-lost", GapRequest(6, 6)), now=0.2)
    (asked,) = of(RequestSourceGap, events)
    assert stub.receive(pub(4, 21, source="feed.c", retransmit=True), now=0.3) == []
    late: list[object] = [replayed(n, source="feed.c") for n in range(1, 22)]
    late.append(ReplayComplete(through={"feed.a": 3, "feed.c": 21}, request=asked.request))
    events = [event for frame in late for event in stub.receive(frame, now=0.4)]
    assert delivered(events) == [("feed.c", n) for n in range(1, 22)]
    assert stub.stats.unrecoverable == 0


def test_a_trimmed_answer_to_a_continued_resume_is_reported():
    """Not dropped as stray: what retention trimmed of what only that answer brings is named."""
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    assert delivered(stub.receive(pub(4, 4), now=0.1)) == [("feed.a", 4)]
    events = stub.receive(GapError("trimmed", request, "gone", {"feed.c": 5}), now=0.2)
    assert of(Unrecoverable, events) == [Unrecoverable(source="feed.c", after=None,
                                                       reason="trimmed")]
    assert of(RequestSourceGap, events) == [
        RequestSourceGap(SourceGapRequest({"feed.a": 4, "feed.c": 5}))]


def test_a_resume_the_link_answers_still_replays_gaps_whose_context_was_lost():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)
    stub.poll(now=0.1)  # asks for link 2
    stub.receive(GapError("context-lost", GapRequest(2, 2)), now=0.12)  # -> a source request
    stub.resume_point()  # the link re-attaches: it replaces that request
    events = stub.receive(pub(4, 4), now=0.2)  # the context was kept, but not link 2's frame
    assert events == [RequestSourceGap(SourceGapRequest({"feed.a": 1}))]
    events = stub.receive(replayed(2), now=0.3)
    events += stub.receive(ReplayComplete(through={"feed.a": 4}), now=0.3)
    assert delivered(events) == [("feed.a", 2), ("feed.a", 3), ("feed.a", 4)]


def test_the_new_context_after_a_resume_replay_drops_what_the_replay_delivered():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    request = stub.resume_point()
    events = stub.receive(replayed(2), now=0.1) + stub.receive(replayed(3), now=0.1)
    stub.receive(ReplayComplete(through={"feed.a": 3}, request=request), now=0.1)
    assert delivered(events) == [("feed.a", 2), ("feed.a", 3)]
    # published while the replay went out: the new context carries 3 again
    events = stub.receive(pub(0, 3), now=0.2) + stub.receive(pub(1, 4), now=0.2)
    assert delivered(events) == [("feed.a", 4)]
    assert of(RequestSourceGap, events) == []
    assert stub.stats.duplicates == 1


def test_frame_zero_before_the_resume_replay_completes_waits_for_that_replay_alone():
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    assert delivered(stub.receive(replayed(4), now=0.1)) == [("feed.a", 4)]
    events = stub.receive(pub(0, 5), now=0.1)  # the new link overtook the end of the replay
    assert of(LinkReset, events) == [LinkReset(previous_expected=4, abandoned=0)]
    assert of(RequestSourceGap, events) == []
    assert delivered(events) == []
    held = stub.receive(pub(1, 6), now=0.1) + stub.receive(pub(3, 8), now=0.1)  # 2 is lost
    assert delivered(held) == []
    events = stub.receive(ReplayComplete(through={"feed.a": 4}, request=request), now=0.2)
    assert delivered(events) == [("feed.a", 5), ("feed.a", 6)]
    # the replay covered nothing of the new context: its own loss is asked for by link range
    assert stub.poll(now=0.3) == [RequestGap(GapRequest(2, 2))]
    assert delivered(stub.receive(pub(2, 7, retransmit=True), now=0.4)) == [
        ("feed.a", 7), ("feed.a", 8)]
    assert (stub.stats.source_requests_sent, stub.stats.unrecoverable) == (1, 0)


@pytest.mark.parametrize("batched", [False, True])
def test_a_reset_after_the_resumed_link_carried_frames_is_a_mid_stream_reset(batched):
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    request = stub.resume_point()
    stub.receive(ReplayComplete(through={"feed.a": 1}, request=request), now=0.1)
    frames = [pub(2, 2), pub(3, 3)]  # the old context goes on: the component kept it
    if batched:
        stub.receive_many(frames, now=0.2)
    else:
        for frame in frames:
            stub.receive(frame, now=0.2)
    events = stub.receive(pub(0, 9), now=0.3)  # and later resets: what went before is owed
    assert of(LinkReset, events) == [LinkReset(previous_expected=4, abandoned=0)]
    assert of(RequestSourceGap, events) == [RequestSourceGap(SourceGapRequest({"feed.a": 3}))]
    assert delivered(events) == []


def test_an_announced_reset_after_the_resume_replay_starts_the_new_context_at_once():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    request = stub.resume_point()
    stub.receive(ReplayComplete(through={"feed.a": 1}, request=request), now=0.1)
    events = stub.link_reset(now=0.2)
    assert of(LinkReset, events) == [LinkReset(previous_expected=2, abandoned=0)]
    assert of(RequestSourceGap, events) == []
    assert delivered(stub.receive(pub(0, 2), now=0.3)) == [("feed.a", 2)]  # the same reset
    assert delivered(stub.receive(pub(1, 3), now=0.3)) == [("feed.a", 3)]
    assert (stub.stats.resets, stub.stats.source_requests_sent) == (1, 1)


def test_an_unanswered_resume_point_is_retried_from_poll():
    stub = make(retry_interval=0.5)
    stub.receive(pub(1, 1), now=0.0)
    stub.resume_point()
    assert stub.next_deadline == 0.0  # poll now: that starts the retry timer
    assert of(RequestSourceGap, stub.poll(now=0.0)) == []
    retry = of(RequestSourceGap, stub.poll(now=stub.next_deadline))
    assert retry == [RequestSourceGap(SourceGapRequest({"feed.a": 1}))]


def test_a_retried_source_request_covers_only_what_was_missing_at_the_first_attempt():
    stub = make(retry_interval=0.1)
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)
    stub.poll(now=0.1)  # asks for link 2
    stub.receive(GapError("context-lost", GapRequest(2, 2)), now=0.12)  # -> source request
    stub.receive(pub(5, 5), now=0.13)  # link 4 (feed.a 4) goes missing after the request
    while not of(RequestSourceGap, stub.poll(now=stub.next_deadline)):
        pass  # until the source request is retried
    # the (slow) answer to the first attempt: it replayed through feed.a 3, not 4
    stub.receive(replayed(2), now=0.5)
    stub.receive(ReplayComplete(through={"feed.a": 3}), now=0.5)
    # link 4 is still a gap of its own: asked for, repaired, delivered
    asked = []
    while not asked:
        asked = of(RequestGap, stub.poll(now=stub.next_deadline))
    assert asked == [RequestGap(GapRequest(4, 4))]
    events = stub.receive(pub(4, 4, retransmit=True), now=2.0)
    assert delivered(events) == [("feed.a", 4), ("feed.a", 5)]


def test_a_late_copy_of_an_earlier_replay_does_not_end_a_newer_one():
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    stub.receive(pub(3, 3), now=0.0)
    stub.poll(now=0.1)
    stub.receive(GapError("context-lost", GapRequest(2, 2)), now=0.12)
    first_answer = [replayed(2), replayed(3), ReplayComplete(through={"feed.a": 3})]
    for frame in first_answer:
        stub.receive(frame, now=0.13)
    stub.receive(pub(4, 4), now=0.14)
    stub.receive(pub(6, 6), now=0.15)  # link 5 lost
    stub.poll(now=0.25)
    events = stub.receive(GapError("context-lost", GapRequest(5, 5)), now=0.26)
    assert of(RequestSourceGap, events) == [RequestSourceGap(SourceGapRequest({"feed.a": 4}))]
    for frame in first_answer:  # a duplicate of the first answer, late on the wire
        assert delivered(stub.receive(frame, now=0.27)) == []
    events = stub.receive(replayed(5), now=0.3)
    assert delivered(events) == [("feed.a", 5)]
    events = stub.receive(ReplayComplete(through={"feed.a": 6}), now=0.3)
    assert delivered(events) == [("feed.a", 6)]


@pytest.mark.parametrize("now", ["soon", float("nan"), float("inf"), None, True])
def test_a_bad_now_is_a_typed_error_and_changes_nothing(now):
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    before = (stub.stats, stub.expected_link_seq, stub.next_deadline)
    with pytest.raises(InvalidConfigError):
        stub.receive(pub(2, 2), now=now)
    with pytest.raises(InvalidConfigError):
        stub.poll(now=now)
    with pytest.raises(InvalidConfigError):
        stub.link_reset(now=now)
    assert (stub.stats, stub.expected_link_seq, stub.next_deadline) == before
    assert delivered(stub.receive(pub(2, 2), now=1)) == [("feed.a", 2)]  # an int is fine


def test_a_trimmed_replay_reports_the_loss_and_asks_again_for_what_the_journal_kept():
    stub = make()
    stub.receive(pub(1, 10), now=0.0)
    events = stub.link_reset(now=1.0)  # a new link context: replay after feed.a 10
    assert of(RequestSourceGap, events) == [RequestSourceGap(SourceGapRequest({"feed.a": 10}))]
    stub.receive(pub(1, 100), now=1.0)  # live frames of the new context, held
    events = stub.receive(GapError("trimmed", SourceGapRequest({"feed.a": 10}),
                                   trimmed_through={"feed.a": 90}), now=1.1)
    assert of(Unrecoverable, events) == [Unrecoverable(source="feed.a", after=10,
                                                       reason="trimmed")]
    assert of(RequestSourceGap, events) == [RequestSourceGap(SourceGapRequest({"feed.a": 90}))]
    assert delivered(events) == []  # still held: the journal has more to give
    replay = [stub.receive(replayed(n), now=1.2) for n in range(91, 100)]
    assert [d for e in replay for d in delivered(e)] == [("feed.a", n) for n in range(91, 100)]
    events = stub.receive(ReplayComplete(through={"feed.a": 99}), now=1.3)
    assert delivered(events) == [("feed.a", 100)]
    assert (stub.stats.sources_trimmed, stub.stats.unrecoverable) == (1, 0)


def test_a_trimmed_answer_that_names_no_progress_gives_up_as_before():
    stub = make()
    stub.receive(pub(1, 10), now=0.0)
    stub.link_reset(now=1.0)
    stub.receive(pub(1, 11), now=1.0)
    events = stub.receive(GapError("trimmed", SourceGapRequest({"feed.a": 10}),
                                   trimmed_through={"feed.a": 5}), now=1.1)
    assert of(Unrecoverable, events) == [
        Unrecoverable(source="feed.a", after=10, reason="trimmed"),
        Unrecoverable(source=None, after=None, reason="trimmed"),  # sources not named
    ]
    assert of(RequestSourceGap, events) == []
    assert delivered(events) == [("feed.a", 11)]  # moved past, not stalled


def test_a_replay_stopped_at_the_components_limit_is_asked_on_until_it_ends():
    stub = make()
    stub.receive(pub(1, 10), now=0.0)
    stub.link_reset(now=1.0)  # replay after feed.a 10
    stub.receive(pub(1, 40), now=1.0)  # live frame of the new context, held
    for n in range(11, 21):
        stub.receive(replayed(n), now=1.1)
    events = stub.receive(
        ReplayComplete(through={"feed.a": 20}, request=SourceGapRequest({"feed.a": 10}),
                       more=True), now=1.1)
    assert of(RequestSourceGap, events) == [RequestSourceGap(SourceGapRequest({"feed.a": 20}))]
    assert delivered(events) == []  # the new context stays held until the replay ends
    rest = [stub.receive(replayed(n), now=1.2) for n in range(21, 40)]
    assert [d for e in rest for d in delivered(e)] == [("feed.a", n) for n in range(21, 40)]
    events = stub.receive(
        ReplayComplete(through={"feed.a": 39}, request=SourceGapRequest({"feed.a": 20})), now=1.3)
    assert delivered(events) == [("feed.a", 40)]
    assert (stub.stats.source_continued, stub.stats.unrecoverable) == (1, 0)


def test_a_piece_of_replay_the_filter_emptied_still_moves_the_next_request_on():
    stub = make()
    stub.receive(pub(1, 10), now=0.0)
    stub.link_reset(now=1.0)
    stub.receive(pub(1, 500), now=1.0)
    after = 10
    for through in (110, 210):  # nothing in these pieces is for this subscriber
        events = stub.receive(
            ReplayComplete(through={"feed.a": through},
                           request=SourceGapRequest({"feed.a": after}), more=True), now=1.1)
        assert of(RequestSourceGap, events) == [
            RequestSourceGap(SourceGapRequest({"feed.a": through}))
        ]
        after = through
    events = stub.receive(
        ReplayComplete(through={"feed.a": 499}, request=SourceGapRequest({"feed.a": 210})),
        now=1.2)
    assert delivered(events) == [("feed.a", 500)]


def test_a_piece_of_replay_that_reads_nothing_new_gives_up_rather_than_loop():
    stub = make()
    stub.receive(pub(1, 10), now=0.0)
    stub.link_reset(now=1.0)
    stub.receive(pub(1, 11), now=1.0)
    events = stub.receive(
        ReplayComplete(through={"feed.a": 10}, request=SourceGapRequest({"feed.a": 10}),
                       more=True), now=1.1)
    assert of(Unrecoverable, events) == [
        Unrecoverable(source="feed.a", after=10, reason="no-progress"),
        Unrecoverable(source=None, after=None, reason="no-progress"),  # sources not named
    ]
    assert of(RequestSourceGap, events) == []
    assert delivered(events) == [("feed.a", 11)]  # moved past, not stalled


def test_a_second_reset_while_the_resume_replay_is_in_flight_asks_again_for_what_it_voided():
    """The re-attach's new context is held for the replay of resume_point(); if that context
    resets too (its link paused and resumed), the frames it voided may lie past what that
    replay reaches, so the stub asks again after what it delivered."""
    stub = make()
    stub.receive(pub(1, 1), now=0.0)
    first = stub.resume_point()
    stub.receive(pub(0, 5), now=0.1)  # the re-attach: a new context, held for the replay
    stub.receive(pub(1, 6), now=0.1)
    events = stub.receive(pub(0, 9), now=0.2)  # 6 voided; 7 and 8 were never sent
    (again,) = [e.request for e in of(RequestSourceGap, events)]
    assert again.after == {"feed.a": 1}
    assert again.request_id != first.request_id
    assert delivered(stub.receive(ReplayComplete({"feed.a": 4}, request=first), now=0.3)) == []
    replay = [stub.receive(replayed(n), now=0.3) for n in range(2, 9)]
    assert [d for events in replay for d in delivered(events)] == [
        ("feed.a", n) for n in range(2, 9)]
    done = stub.receive(ReplayComplete({"feed.a": 8}, request=again), now=0.4)
    assert delivered(done) == [("feed.a", 9)]
    assert stub.stats.unrecoverable == 0


def resumed_and_continued(stub):
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    assert delivered(stub.receive(pub(4, 4), now=0.1)) == [("feed.a", 4)]  # continued
    return request


def test_a_budget_refusal_of_a_continued_resume_is_asked_again_not_reported_lost():
    """The link's resend budget refills (WIRE.md: 100,000 numbers/s) and the journal holds all
    the resume asks for; the link kept the context and goes on. Giving the request up named
    every source Unrecoverable while the link (and a later replay) delivered them all; and
    what the link passed over as given (feed.c 1..2) is owed by a replay only a retry gets."""
    stub = make()
    request = resumed_and_continued(stub)
    events = stub.receive(GapError("refused", request, "over the resend budget"), now=0.2)
    assert of(Unrecoverable, events) == []
    retry = of(RequestSourceGap, stub.poll(now=stub.next_deadline))
    assert [r.request.after for r in retry] == [{"feed.a": 4}]
    late: list[object] = [replayed(1, source="feed.c"), replayed(2, source="feed.c")]
    late.append(ReplayComplete(through={"feed.a": 4, "feed.c": 2}, request=retry[0].request))
    events = [event for frame in late for event in stub.receive(frame, now=1.0)]
    events += stub.receive(pub(5, 5), now=1.1)
    assert delivered(events) == [("feed.c", 1), ("feed.c", 2), ("feed.a", 5)]
    assert (stub.stats.unrecoverable, stub.stats.sources_abandoned) == (0, 0)


def test_a_refused_resume_in_flight_is_asked_again_and_the_kept_link_delivered():
    """Refused before the link's first frame (the request link answers first): the same."""
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    stub.poll(now=0.0)
    events = stub.receive(GapError("refused", request, "over the resend budget"), now=0.05)
    assert of(Unrecoverable, events) == []
    assert stub.receive(pub(4, 4), now=0.1) == []  # held: the refused answer is still owed
    retry = of(RequestSourceGap, stub.poll(now=stub.next_deadline))
    assert [r.request.after for r in retry] == [{"feed.a": 3}]
    late: list[object] = [replayed(1, source="feed.c")]
    late.append(ReplayComplete(through={"feed.a": 3, "feed.c": 1}, request=retry[0].request))
    events = [event for frame in late for event in stub.receive(frame, now=1.0)]
    assert delivered(events) == [("feed.c", 1), ("feed.a", 4)]
    assert (stub.stats.unrecoverable, stub.stats.sources_abandoned) == (0, 0)


def test_a_resume_refused_at_every_retry_is_reported_lost_in_the_end():
    """A refusal that does not pass (too many sources named) is given up after the retries:
    what the resume asked for is named Unrecoverable, never waited on for ever."""
    stub = make(max_retries=3)
    request = resumed_and_continued(stub)
    events = stub.receive(GapError("refused", request, "more than 1000 sources"), now=0.2)
    for _ in range(10):
        for event in stub.poll(now=stub.next_deadline):
            events.append(event)
            if isinstance(event, RequestSourceGap):
                events += stub.receive(GapError("refused", event.request), now=stub._now)
        if of(Unrecoverable, events):
            break
    assert of(Unrecoverable, events)[0].source == "feed.a"
    assert delivered(stub.receive(pub(5, 5), now=stub._now)) == [("feed.a", 5)]
