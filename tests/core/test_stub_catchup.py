"""A catch-up makes progress and never starts over (issue 26).

A source replay is a session: the component says at once that it runs (``ReplayStarted``),
frames come as it advances, and the stub asks again only after a real silence, with the same
``request_id`` and ``after`` = the remainder it still lacks, so that a component still running
the replay continues it (``ReplayStarted(continued=True)``) instead of sending again all that is
on its way. These scenarios pin the stub's side: when it asks again, what it asks, and that the
answers of an earlier attempt of its request complete it.
"""

from seqrepair import (
    Delivered,
    GapError,
    Heartbeat,
    Publication,
    ReplayComplete,
    RequestSourceGap,
    SourceGapRequest,
    SubscriberStub,
    Unrecoverable,
)
from seqrepair.core.messages import ReplayStarted, same_attempt


def pub(seq, link, source="feed.a"):
    return Publication(topic="/t/x", source=source, source_seq=seq, link_seq=link)


def replayed(seq, source="feed.a"):
    return Publication(topic="/t/x", source=source, source_seq=seq, retransmit=True)


def delivered(events):
    return [e.publication.source_seq for e in events if isinstance(e, Delivered)]


def source_requests(events):
    return [e.request for e in events if isinstance(e, RequestSourceGap)]


def make(**options):
    return SubscriberStub(**{"bits": 16, "nak_delay": 0.0, "jitter": 0.0, "seed": 1,
                             "heartbeat_interval": 1.0, **options})


def reset_owing_a_replay(stub):
    """Deliver 1..2 by link, then a reset: the stub asks for a replay after 2."""
    out = stub.receive(pub(1, 1), 0.0) + stub.receive(pub(2, 2), 0.0)
    [request] = source_requests(stub.receive(Heartbeat(link_seq=0), 0.1))
    assert dict(request.after) == {"feed.a": 2}
    return request, out


def test_once_the_replay_runs_a_short_pause_asks_nothing():
    stub = make()
    request, _ = reset_owing_a_replay(stub)
    stub.receive(ReplayStarted(request, {"feed.a": 10_000}), 0.15)
    # the component pauses 0.5 s (a page boundary under load): more than the 0.2 s retry
    # interval, less than a heartbeat interval: a live replay is not asked for again
    assert source_requests(stub.poll(0.65)) == []
    stub.receive(replayed(3), 0.7)
    assert source_requests(stub.poll(1.5)) == []
    assert stub.stats.source_requests_sent == 1


def test_before_the_component_answers_the_request_is_retried_with_backoff():
    stub = make()
    request, _ = reset_owing_a_replay(stub)
    [again] = source_requests(stub.poll(0.31))  # no word: the request may be lost
    assert again.request_id == request.request_id
    assert source_requests(stub.poll(0.45)) == []  # backing off: 0.4 s now


def test_a_real_silence_asks_again_for_the_remainder_under_the_same_id():
    stub = make()
    request, _ = reset_owing_a_replay(stub)
    out = stub.receive(ReplayStarted(request, {"feed.a": 100}), 0.15)
    out += stub.receive(replayed(3), 0.2)
    out += stub.receive(replayed(4), 0.2)
    assert source_requests(stub.poll(1.1)) == []
    [again] = source_requests(stub.poll(1.25))  # a heartbeat interval without a frame
    assert again.request_id == request.request_id
    assert again.link_through == request.link_through
    assert dict(again.after) == {"feed.a": 4}  # the remainder, not the first attempt's after
    assert same_attempt(request, again)
    assert not request.same_as(again)


def test_a_continued_replay_completes_the_repair_with_the_first_attempts_answer():
    stub = make()
    request, out = reset_owing_a_replay(stub)
    out += stub.receive(ReplayStarted(request, {"feed.a": 6}), 0.15)
    out += stub.receive(replayed(3), 0.2)
    [again] = source_requests(stub.poll(1.3))
    # the component continues the replay it runs: it says so, then goes on where it was
    out += stub.receive(ReplayStarted(request, {"feed.a": 6}, continued=True), 1.35)
    for seq in (4, 5, 6):
        out += stub.receive(replayed(seq), 1.4)
    # its REPLAY-COMPLETE names the first attempt (after 2), not the retry (after 3)
    out += stub.receive(ReplayComplete(through={"feed.a": 6}, request=request), 1.4)
    out += stub.receive(pub(7, 1), 1.5)
    assert delivered(out) == [1, 2, 3, 4, 5, 6, 7]
    assert stub.stats.duplicates == 0
    assert stub.stats.stray_dropped == 0
    assert not any(isinstance(e, Unrecoverable) for e in out)
    assert dict(again.after) == {"feed.a": 3}


