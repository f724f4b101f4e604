"""The window discipline's parts without a network: the component's link (stamps no more than
its window, skips heartbeats when full, drops stale resends, probes its tail), the dispatch of
ACK, and the subscriber's side (when it acks, and how it follows the attach reply)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from seqrepair.amqp.client.acks import (
    AckSender,
    FollowedNumbering,
    consumed_through,
    numbering_from_reply,
)
from seqrepair.amqp.component.ackdispatch import receive_ack
from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.amqp.component.positions import NoPositions
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.errors import SettingsMismatchError
from seqrepair.amqp.wire.technical import Ack
from seqrepair.amqp.wire.vocabulary import (
    PROP_HEARTBEAT,
    PROP_LINK_BITS,
    PROP_MAX_GAP_RANGE,
    PROP_WINDOW,
)
from seqrepair.core.context import LinkContext, Resend
from seqrepair.core.messages import GapRequest, Heartbeat, Publication
from seqrepair.core.permissions import Entitlement
from seqrepair.core.sequencers import LinkSequencer
from seqrepair.core.stub import SubscriberStub
from seqrepair.core.window import LinkWindow

pytestmark = pytest.mark.amqp


class _Sender:
    """A proton sender's credit and connection: each send spends one credit."""

    def __init__(self, credit: int, connection: object = "conn") -> None:
        self.credit = credit
        self.connection = connection
        self.sent: list[Any] = []

    def send(self, message: object) -> SimpleNamespace:
        self.sent.append(message)
        self.credit -= 1
        return SimpleNamespace(pending=100)  # a delivery: the bytes proton holds of it


def _pub(seq: int) -> Publication:
    return Publication("/w/a", "s", seq, "update", {"n": seq})


def _link(bits: int, *, drop: bool = False, credit: int = 10_000) -> SubscriberLink:
    link = SubscriberLink(
        name="l", address="/w/#", entitlement=Entitlement(topics=("/#",)),
        sequencer=LinkSequencer(bits, 1.0), context=LinkContext(bits, 1000), batch=True,
        max_batch=256, max_pending=10_000, source_bits=lambda _s: 64,
        window=LinkWindow(bits), drop=lambda _f: drop,
    )
    link.attach(_Sender(credit))
    return link


@pytest.mark.parametrize("bits", [2, 3, 5, 8])
def test_a_link_stamps_no_more_than_its_window_dropped_frames_included(bits: int) -> None:
    link = _link(bits, drop=True)  # every frame lost on the way: still outstanding
    assert link.window is not None
    size = link.window.size
    link.offer_many([(_pub(i), None) for i in range(1, 1001)], 0.0)
    link.pump(0.0)
    assert link.stats["sent"] == size
    assert len(link.pending) == 1000 - size
    link.heartbeat(10.0)  # due, but the window is full: no number taken
    assert link.stats["sent"] == size
    link.pump(0.1)
    assert link.stats["window_full"] >= 1
    assert link.window.ack(link.window.space.wire(2 if size > 1 else 1))
    link.pump(0.2)
    assert link.stats["sent"] == size + (2 if size > 1 else 1)
    assert link.stats["window_peak"] == size


def test_a_batch_is_cut_to_the_room_left_in_the_window() -> None:
    link = _link(8)
    link.offer_many([(_pub(i), None) for i in range(1, 301)], 0.0)
    link.pump(0.0)
    assert link.sender is not None
    # 127 numbers: one transfer of 127 frames, however large max_batch and the credit
    assert link.stats["sent"] == 127
    assert link.stats["transfers"] == 1


def test_resends_at_or_below_the_ack_are_not_sent_and_the_rest_are() -> None:
    link = _link(5)
    link.offer_many([(_pub(i), None) for i in range(1, 11)], 0.0)
    link.pump(0.0)
    assert link.window is not None
    link.window.ack(6)
    resend = link.context.resend(GapRequest(4, 9))
    assert isinstance(resend, Resend)
    kept = [f.link_seq for f in link.fresh(resend) if isinstance(f, Publication | Heartbeat)]
    assert kept == [7, 8, 9]
    assert link.stats["stale_resends"] == 3


