"""A source request given up loses the sources it does not name: the stub must say so.

A source request names the sources the subscriber has delivered something of; the component
replays every other source from the link's start (see seqrepair/journal/gapfill.py). When the
stub gives such a request up (refused, retries exhausted, no progress) it reported only the
sources it named, so the first publications of a source it had never delivered, lost in the
link numbers it then skips, went missing without an Unrecoverable event.
"""

from seqrepair import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    RequestSourceGap,
    SubscriberStub,
    Unrecoverable,
)


def pub(source, seq, link):
    return Publication(topic="/t/x", source=source, source_seq=seq, link_seq=link)


def source_request(events):
    [request] = [e.request for e in events if isinstance(e, RequestSourceGap)]
    return request


def reported_lost(events, source):
    return any(isinstance(e, Unrecoverable) and e.source in (None, source) for e in events)


def test_a_refused_replay_for_a_lost_context_reports_the_sources_it_did_not_name():
    stub = SubscriberStub(bits=16, nak_delay=0.0, seed=1)
    events = stub.receive(pub("feed.b", 1, 1), 0.0)
    events += stub.receive(pub("feed.b", 2, 3), 0.1)  # feed.a 1 went out on link 2: lost
    events += stub.poll(0.1)
    events += stub.receive(GapError("context-lost", GapRequest(2, 2)), 0.2)
    request = source_request(events)
    assert dict(request.after) == {"feed.b": 1}  # feed.a is owed from the link's start
    events += stub.receive(GapError("refused", request), 0.3)
    assert stub.last_delivered == {"feed.b": 2}  # link 2 skipped, feed.a never delivered
    assert reported_lost(events, "feed.a")  # feed.a 1 is never delivered: say so


def test_a_refused_replay_after_a_reset_reports_the_sources_it_did_not_name():
    stub = SubscriberStub(bits=16, nak_delay=0.0, seed=1)
    events = stub.receive(pub("feed.a", 1, 1), 0.0)
    # feed.b 1 goes out on link 2 and is lost with the old link: the component resets
    events += stub.receive(pub("feed.a", 2, 0), 0.1)
    request = source_request(events)
    assert dict(request.after) == {"feed.a": 1}
    events += stub.receive(GapError("refused", request), 0.2)
    events += stub.receive(pub("feed.b", 2, 1), 0.3)
    events += stub.receive(Heartbeat(link_seq=2), 0.4)
    assert reported_lost(events, "feed.b")


def test_a_replay_given_up_after_retries_reports_the_sources_it_did_not_name():
    stub = SubscriberStub(bits=16, nak_delay=0.0, seed=1, max_retries=2)
    events = stub.receive(pub("feed.a", 1, 1), 0.0)
    events += stub.receive(pub("feed.a", 2, 0), 0.1)  # feed.b 1 lost with the old link
    while not any(isinstance(e, Unrecoverable) for e in events):  # no answer ever comes
        events += stub.poll(stub.next_deadline)
    assert reported_lost(events, "feed.b")