def test_more_from_a_continued_attempt_goes_on_after_what_it_read():
    stub = make()
    request, out = reset_owing_a_replay(stub)
    out += stub.receive(replayed(3), 0.2)
    out += stub.receive(replayed(4), 0.2)
    [again] = source_requests(stub.poll(1.3))
    assert dict(again.after) == {"feed.a": 4}
    # the first attempt stopped at the per-request limit right after 4: through == the
    # retry's after (which the component echoes for the replay it continued), yet it read
    # past what the first attempt asked: progress, not a give-up
    events = stub.receive(ReplayComplete(through={"feed.a": 4}, request=again, more=True), 1.4)
    [onwards] = source_requests(events)
    assert onwards.request_id != request.request_id
    assert dict(onwards.after) == {"feed.a": 4}
    assert not any(isinstance(e, Unrecoverable) for e in events)
    out += stub.receive(replayed(5), 1.5)
    out += stub.receive(ReplayComplete(through={"feed.a": 5}, request=onwards), 1.5)
    assert delivered(out) == [1, 2, 3, 4, 5]


def test_a_continued_replay_echoing_the_retry_completes_the_repair_too():
    stub = make()
    _request, out = reset_owing_a_replay(stub)
    out += stub.receive(replayed(3), 0.2)
    [again] = source_requests(stub.poll(1.3))
    out += stub.receive(ReplayStarted(again, {"feed.a": 5}, continued=True), 1.35)
    out += stub.receive(replayed(4), 1.4)
    out += stub.receive(replayed(5), 1.4)
    out += stub.receive(ReplayComplete(through={"feed.a": 5}, request=again), 1.4)
    out += stub.receive(pub(6, 1), 1.5)
    assert delivered(out) == [1, 2, 3, 4, 5, 6]
    assert stub.stats.duplicates == 0


def test_answers_to_another_request_id_are_still_stray():
    stub = make()
    request, out = reset_owing_a_replay(stub)
    other = SourceGapRequest(after=request.after, request_id=request.request_id + 7,
                             link_through=request.link_through)
    assert stub.receive(ReplayStarted(other), 0.15) == []
    assert source_requests(stub.poll(0.31))  # not live: retried as an unanswered request
    assert stub.receive(ReplayComplete(through={"feed.a": 2}, request=other), 0.4) == []
    assert stub.stats.stray_dropped == 1
    out += stub.receive(ReplayComplete(through={"feed.a": 2}, request=request), 0.5)
    out += stub.receive(pub(3, 1), 0.6)
    assert delivered(out) == [1, 2, 3]


def test_a_gap_error_for_an_earlier_attempt_ends_the_request():
    stub = make()
    request, _ = reset_owing_a_replay(stub)
    stub.receive(replayed(3), 0.2)
    source_requests(stub.poll(1.3))
    events = stub.receive(GapError("refused", request, "budget"), 1.4)
    assert [e.reason for e in events if isinstance(e, Unrecoverable)] == ["refused", "refused"]


def test_a_live_replay_that_stays_silent_is_given_up_in_the_end():
    stub = make(max_retries=3)
    request, _ = reset_owing_a_replay(stub)
    stub.receive(ReplayStarted(request), 0.15)
    asked, now = 0, 0.15
    events: list[object] = []
    while not any(isinstance(e, Unrecoverable) for e in events) and now < 60:
        now += 0.05
        events = stub.poll(now)
        asked += len(source_requests(events))
    assert asked == 2  # "still going?" twice, unanswered, then given up as before
    assert now > 1.15 + 2.0  # a heartbeat interval of silence at least before each