def test_a_reset_starts_a_fresh_window() -> None:
    link = _link(3)
    link.offer_many([(_pub(i), None) for i in range(1, 20)], 0.0)
    link.pump(0.0)
    assert link.window is not None
    assert link.window.room() == 0
    link.reset()
    assert link.window.room() == 3
    link.pump(0.1)  # frame 0 (the reset) and three new numbers
    assert link.window.outstanding == 3


def test_a_full_window_without_an_ack_probes_its_tail_once_a_tick() -> None:
    link = _link(3, drop=True)
    link.offer_many([(_pub(i), None) for i in range(1, 10)], 0.0)
    link.pump(0.0)
    link.probe_tail()  # first tick: full, noted
    assert not link.route.busy()
    link.probe_tail()  # next tick, no ACK since: the newest frame again
    assert link.stats["tail_probes"] == 1
    assert link.route.busy()
    assert link.window is not None
    link.window.ack(1)
    link.probe_tail()  # the ACK moved: no probe
    assert link.stats["tail_probes"] == 1


def test_the_tail_probe_goes_alone_marked_with_the_links_context() -> None:
    link = _link(3, drop=True)
    link.offer_many([(_pub(i), None) for i in range(1, 10)], 0.0)
    link.pump(0.0)
    link.probe_tail()
    link.probe_tail()
    before = len(link.sender.sent)
    assert link.route.send_one(read=False)  # made as it goes out (test_tail_probe_queue)
    [message] = link.sender.sent[before:]
    props = dict(message.properties)
    assert props["tail_probe"] == link.epoch  # the stub tells it from an old context's answer
    assert (props["message-type"], props["link_seq"], props["retransmit"]) == (
        "PUBLICATION", 3, True)
    [frame] = Decoder(link_bits=3).decode(message)
    assert (frame.source_seq, frame.link_seq, frame.retransmit) == (3, 3, True)


def test_ack_dispatch_moves_only_its_own_connections_current_window() -> None:
    link = _link(8)
    link.offer_many([(_pub(i), None) for i in range(1, 300)], 0.0)
    link.pump(0.0)
    links = {"l": link}
    stats: dict[str, int] = {}

    class Positions(NoPositions):
        def __init__(self) -> None:
            self.taken: list[dict[str, int]] = []

        def record(self, link: SubscriberLink, taken: Any) -> None:
            self.taken.append(dict(taken))

    positions = Positions()
    assert receive_ack(Ack("l", link.epoch, 50), "other", links, positions, stats) is None
    assert receive_ack(Ack("x", link.epoch, 50), "conn", links, positions, stats) is None
    assert receive_ack(Ack("l", "old", 50, {"s": 9}), "conn", links, positions, stats) is None
    assert link.window is not None
    assert link.window.acked_through == 0
    assert stats == {"acks": 3, "acks_ignored": 3}
    assert positions.taken == [{"s": 9}]  # source positions do not depend on the epoch
    assert receive_ack(Ack("l", link.epoch, 50), "conn", links, positions, stats) is link
    assert link.window.acked_through == 50
    assert receive_ack(Ack("l", link.epoch, 40), "conn", links, positions, stats) is None
    assert link.window.acked_through == 50


def test_the_subscriber_acks_coalesced_and_at_once_after_a_quarter_window() -> None:
    acks = AckSender("l", 8, window=127)  # a quarter: 31
    assert acks.due(None, 5, 0.0) is None  # no context named: no window to open
    assert acks.due("e", None, 0.0) is None  # frame 0 awaited
    assert acks.due("e", 5, 0.0) == Ack("l", "e", 5, {})
    assert acks.due("e", 10, 0.005) is None  # 5 more within 20 ms: wait
    assert acks.due("e", 36, 0.006) == Ack("l", "e", 36, {})  # a quarter window: at once
    assert acks.due("e", 37, 0.010) is None
    assert acks.due("e", 37, 0.030) is not None  # 20 ms on
    assert acks.due("e", 37, 0.040) is None  # nothing new
    assert acks.due("e", 37, 1.031) is not None  # refreshed after a second
    assert acks.due("f", 0, 1.032) == Ack("l", "f", 0, {})  # a new context: at once
    assert not acks.received(30)  # per transfer: is a quarter window in since the ACK?
    assert acks.received(1)
    acks.due("f", 40, 2.0)
    assert not acks.received(1)  # an ACK went: counted again from there
    wrap = AckSender("l", 3, window=3)  # quarter window rounds up to one number
    assert wrap.due("e", 7, 0.0) is not None
    assert wrap.due("e", 1, 0.001) is not None  # 7 -> 1 across the wrap: one more


