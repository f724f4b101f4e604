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
replay's ``through`` no longer covers the link's frames. The stub itself still cannot recover
from such a context, should a component ever send one: NOT FIXED (strict xfail: it fails on
the current stub and must pass once fixed). The
obvious stub change (a retransmitted stale frame past the highest number moves it and asks
the slots by source) breaks tests/core/test_link_view.py's
test_stale_publications_after_resets_never_cost_a_publication (bits=4, seed=0, loss=0.2,
reorder=0.2, size=120, resets={117}, sources='a', announce=False: one publication lost), as a
retransmitted old-context frame then claims slots the new context has not sent. Filtering
the relay's link offers at or below the replay's final ``through`` would not cover frames
stamped before the ReplayComplete either.
"""

import pytest

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


@pytest.mark.xfail(strict=True, reason="issue 27 audit stall: stale frames fill a window")
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
