"""A request whose delivery the component rejects is that request refused, never left to rest.

The component rejects a request message at the delivery level (no GAP-ERROR comes) when it
cannot take it: ``amqp:resource-limit-exceeded`` past its replay room (16 source replays per
connection, which frees as replays end), ``amqp:unauthorized-access``, a decode error. The
adapter passes the rejection to :meth:`SubscriberStub.request_rejected`. Before, nothing did:
a resume the kept link continued rested with no timer, and what the link passed over as given
by an earlier replay (which only that request's answer brings) was silently missing.
"""

from test_stub import delivered, make, of, pub, replayed, resumed_and_continued

from seqrepair import (
    GapRequest,
    Heartbeat,
    ReplayComplete,
    RequestGap,
    RequestSourceGap,
    Unrecoverable,
)

LIMIT = "amqp:resource-limit-exceeded"


def test_a_continued_resume_rejected_for_the_replay_room_is_asked_again_and_answered():
    """The reviewer's case: the link continues and brings each source's next number, so the
    rejected request rested for ever and feed.c 1..2 (passed over as given) never came."""
    stub = make()
    request = resumed_and_continued(stub)
    events = stub.request_rejected(request, LIMIT, now=0.2)
    assert of(Unrecoverable, events) == []
    assert stub.next_deadline is not None
    assert stub.receive(pub(5, 5), now=0.25) == []  # held: the rejected answer is still owed
    retry = of(RequestSourceGap, stub.poll(now=stub.next_deadline))
    assert [r.request.after for r in retry] == [{"feed.a": 4}]
    late: list[object] = [replayed(1, source="feed.c"), replayed(2, source="feed.c")]
    late.append(ReplayComplete(through={"feed.a": 4, "feed.c": 2}, request=retry[0].request))
    events = [event for frame in late for event in stub.receive(frame, now=1.0)]
    assert delivered(events) == [("feed.c", 1), ("feed.c", 2), ("feed.a", 5)]
    assert (stub.stats.unrecoverable, stub.stats.requests_rejected) == (0, 1)


def test_a_continued_resume_rejected_at_every_retry_names_the_condition_in_the_end():
    stub = make(max_retries=3)
    request = resumed_and_continued(stub)
    events = stub.request_rejected(request, LIMIT, now=0.2)
    asked = 0
    for _ in range(10):
        for event in stub.poll(now=stub.next_deadline):
            events.append(event)
            if isinstance(event, RequestSourceGap):
                asked += 1
                events += stub.request_rejected(event.request, LIMIT, now=stub._now)
        if of(Unrecoverable, events):
            break
    lost = of(Unrecoverable, events)
    assert [(u.source, u.after, u.reason) for u in lost] == [
        ("feed.a", 4, LIMIT), (None, None, LIMIT)]
    assert asked == 2  # max_retries attempts in all
    assert delivered(stub.receive(pub(5, 5), now=stub._now)) == [("feed.a", 5)]  # released


def test_a_permanent_rejection_gives_the_request_up_at_once_with_its_condition():
    stub = make()
    request = resumed_and_continued(stub)
    events = stub.request_rejected(request, "amqp:unauthorized-access", now=0.2)
    assert [(u.source, u.after, u.reason) for u in of(Unrecoverable, events)] == [
        ("feed.a", 4, "amqp:unauthorized-access"), (None, None, "amqp:unauthorized-access")]
    assert of(RequestSourceGap, stub.poll(now=5.0)) == []
    assert delivered(stub.receive(pub(5, 5), now=5.0)) == [("feed.a", 5)]


def test_a_resume_in_flight_rejected_holds_the_link_and_is_asked_again():
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    request = stub.resume_point()
    stub.poll(now=0.0)
    assert of(Unrecoverable, stub.request_rejected(request, LIMIT, now=0.05)) == []
    assert stub.receive(pub(4, 4), now=0.1) == []  # held until the request is answered
    retry = of(RequestSourceGap, stub.poll(now=stub.next_deadline))
    assert [r.request.after for r in retry] == [{"feed.a": 3}]
    done = stub.receive(ReplayComplete({"feed.a": 3}, request=retry[0].request), now=1.0)
    assert delivered(done) == [("feed.a", 4)]
    assert stub.stats.unrecoverable == 0


def test_a_rejected_link_range_is_asked_for_by_source():
    """A range request rejected (the journal holds it all the same) is asked for by source,
    as a refused range is; never skipped silently."""
    stub = make()
    for frame in (pub(1, 1), pub(3, 3), Heartbeat(link_seq=4)):
        stub.receive(frame, now=0.0)
    (gap,) = of(RequestGap, stub.poll(now=1.0))
    assert gap.request == GapRequest(2, 2)
    events = stub.request_rejected(gap.request, LIMIT, now=1.1)
    (source,) = of(RequestSourceGap, events)
    assert source.request.after == {"feed.a": 1}
    events = stub.receive(replayed(2), now=1.2) + stub.receive(
        ReplayComplete({"feed.a": 3}, request=source.request), now=1.3)
    assert delivered(events) == [("feed.a", 2), ("feed.a", 3)]
    assert stub.stats.unrecoverable == 0


def test_a_rejection_of_a_request_given_up_or_replaced_changes_nothing():
    stub = make()
    request = resumed_and_continued(stub)
    stub.request_rejected(request, "amqp:decode-error", now=0.2)  # given up
    before = stub.stats.unrecoverable
    assert stub.request_rejected(request, LIMIT, now=0.3) == []
    assert (stub.stats.unrecoverable, stub.stats.stray_dropped) == (before, 1)


def test_a_component_that_only_continues_the_link_still_gets_one_request():
    """No rejection, no answer: the pinned behaviour (exactly one request) is unchanged."""
    stub = make()
    for n in (1, 2, 3):
        stub.receive(pub(n, n), now=0.0)
    stub.resume_point()
    now, events = 0.0, []
    for n in range(4, 44):
        now += 0.25
        events += stub.receive(pub(n, n), now=now) + stub.poll(now=now)
    assert delivered(events) == [("feed.a", n) for n in range(4, 44)]
    assert (stub.stats.source_requests_sent, stub.stats.requests_rejected) == (1, 0)


def test_a_resume_rejected_for_a_failure_of_the_component_is_asked_again_not_given_up():
    """``amqp:internal-error``: the component failed on it (its journal out of reach a moment,
    test_rejected_journal_real), not the request: asked again with backoff, as the replay
    room's, while the journal holds everything. Before: Unrecoverable for every source."""
    stub = make()
    request = resumed_and_continued(stub)
    events = stub.request_rejected(request, "amqp:internal-error", now=0.2)
    assert of(Unrecoverable, events) == []
    retry = of(RequestSourceGap, stub.poll(now=stub.next_deadline))
    assert [r.request.after for r in retry] == [{"feed.a": 4}]


def test_a_source_request_rejected_for_a_link_detached_meanwhile_is_asked_again():
    """``amqp:not-found``: the component detached the data link (its unsent limit, a policy
    change) while the request was on its way; the subscriber attaches again and the retry names
    that link. Before: Unrecoverable for every source while the journal held everything."""
    stub = make()
    request = resumed_and_continued(stub)
    events = stub.request_rejected(request, "amqp:not-found", now=0.2)
    assert of(Unrecoverable, events) == []
    retry = of(RequestSourceGap, stub.poll(now=stub.next_deadline))
    assert [r.request.after for r in retry] == [{"feed.a": 4}]
    done = stub.receive(ReplayComplete({"feed.a": 4}, request=retry[0].request), now=2.0)
    assert of(Unrecoverable, done) == []
    assert stub.stats.unrecoverable == 0
