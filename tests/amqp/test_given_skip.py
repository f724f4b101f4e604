"""A link never sends live a publication a replay of its gave it already (issue 27: "a relay
still sends stale frames"), and never passes over one it was not given.

After a relay's large catch-up a narrow link's window is full and its ``pending`` queue holds
the catch-up's publications, of sources the link numbered nothing of since the subscriber's
cover point: the source replay the subscriber asks for then delivers them (the cover cuts a
source only where the link numbered it), and before this fix the link sent them all again,
live, as stale frames (at 3 bits a tail probe and a source replay per window of them). Here
the parts without a network: the route records what each replay that ended gave
(``ResponseRoute.given``), the pump skips pending publications at or below it, and a later
source request that shows the subscriber did not take it makes the replay carry through what
the link passed over. Over real processes: tests/amqp/test_relay_given.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.amqp.component.requests import _not_taken
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.rawamqp import PackedMessage, decode_message
from seqrepair.core.context import LinkContext
from seqrepair.core.messages import Publication, ReplayComplete, SourceGapRequest
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.core.window import LinkWindow

pytestmark = pytest.mark.amqp


class _Sender:
    def __init__(self, credit: int) -> None:
        self.credit = credit
        self.connection = "conn"
        self.sent: list[Any] = []

    def send(self, message: object) -> SimpleNamespace:
        self.sent.append(message)
        self.credit -= 1
        return SimpleNamespace(pending=100)


def _pub(source: str, seq: int) -> Publication:
    return Publication("/w/a", source, seq, "update", {"n": seq})


def _link(bits: int) -> SubscriberLink:
    link = SubscriberLink(
        name="l", address="/w/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(bits, 1.0), context=LinkContext(bits, 1000), batch=True,
        max_batch=256, max_pending=10_000, source_bits=lambda _s: 64, window=LinkWindow(bits),
    )
    link.attach(_Sender(10_000))
    return link


def _sent_publications(link: SubscriberLink, decoder: Decoder) -> list[tuple[str, int, bool]]:
    out = []
    for message in link.sender.sent:
        if isinstance(message, PackedMessage):
            message = decode_message(message.encode())
        for frame in decoder.decode(message):
            if isinstance(frame, Publication):
                out.append((frame.source, frame.source_seq, frame.retransmit))
    return out


@pytest.mark.parametrize("bits", [3, 4, 5])
def test_pending_publications_a_replay_gave_are_not_sent_live(bits: int) -> None:
    link = _link(bits)
    assert link.window is not None
    size = link.window.size
    # the window fills with feed.b; feed.c waits behind it, none of it numbered
    link.offer_many([(_pub("feed.b", i), None) for i in range(1, 21)]
                    + [(_pub("feed.c", i), None) for i in range(1, 31)], 0.0)
    link.pump(0.0)
    assert link.stats["sent"] == size
    # the subscriber's source replay (cut for feed.b where the link numbered it) gives feed.c
    replayed = [_pub("feed.c", i).with_link(None, retransmit=True) for i in range(1, 31)]
    link.route.start_replay("l", [*replayed, ReplayComplete(
        through={"feed.b": 0, "feed.c": 30}, request=SourceGapRequest({}))], None)
    while link.route.busy():
        assert link.route.send_one()
    assert link.route.given == {"l": {"feed.c": 30}}
    decoder = Decoder()
    before = len(link.sender.sent)
    for _ in range(50):  # the subscriber acknowledges all it has, window after window
        window = link.window
        if window.newest is not None:
            window.ack(window.newest)
        link.pump(0.1)
    live = [(s, n) for s, n, again in _sent_publications(link, decoder) if not again]
    assert [n for s, n in live if s == "feed.b"] == list(range(1, 21))  # all of it, in order
    assert [n for s, n in live if s == "feed.c"] == []  # the replay gave every one
    assert link.stats["given_skipped"] == 30
    assert not link.pending
    assert len(link.sender.sent) > before


def test_a_publication_above_what_a_replay_gave_goes_out_live() -> None:
    link = _link(3)
    link.route.given["l"] = {"feed.c": 10}
    link.offer_many([(_pub("feed.c", i), None) for i in range(9, 14)], 0.0)
    decoder = Decoder()
    for _ in range(10):
        window = link.window
        assert window is not None
        if window.newest is not None:
            window.ack(window.newest)
        link.pump(0.0)
    live = [n for s, n, again in _sent_publications(link, decoder) if not again]
    assert live == [11, 12, 13]
    assert link.skipped_top == {"feed.c": 10}


def test_a_request_below_what_was_given_takes_it_back_and_carries_through_the_skipped() -> None:
    link = _link(3)
    link.route.given["l"] = {"feed.c": 30, "feed.b": 5}
    link.skipped_top.update({"feed.c": 30, "feed.b": 4})
    # the subscriber did not take the replay that gave feed.c (a stray answer to it): it asks
    # after 12 again; feed.b it has
    carry = _not_taken(link, SourceGapRequest({"feed.c": 12, "feed.b": 5}))
    assert carry == {"feed.c": 30}
    assert link.route.given["l"] == {"feed.c": 12, "feed.b": 5}
    # skipped no more: feed.c 13.. goes out live again until a replay gives it anew
    link.offer_many([(_pub("feed.c", 13), None)], 0.0)
    link.pump(0.0)
    assert link.stats["given_skipped"] == 0
    assert [n for s, n, again in _sent_publications(link, Decoder()) if s == "feed.c"] == [13]


def test_given_publications_leave_the_queue_while_the_window_is_full() -> None:
    """Nothing waits for an ACK to be passed over: a subscriber that has everything leaves its
    link holding nothing for it, however full the window."""
    link = _link(3)
    window = link.window
    assert window is not None
    link.offer_many([(_pub("feed.b", i), None) for i in range(1, 11)]
                    + [(_pub("feed.c", i), None) for i in range(1, 6)], 0.0)
    link.pump(0.0)
    assert window.room() == 0
    link.route.given["l"] = {"feed.b": 10, "feed.c": 5}
    link.pump(0.0)
    assert not link.pending
    assert link.stats["given_skipped"] == 15 - window.size