def _reply(bits: int = 8, heartbeat: float = 0.5, gap: int = 100,
           window: int | None = 127) -> dict[str, object]:
    props: dict[str, object] = {str(PROP_LINK_BITS): bits, str(PROP_HEARTBEAT): heartbeat,
                                str(PROP_MAX_GAP_RANGE): gap}
    if window is not None:
        props[str(PROP_WINDOW)] = window
    return props


def test_the_attach_reply_configures_the_stub_and_contradictions_stop_it() -> None:
    numbering = FollowedNumbering("l", None, None, {"nak_delay": 0.01})
    stub = numbering.first_stub()
    assert (stub.bits, stub.heartbeat_interval) == (16, 1.0)
    followed = numbering.attached(_reply(), stub)
    assert (followed.bits, followed.heartbeat_interval, followed.max_request_span,
            followed.nak_delay) == (8, 0.5, 100, 0.01)
    assert numbering.acks is not None
    assert numbering.acks.window == 127
    assert numbering.attached(_reply(), followed) is followed  # the same again: kept
    with pytest.raises(SettingsMismatchError):  # a component restarted with other bits
        numbering.attached(_reply(bits=16), followed)
    with pytest.raises(SettingsMismatchError, match="no window on this 8-bit link") as err:
        numbering.attached(_reply(window=None), followed)  # no window on 8 bits: refused
    assert (err.value.expected, err.value.got) == (16, 8)
    wide = FollowedNumbering("l", None, None, {})
    wide_stub = wide.attached(_reply(bits=16), wide.first_stub())
    wide.attached(_reply(bits=16, window=None), wide_stub)
    assert wide.acks is None  # a component that runs no window (16 bits and up): no ACKs

    given = FollowedNumbering("l", 16, 0.5, {})
    with pytest.raises(SettingsMismatchError) as err:
        given.attached(_reply(), given.first_stub())
    assert (err.value.expected, err.value.got) == (8, 16)
    same = FollowedNumbering("l", 8, 0.5, {})
    assert same.attached(_reply(), same.first_stub()).bits == 8


def test_a_reply_without_numbering_leaves_the_given_settings() -> None:
    assert numbering_from_reply({}, bits=8, heartbeat_interval=2.0).bits is None
    numbering = FollowedNumbering("l", 16, 2.0, {})
    stub = numbering.first_stub()
    assert numbering.attached({}, stub) is stub
    assert numbering.acks is None
    narrow = FollowedNumbering("l", 8, 2.0, {})  # and no window: narrower than it may read
    with pytest.raises(SettingsMismatchError):
        narrow.attached({}, narrow.first_stub())


def test_the_contiguous_point_read_from_the_stub_wraps_and_waits_for_frame_0() -> None:
    stub = SubscriberStub(bits=2)  # M = 3
    assert consumed_through(stub) is None  # nothing yet: nothing to acknowledge
    window = LinkWindow(2)
    window.stamped()
    assert not window.ack(3)  # M, which no outstanding number is, would move nothing either
    points = []
    for n in (1, 2, 3, 1):
        stub.receive(Heartbeat(link_seq=n, timestamp=0.0), 0.0)
        points.append(consumed_through(stub))
    assert points == [1, 2, 3, 1]
    stub.link_reset(1.0)
    assert consumed_through(stub) is None  # the new context's frame 0 is awaited
