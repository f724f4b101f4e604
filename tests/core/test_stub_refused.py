"""A link range the component refuses is repaired by source, never skipped silently.

A GAP-REQUEST range is refused when it is wider than the component's ``max-gap-range`` or over
the link's resend budget: that says nothing of the journal, which still holds the numbers. The
stub asks for them by source (as for ``context-lost``); only an answer the journal cannot give
(a refused or trimmed source request, or a give-up) is ``Unrecoverable``, named by source.
"""

from test_stub import delivered, of

from seqrepair import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
    RequestGap,
    RequestSourceGap,
    SubscriberStub,
    Unrecoverable,
)


def pub(link, seq, source="feed.a"):
    return Publication(topic="/t", source=source, source_seq=seq, ptype=PublishType.UPDATE,
                       fields={"n": seq}, link_seq=link, retransmit=link is None)


def coalesced_request(stub):
    """Link 1 (a.1), 3 (b.1), 5 (a.3) and 6 (heartbeat) arrive; 2 (a.2) and 4 (b.2) are lost:
    the two gaps, one received number apart, go out in one range 2..4."""
    events = []
    for frame in (pub(1, 1), pub(3, 1, "feed.b"), pub(5, 3), Heartbeat(link_seq=6)):
        events += stub.receive(frame, now=0.0)
    assert delivered(events) == [("feed.a", 1)]
    (request,) = of(RequestGap, stub.poll(now=1.0))
    assert request.request == GapRequest(2, 4)
    return request.request


def test_a_refused_coalesced_range_is_asked_by_source_and_every_publication_delivered():
    stub = SubscriberStub(bits=16, jitter=0.0, seed=1, coalesce=2)
    request = coalesced_request(stub)
    events = stub.receive(GapError("refused", request, "range of 3 exceeds 2"), now=1.1)
    assert of(Unrecoverable, events) == []
    assert delivered(events) == []  # nothing skipped: b.1 and a.3 wait behind the gaps
    (source_request,) = of(RequestSourceGap, events)
    assert source_request.request.after == {"feed.a": 1}
    assert source_request.request.link_through == 6
    replay = []
    for frame in (pub(None, 2), pub(None, 3), pub(None, 1, "feed.b"), pub(None, 2, "feed.b")):
        replay += stub.receive(frame, now=1.2)
    replay += stub.receive(ReplayComplete(through={"feed.a": 3, "feed.b": 2},
                                          request=source_request.request), now=1.3)
    assert delivered(events + replay) == [
        ("feed.a", 2), ("feed.a", 3), ("feed.b", 1), ("feed.b", 2)]
    assert of(Unrecoverable, replay) == []
    assert stub.expected_link_seq == 7
    assert delivered(stub.receive(pub(7, 4), now=1.4)) == [("feed.a", 4)]
    stats = stub.stats
    assert (stats.unrecoverable, stats.delivered, stats.source_covered) == (0, 6, 2)


def test_a_refused_range_whose_source_request_is_refused_too_names_each_source():
    stub = SubscriberStub(bits=16, jitter=0.0, seed=1, coalesce=2)
    request = coalesced_request(stub)
    events = stub.receive(GapError("refused", request), now=1.1)
    (source_request,) = of(RequestSourceGap, events)
    events = stub.receive(GapError("refused", source_request.request, "budget"), now=1.2)
    assert of(Unrecoverable, events) == [
        Unrecoverable(source="feed.a", after=1, reason="refused"),
        Unrecoverable(source=None, after=None, reason="refused"),  # sources not named: b
    ]
    # told, then moved past the gaps: what the link carried is delivered
    assert delivered(events) == [("feed.b", 1), ("feed.a", 3)]
    assert stub.stats.unrecoverable == 2


def test_a_refusal_of_a_range_already_repaired_asks_for_nothing():
    stub = SubscriberStub(bits=16, jitter=0.0, seed=1, coalesce=2)
    request = coalesced_request(stub)
    repaired = stub.receive(pub(2, 2), now=1.05) + stub.receive(pub(4, 2, "feed.b"), now=1.05)
    assert delivered(repaired) == [("feed.a", 2), ("feed.b", 1), ("feed.b", 2), ("feed.a", 3)]
    events = stub.receive(GapError("refused", request), now=1.1)
    assert events == []
    assert stub.stats.source_requests_sent == 0


def test_every_range_refused_under_steady_loss_loses_nothing():
    """Every link range refused, gaps coalesced, one frame in three lost: each publication is
    delivered exactly once, in order, with no Unrecoverable."""
    stub = SubscriberStub(bits=16, jitter=0.0, seed=3, coalesce=3, nak_delay=0.0)
    out: list = []
    pending: list = []
    sent = 0
    now = 0.0

    def act(events, now):
        for event in events:
            out.append(event)
            if isinstance(event, RequestGap):
                pending.append(GapError("refused", event.request))
            elif isinstance(event, RequestSourceGap):
                after = event.request.after.get("feed.a", 0)
                pending.extend(pub(None, n) for n in range(after + 1, sent + 1))
                pending.append(ReplayComplete(through={"feed.a": sent}, request=event.request))

    while sent < 300 or pending:
        now += 0.01
        for _ in range(4):
            if sent < 300:
                sent += 1
                if sent % 3:
                    act(stub.receive(pub(sent, sent), now=now), now)
        answers, pending[:] = list(pending), []
        for answer in answers:
            act(stub.receive(answer, now=now), now)
        act(stub.poll(now), now)
    assert of(Unrecoverable, out) == []
    assert [seq for _, seq in delivered(out)] == list(range(1, 301))
