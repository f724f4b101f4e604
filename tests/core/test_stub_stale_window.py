"""A windowed link whose new context carries only publications a replay already delivered
(issue 27 audit: a relay killed and restarted, its upstream's catch-up fanned out again what
the reattaching subscriber's replay had fetched) must still move: the stub's acknowledged
point is the component's window, and a window that never opens stalls the link for good.

Seen over real processes (tests/amqp/test_relay_narrow_links.py, 1 run in ~150): the wide
subscriber of a 4-bit relay link stopped at its replay's end, the relay's link window full
(7 outstanding, none acknowledged) and 1170 tail probes of its newest frame all dropped by
the stub as stale, no gap ever detected, no request sent.

The relay's side is fixed (journal/gapfill.py: a replay's upstream fetch stops where the
link began carrying the source while it waited, tests/journal/test_lacking.py), so the
replay's ``through`` no longer covers the link's frames. The stub recovers too, should a
component ever send such a context: the tail probe (the component's newest frame resent
while its window is full) repeats a stale original this context brought at that number, so
the stub takes the numbers up to it as sent and covers them by a source replay that runs to
the journal's high-water (no ``link_through``: the number is unproven), and its ACK opens the
window. The obvious version of that (any resent stale frame past the highest number moves
it) lost a publication in tests/core/test_link_view.py's
test_stale_publications_after_resets_never_cost_a_publication (bits=4, seed=0, loss=0.2,
reorder=0.2, size=120, resets={117}): an old context's answer claimed slots the new context
had not sent, and the replay cut there skipped the new context's frame 2. So a lone resent
copy moves nothing, nor does one whose source the link already carried newer in this
context (a link numbers each source in order).

A window whose newest original was lost (1 in 20 such stalls at 5% loss) is opened by the
component's mark: its tail probe names the link context (``tail_probe``, WIRE.md Window
discipline), and the stub takes a probe of its own context by ``receive_tail_probe``, its
number proven sent.
"""

from seqrepair import (
    Delivered,
    Heartbeat,
    Publication,
    ReplayComplete,
    RequestSourceGap,
    SubscriberStub,
    Unrecoverable,
)


def pub(seq, link, retransmit=False):
    return Publication(topic="/w/a/1", source="feed.a", source_seq=seq, link_seq=link,
                       retransmit=retransmit)


def replayed(seq):
    return Publication(topic="/w/a/1", source="feed.a", source_seq=seq, retransmit=True)


def source_requests(events):
    return [e.request for e in events if isinstance(e, RequestSourceGap)]


def test_stale_frames_filling_a_window_are_consumed_once_the_tail_probe_comes():
    stub = SubscriberStub(bits=4, nak_delay=0.0, jitter=0.0, seed=1)
    stub.poll(0.0)
    # the (re)attach of a durable link: a new context, the replay it owes asked for
    [asked] = source_requests(stub.link_reset(0.0))
    out = stub.receive(Heartbeat(link_seq=0), 0.01)
    for seq in range(1, 11):
        out += stub.receive(replayed(seq), 0.02)
    out += stub.receive(ReplayComplete(through={"feed.a": 10}, request=asked), 0.03)
    assert [e.publication.source_seq for e in out if isinstance(e, Delivered)] == list(
        range(1, 11))
    # the new context's first frames carry publications the replay delivered (the window of
    # a 4-bit link: 7 numbers); frame 1 is lost on the way
    for link in range(2, 8):
        out += stub.receive(pub(link + 2, link), 0.04)
    # the window is full: no heartbeat, only the component's tail probe (its newest again)
    events = stub.receive(pub(9, 7, retransmit=True), 0.5)
    events += stub.poll(0.6)
    [again] = source_requests(events)
    events += stub.receive(ReplayComplete(through={"feed.a": 10}, request=again), 0.7)
    assert stub.consumed_through == 7  # the ACK opens the window
    events += stub.receive(pub(11, 8), 0.8)
    assert [e.publication.source_seq for e in events if isinstance(e, Delivered)] == [11]
    assert not any(isinstance(e, Unrecoverable) for e in out + events)


