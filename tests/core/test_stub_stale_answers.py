"""Answers that arrive late or for an earlier link context never cost a publication.

A reset voids the old context's requests (DESIGN.md, "Subscriber stub semantics"), yet their
answers may still be on the way; a source request asked again after a reset may ask exactly
what one still in flight asked. These scenarios pin what the stub makes of such answers.
"""

from seqrepair import (
    Delivered,
    GapError,
    GapRequest,
    Heartbeat,
    HeartbeatOverdue,
    LinkContext,
    LinkReset,
    LinkSequencer,
    Publication,
    ReplayComplete,
    RequestGap,
    RequestSourceGap,
    SourceGapRequest,
    SubscriberStub,
    Unrecoverable,
)


def pub(seq, link):
    return Publication(topic="/t/x", source="feed.a", source_seq=seq, link_seq=link)


def replayed(seq):
    return Publication(topic="/t/x", source="feed.a", source_seq=seq, retransmit=True)


def delivered(events):
    return [e.publication.source_seq for e in events if isinstance(e, Delivered)]


def source_requests(events):
    return [e.request for e in events if isinstance(e, RequestSourceGap)]


def make(**options):
    return SubscriberStub(**{"bits": 16, "nak_delay": 0.0, "jitter": 0.0, "seed": 1, **options})


def test_an_answer_made_for_the_request_before_a_reset_does_not_release_the_new_context():
    stub = make()
    out = stub.receive(pub(1, 1), 0.0)
    out += stub.receive(pub(3, 3), 0.1)  # a2 at link 2 lost
    out += stub.poll(0.1)
    [before] = source_requests(stub.receive(GapError("context-lost", GapRequest(2, 2)), 0.2))
    # the component answers it (a1..a3 journaled), sends a4 on link 4 (lost), then resets
    events = stub.receive(pub(5, 0), 0.3)
    [after_reset] = source_requests(events)
    assert any(isinstance(e, LinkReset) for e in events)
    assert after_reset == before
    assert after_reset.request_id != before.request_id
    out += events
    out += stub.receive(replayed(2), 0.4)
    out += stub.receive(replayed(3), 0.4)
    out += stub.receive(ReplayComplete(through={"feed.a": 3}, request=before), 0.4)
    out += stub.receive(pub(6, 1), 0.5)
    assert delivered(out) == [1, 2, 3]  # the new context still waits for its own replay
    out += stub.receive(replayed(4), 0.6)
    out += stub.receive(replayed(5), 0.6)
    out += stub.receive(ReplayComplete(through={"feed.a": 5}, request=after_reset), 0.6)
    assert delivered(out) == [1, 2, 3, 4, 5, 6]
    assert not any(isinstance(e, Unrecoverable) for e in out)
    assert stub.stats.stray_dropped == 1


def test_a_source_gap_error_for_an_earlier_request_asking_the_same_is_stray():
    stub = make()
    stub.receive(pub(1, 1), 0.0)
    stub.receive(pub(3, 3), 0.1)
    stub.poll(0.1)
    [before] = source_requests(stub.receive(GapError("context-lost", GapRequest(2, 2)), 0.2))
    [after_reset] = source_requests(stub.receive(pub(4, 0), 0.3))
    assert stub.receive(GapError("refused", before, "budget"), 0.4) == []
    assert stub.stats.stray_dropped == 1
    events = stub.receive(GapError("refused", after_reset, "budget"), 0.5)
    assert [e.reason for e in events if isinstance(e, Unrecoverable)] == ["refused", "refused"]


def test_retries_of_a_source_request_keep_its_id_and_a_new_request_takes_a_new_one():
    stub = make(retry_interval=1.0, backoff=1.0)
    stub.receive(pub(1, 1), 0.0)
    stub.receive(pub(3, 3), 0.1)
    stub.poll(0.1)
    [first] = source_requests(stub.receive(GapError("context-lost", GapRequest(2, 2)), 0.2))
    [retry] = source_requests(stub.poll(5.0))
    assert retry == first
    assert retry.request_id == first.request_id
    stub.receive(ReplayComplete(through={"feed.a": 3}, request=first), 5.1)
    [reset] = source_requests(stub.receive(pub(4, 0), 5.2))
    assert reset.request_id != first.request_id


def test_a_link_gap_error_for_the_voided_context_does_not_skip_the_new_contexts_numbers():
    stub = make()
    out = stub.receive(pub(1, 1), 0.0)
    out += stub.receive(pub(3, 3), 0.1)
    assert [e.request for e in stub.poll(0.1) if isinstance(e, RequestGap)] == [GapRequest(2, 2)]
    [replay] = source_requests(stub.receive(pub(4, 0), 0.2))  # reset: new context 0 = a4
    for seq in (2, 3, 4):
        out += stub.receive(replayed(seq), 0.3)
    out += stub.receive(ReplayComplete(through={"feed.a": 4}, request=replay), 0.3)
    out += stub.receive(pub(5, 1), 0.4)
    out += stub.receive(pub(7, 3), 0.4)  # new context's link 2 (a6) is late
    # the component's answer to the old context's GapRequest(2, 2)
    assert stub.receive(GapError("refused", GapRequest(2, 2)), 0.45) == []
    out += stub.receive(pub(6, 2), 0.5)
    assert delivered(out) == [1, 2, 3, 4, 5, 6, 7]
    assert not any(isinstance(e, Unrecoverable) for e in out)