def test_a_replay_stopped_at_the_limit_asks_for_what_follows_at_once_and_takes_its_answer():
    """Pipelined: the component says the replay stops at its per-request limit (``more`` on
    REPLAY-STARTED), so the stub asks at once for what follows it (another id, after its
    ``through``); when the first ends with ``more`` nothing is asked again: the answer to the
    second comes next (the component queued it), and completes the repair."""
    stub = make()
    request, out = reset_owing_a_replay(stub)
    events = stub.receive(ReplayStarted(request, {"feed.a": 5}, more=True), 0.15)
    [following] = source_requests(events)
    assert dict(following.after) == {"feed.a": 5}
    assert following.request_id != request.request_id
    assert following.link_through == request.link_through
    out += events
    out += stub.receive(ReplayStarted(following, {"feed.a": 8}), 0.16)
    for seq in (3, 4, 5):
        out += stub.receive(replayed(seq), 0.2)
    events = stub.receive(ReplayComplete(through={"feed.a": 5}, request=request, more=True),
                          0.2)
    assert source_requests(events) == []  # asked already
    out += events
    for seq in (6, 7, 8):
        out += stub.receive(replayed(seq), 0.25)
    out += stub.receive(ReplayComplete(through={"feed.a": 8}, request=following), 0.25)
    out += stub.receive(pub(9, 1), 0.3)
    assert delivered(out) == list(range(1, 10))
    assert stub.stats.source_requests_sent == 2
    assert stub.stats.duplicates == stub.stats.stray_dropped == 0
    assert not any(isinstance(e, Unrecoverable) for e in out)
    assert source_requests(stub.poll(5.0)) == []  # nothing in flight


def test_the_following_request_asks_again_when_its_predecessor_ends_short_of_it():
    """A replay that ends before the ``through`` its REPLAY-STARTED named (the link carries
    on from there, or the component stopped earlier) leaves numbers the pipelined request does
    not ask for: the stub asks again after what the replay reached, under a new id."""
    stub = make()
    request, _ = reset_owing_a_replay(stub)
    [following] = source_requests(
        stub.receive(ReplayStarted(request, {"feed.a": 5}, more=True), 0.15))
    stub.receive(replayed(3), 0.2)
    stub.receive(replayed(4), 0.2)
    [again] = source_requests(
        stub.receive(ReplayComplete(through={"feed.a": 4}, request=request, more=True), 0.2))
    assert dict(again.after) == {"feed.a": 4}
    assert again.request_id not in (request.request_id, following.request_id)
    # the pipelined request's answers are stray now
    stub.receive(ReplayComplete(through={"feed.a": 8}, request=following), 0.3)
    assert stub.stats.stray_dropped == 1


def test_a_request_asked_again_drops_the_following_one_the_component_dropped_too():
    """The replay in flight ends short (a trimmed range) after its follower was asked: the stub
    asks again under a new id, which the component takes as a replacement, dropping the queued
    follower. That follower is no longer the stub's either: the new request's REPLAY-STARTED
    (more) pipelines a follower of its own, and its end hands over to that one, with no
    silence waited for a request the component forgot."""
    stub = make()
    request, out = reset_owing_a_replay(stub)
    [stale] = source_requests(
        stub.receive(ReplayStarted(request, {"feed.a": 5}, more=True), 0.15))
    out += stub.receive(ReplayStarted(stale, {"feed.a": 8}, more=True), 0.16)
    out += stub.receive(replayed(3), 0.2)
    error = GapError("trimmed", request, "trimmed", trimmed_through={"feed.a": 4})
    out_error = stub.receive(error, 0.2)
    out += out_error
    [again] = source_requests(out_error)
    assert dict(again.after) == {"feed.a": 4}
    # the component replaced the replay (and the follower queued behind it) by ``again``
    events = stub.receive(ReplayStarted(again, {"feed.a": 14}, more=True), 0.25)
    [following] = source_requests(events)  # pipelined again, under a new id
    assert following.request_id not in (request.request_id, stale.request_id,
                                         again.request_id)
    assert dict(following.after) == {"feed.a": 14}
    out += events
    out += stub.receive(ReplayStarted(following, {"feed.a": 20}), 0.26)
    for seq in range(5, 15):
        out += stub.receive(replayed(seq), 0.3)
    events = stub.receive(ReplayComplete(through={"feed.a": 14}, request=again, more=True), 0.3)
    assert source_requests(events) == []  # the follower asked already is the one in flight
    out += events
    for seq in range(15, 21):
        out += stub.receive(replayed(seq), 0.35)
    out += stub.receive(ReplayComplete(through={"feed.a": 20}, request=following), 0.35)
    assert stub.stats.stray_dropped == 0
    out += stub.receive(pub(21, 1), 0.4)
    assert delivered(out) == [1, 2, 3, *range(5, 22)]
    assert [e.after for e in out if isinstance(e, Unrecoverable)] == [3]
    assert source_requests(stub.poll(5.0)) == []  # nothing in flight