def released_context():
    """A stub whose reset context was released by a replay through feed.a 10."""
    stub = SubscriberStub(bits=4, nak_delay=0.0, jitter=0.0, seed=1)
    stub.poll(0.0)
    [asked] = source_requests(stub.link_reset(0.0))
    stub.receive(Heartbeat(link_seq=0), 0.01)
    for seq in range(1, 11):
        stub.receive(replayed(seq), 0.02)
    stub.receive(ReplayComplete(through={"feed.a": 10}, request=asked), 0.03)
    return stub


def test_a_lone_resent_stale_copy_past_the_highest_number_moves_nothing():
    # an old context's answer, duplicated: nothing of this context came at that number
    stub = released_context()
    events = stub.receive(pub(9, 7, retransmit=True), 0.5)
    events += stub.poll(0.6)
    events += stub.receive(pub(9, 7, retransmit=True), 0.61)  # a duplicate of that answer
    assert source_requests(events) == []
    assert stub.consumed_through == 0
    assert stub.stats.stale_dropped == 2
    # the context's own frames still go on as ever
    assert [e.publication.source_seq for e in stub.receive(pub(11, 1), 0.7)
            if isinstance(e, Delivered)] == [11]


def test_a_resent_stale_copy_older_than_what_its_source_holds_moves_nothing():
    # feed.a 12 at number 3 is this context's (newer than the floor): a frame of this
    # context at 7 carries something newer still, never feed.a 9, whatever came at 7 before
    stub = released_context()
    stub.receive(pub(12, 3), 0.04)  # held behind the gap 1..2
    stub.receive(pub(9, 7), 0.05)  # stale, unread
    events = stub.receive(pub(9, 7, retransmit=True), 0.5)
    assert source_requests(events) == []
    assert stub.expected_link_seq == 1


def test_the_replay_a_tail_probe_asks_for_runs_to_the_high_water():
    stub = released_context()
    for link in range(2, 8):
        stub.receive(pub(link + 2, link), 0.04)
    [again] = source_requests(stub.receive(pub(9, 7, retransmit=True), 0.5))
    assert again.link_through is None  # 7 is unproven: no cut at a number not proven sent
    assert again.after == {"feed.a": 10}



def test_a_marked_tail_probe_moves_a_window_whose_newest_original_was_lost():
    # frames 2..6 (stale) came, 1 and the window's newest, 7, were lost: the tail probe is
    # all that tells the stub how far the window reaches. Unmarked (an old component) it
    # cannot be told from an old context's answer and moves nothing, as before; marked by
    # the component as the current context's newest, its number is proven
    stub = released_context()
    for link in range(2, 7):
        stub.receive(pub(link + 2, link), 0.04)
    events = stub.receive(pub(9, 7, retransmit=True), 0.5) + stub.poll(0.6)
    assert source_requests(events) == []
    events = stub.receive_tail_probe(pub(9, 7, retransmit=True), 0.7)
    events += stub.poll(0.8)
    [again] = source_requests(events)
    assert again.link_through == 7  # proven sent: the replay may stop where the link resumes
    events += stub.receive(ReplayComplete(through={"feed.a": 10}, request=again), 0.9)
    assert stub.consumed_through == 7
    events += stub.receive(pub(11, 8), 1.0)
    assert [e.publication.source_seq for e in events if isinstance(e, Delivered)] == [11]
    assert not any(isinstance(e, Unrecoverable) for e in events)


def test_a_marked_tail_probe_that_is_new_is_read_as_any_resend():
    stub = released_context()
    stub.receive(pub(11, 1), 0.04)
    events = stub.receive_tail_probe(pub(13, 3, retransmit=True), 0.5)
    assert [e.publication.source_seq for e in events if isinstance(e, Delivered)] == []
    events = stub.receive(pub(12, 2, retransmit=True), 0.6)
    assert [e.publication.source_seq for e in events if isinstance(e, Delivered)] == [12, 13]
    assert stub.stats.stale_dropped == 0
