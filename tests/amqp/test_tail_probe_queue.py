"""A link's marked tail probe while it waits to be sent (WIRE.md, Window discipline), without a
network: it is made as it goes out, not when the tick queued it, so one the subscriber's ACK
passed meanwhile, or of a link context that is gone, never goes out; live frames (a new
context's frame 0 included) never overtake the answers queued before them, a parked one (a
relay's image fetch) included; and a link that gives no credit holds one probe at most, the
newest.

Found by a hostile review (branch review30): the probe was encoded at probe time, so it was
sent after the ACK passed it and, behind a parked answer, after a new context's frame 0 still
marked with the old epoch; and a link without credit queued one per tick for ever."""

from __future__ import annotations

from typing import Any

import pytest

from seqrepair.amqp.component.responses import MAX_WAITING_ANSWERS
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.framing import pack_frame
from seqrepair.core.messages import Publication

from .test_window_parts import _link, _pub

pytestmark = pytest.mark.amqp


def _props(message: Any) -> dict[str, Any]:
    return dict(message.properties) if getattr(message, "properties", None) else {}


def _probes(sent: list[Any], epoch: str) -> list[int]:
    return [_props(m)["link_seq"] for m in sent if _props(m).get("tail_probe") == epoch]


def _order(sent: list[Any]) -> list[tuple[Any, Any, Any, Any]]:
    """Per message sent: its type, link number, tail probe mark and subscription status."""
    return [(p.get("message-type"), p.get("link_seq"), p.get("tail_probe"),
             m.body.get("subscription_status") if isinstance(m.body, dict) else None)
            for m, p in zip(sent, map(_props, sent), strict=True)]


def test_a_queued_tail_probe_the_ack_passed_is_not_sent() -> None:
    link = _link(3, credit=0)
    link.sender.credit = 3
    link.offer_many([(_pub(i), None) for i in range(1, 10)], 0.0)
    link.pump(0.0)  # 1..3 out: the window (3) is full
    link.probe_tail()
    link.probe_tail()  # the probe of 3, queued (no credit)
    assert link.stats["tail_probes"] == 1
    assert link.window is not None
    link.window.ack(3)  # the subscriber had them all
    link.sender.credit = 10
    link.pump(0.1)
    # made as it goes out: at or below the ACK, stale, dropped
    assert _probes(link.sender.sent, link.epoch) == []
    assert link.stats["tail_probes_dropped"] == 1
    assert link.stats["sent"] == 6  # live went on: 4..6


def test_a_queued_tail_probe_above_the_ack_goes_out_as_it_is_sent() -> None:
    link = _link(3, credit=3)
    link.offer_many([(_pub(i), None) for i in range(1, 10)], 0.0)
    link.pump(0.0)
    link.probe_tail()
    link.probe_tail()  # the probe of 3, queued (no credit)
    assert link.window is not None
    link.window.ack(1)  # 2 and 3 still outstanding: the probe is still worth sending
    link.sender.credit = 10
    link.pump(0.1)
    [probe] = [m for m in link.sender.sent if _props(m).get("tail_probe") == link.epoch]
    [frame] = Decoder(link_bits=3).decode(probe)
    assert isinstance(frame, Publication)
    assert (frame.source_seq, frame.link_seq, frame.retransmit) == (3, 3, True)
    assert link.stats["tail_probes_dropped"] == 0


def test_live_frames_wait_behind_a_parked_answer_and_a_gone_contexts_probe_is_dropped() -> None:
    link = _link(3)
    link.offer_many([(_pub(i), None) for i in range(1, 4)], 0.0)
    link.pump(0.0)  # 1..3: full
    old = link.epoch
    waiting = [True]
    # a relay's image answer waiting for its upstream heads the route (parked)
    link.route.start_resend(iter(()), "img", None, parked=lambda: waiting[0])
    link.probe_tail()
    link.probe_tail()  # the probe of 3, marked with the old epoch, behind it
    link.hold(0.1, "subscription paused")
    link.release(0.2)  # a reset: a new epoch, ACTIVE queued, frame 0 due
    assert link.epoch != old
    link.offer_many([(_pub(i), None) for i in range(4, 7)], 0.3)
    before = len(link.sender.sent)
    link.pump(0.3)
    assert len(link.sender.sent) == before  # nothing goes out while the answer waits
    waiting[0] = False
    for _ in range(10):
        link.route.send_one()
    link.pump(0.4)
    order = _order(link.sender.sent)
    # the old context's probe was made as it went out: its context was gone, so dropped
    assert all(o[2] != old for o in order), order
    assert link.stats["tail_probes_dropped"] == 1
    # and the new context's frames came after what was queued before them (its ACTIVE)
    active = next(i for i, o in enumerate(order) if o[3] == "ACTIVE")
    first_new = next(i for i, o in enumerate(order) if o[0] == "HEARTBEAT" and o[1] == 0)
    assert active < first_new, order
    assert link.stats["sent"] == 3 + 1 + 3, order  # 1..3, then 0 and 1..3 of the new one


def test_a_probe_of_the_current_context_waits_its_turn_behind_a_parked_answer() -> None:
    link = _link(3)
    link.offer_many([(_pub(i), None) for i in range(1, 10)], 0.0)
    link.pump(0.0)  # 1..3: full, 4..9 wait unnumbered
    waiting = [True]
    link.route.start_resend(iter(()), "img", None, parked=lambda: waiting[0])
    link.probe_tail()
    link.probe_tail()
    before = len(link.sender.sent)
    link.pump(0.1)
    assert len(link.sender.sent) == before
    waiting[0] = False
    assert link.window is not None
    link.window.ack(1)  # room: live frames may follow once the answer and probe went out
    link.route.send_one()  # the answer ends (nothing to send), the probe goes out
    link.pump(0.2)
    order = _order(link.sender.sent[before:])
    assert order[0][1:3] == (3, link.epoch), order
    assert len(order) == 2, order  # then live: 4 (the window's room)
    assert link.stats["sent"] == 4


def test_a_link_without_credit_holds_one_tail_probe_the_newest() -> None:
    link = _link(3, credit=3)
    link.offer_many([(_pub(i), None) for i in range(1, 4)], 0.0)
    link.pump(0.0)  # 1..3 out, credit spent: full
    for _ in range(1001):  # 100 s of ticks
        link.probe_tail()
    assert len(link.route.responses) == 1
    assert link.stats["tail_probes"] == 1000
    assert link.stats["tail_probes_replaced"] == 999
    assert link.totals["tail_probes_replaced"] == 999  # the component's stop counters
    link.sender.credit = 10
    link.pump(1.0)
    assert _probes(link.sender.sent, link.epoch) == [3]  # one probe, of the newest frame


def test_a_newer_probe_goes_behind_the_answers_queued_meanwhile() -> None:
    link = _link(3, credit=3)
    link.offer_many([(_pub(i), None) for i in range(1, 4)], 0.0)
    link.pump(0.0)
    link.probe_tail()
    link.probe_tail()  # queued
    link.route.respond(_pub_message(), "answer")  # an answer queued after it
    link.probe_tail()  # replaces the first: it goes after the answer, as queued now
    assert len(link.route.responses) == 2
    assert len(link.route.responses) <= MAX_WAITING_ANSWERS
    link.sender.credit = 10
    link.pump(1.0)
    sent = link.sender.sent[1:]  # after the batch of 1..3
    assert sent[0].correlation_id == "answer"
    assert _probes(sent, link.epoch) == [3]


def _pub_message() -> Any:
    return pack_frame(_pub(99), 64)