def test_the_new_context_still_hears_an_answer_to_its_own_request_for_the_same_range():
    stub = make()
    stub.receive(pub(1, 1), 0.0)
    stub.receive(pub(3, 3), 0.1)
    stub.poll(0.1)  # old context asks for link 2
    [replay] = source_requests(stub.receive(pub(4, 0), 0.2))
    stub.receive(ReplayComplete(through={"feed.a": 3}, request=replay), 0.3)
    stub.receive(pub(5, 1), 0.4)
    stub.receive(pub(7, 3), 0.4)
    assert [e.request for e in stub.poll(0.5) if isinstance(e, RequestGap)] == [GapRequest(2, 2)]
    events = stub.receive(GapError("refused", GapRequest(2, 2)), 0.6)
    # heard: the refused range is asked for by source (the journal holds it)
    [asked] = source_requests(events)
    assert asked.after == {"feed.a": 5}
    events += stub.receive(replayed(6), 0.7)
    events += stub.receive(ReplayComplete(through={"feed.a": 7}, request=asked), 0.7)
    assert delivered(events) == [6, 7]
    assert not any(isinstance(e, Unrecoverable) for e in events)


def test_a_context_lost_answer_to_the_overdue_probe_asks_by_source():
    stub = make(heartbeat_interval=1.0, missed_heartbeats=3)
    stub.poll(0.0)
    out = stub.receive(pub(1, 1), 0.1)
    out += stub.receive(pub(2, 2), 0.2)  # link 3 on, and their heartbeats, are lost
    events = stub.poll(3.3)
    assert any(isinstance(e, HeartbeatOverdue) for e in events)
    assert [e.request for e in events if isinstance(e, RequestGap)] == [GapRequest(3, 3)]
    # the component sent link 3 but holds it no longer
    [request] = source_requests(stub.receive(GapError("context-lost", GapRequest(3, 3)), 3.4))
    assert dict(request.after) == {"feed.a": 2}
    out += stub.receive(replayed(3), 3.5)
    out += stub.receive(ReplayComplete(through={"feed.a": 3}, request=request), 3.5)
    out += stub.receive(pub(4, 4), 3.6)  # the link goes on after the probed number
    assert delivered(out) == [1, 2, 3, 4]
    assert stub.stats.duplicates == 0


def test_an_overdue_probe_that_reaches_the_link_before_its_first_frame_costs_nothing():
    # the subscriber's attach waited on a gateway, so it probed before the link had sent a frame
    stub = make(heartbeat_interval=1.0, missed_heartbeats=3)
    stub.poll(0.0)
    [probe] = [e.request for e in stub.poll(3.1) if isinstance(e, RequestGap)]
    context, link = LinkContext(bits=16), LinkSequencer(bits=16)
    out = []
    answer = context.answer(probe)
    for reply in [answer] if isinstance(answer, GapError) else answer:
        for request in source_requests(stub.receive(reply, 3.2)):
            # nothing is published yet: a replay would come back empty at once
            out += stub.receive(ReplayComplete(through={}, request=request), 3.2)
    for seq in (1, 2, 3):
        frame = link.stamp(Publication(topic="/t/x", source="feed.a", source_seq=seq), now=3.3)
        context.record(frame)
        out += stub.receive(frame, 3.3)
    assert delivered(out) == [1, 2, 3]
    assert stub.stats.source_requests_sent == 0
    assert stub.stats.duplicates == 0


def test_a_new_reset_equal_to_the_last_one_is_a_reset_once_that_one_was_released():
    stub = make()
    [first] = source_requests(stub.receive(Heartbeat(link_seq=0), 0.0))
    out = stub.receive(ReplayComplete(through={}, request=first), 0.1)
    # the context sends a1 on link 1 (lost), then the component resets again, alike
    events = stub.receive(Heartbeat(link_seq=0), 0.2)
    assert any(isinstance(e, LinkReset) for e in events)
    [second] = source_requests(events)
    out += stub.receive(replayed(1), 0.3)
    out += stub.receive(ReplayComplete(through={"feed.a": 1}, request=second), 0.3)
    out += stub.receive(pub(2, 1), 0.4)
    assert delivered(out) == [1, 2]
    assert stub.stats.resets == 2


def test_a_copy_of_the_reset_frame_while_it_is_held_is_a_duplicate():
    stub = make()
    [request] = source_requests(stub.receive(Heartbeat(link_seq=0), 0.0))
    assert stub.receive(Heartbeat(link_seq=0), 0.1) == []
    assert stub.stats.duplicates == 1
    assert stub.stats.resets == 1
    stub.receive(ReplayComplete(through={}, request=request), 0.2)
    assert delivered(stub.receive(pub(1, 1), 0.3)) == [1]


def test_requests_that_ask_the_same_are_equal_whatever_their_ids():
    one = SourceGapRequest(after={"feed.a": 3}, request_id=1)
    two = SourceGapRequest(after={"feed.a": 3}, request_id=2)
    assert one == two
    assert hash(one) == hash(two)
    assert not one.same_as(two)
    assert one.same_as(SourceGapRequest(after={"feed.a": 3}))  # an answer naming no id
    assert not one.same_as(SourceGapRequest(after={"feed.a": 4}, request_id=1))
