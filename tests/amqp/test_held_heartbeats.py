"""A link's heartbeat while answers head its route after a reset, without a network.

Found by a hostile review (branch rev31a): ``SubscriberLink.pump`` holds live frames and a
reset's frame 0 behind an answer heading the route (``holds_live``), but the tick's
``heartbeat`` stamped the new context's frame 0 past it: behind a relay's parked image fetch
after a hold and release, the new context's heartbeats 0, 1, 2 went out before its
``PAUSED``/``ACTIVE`` (and filled its window); ahead of an old context's link-range resend
still to be read, frame 0 went first and voided what the resend would read. A heartbeat of
the current context still goes out past a parked answer (the subscriber must not take a long
upstream fetch for a dead link)."""

from __future__ import annotations

from typing import Any

import pytest

from seqrepair.core.context import Resend
from seqrepair.core.messages import GapRequest

from .test_tail_probe_queue import _order
from .test_window_parts import _link, _pub

pytestmark = pytest.mark.amqp


def _drain(link: Any, now: float) -> None:
    for _ in range(20):
        link.route.send_one()
    link.pump(now)


def test_no_heartbeat_goes_out_past_a_parked_answer_after_a_reset() -> None:
    link = _link(3)
    link.offer_many([(_pub(i), None) for i in range(1, 3)], 0.0)
    link.pump(0.0)  # 1, 2
    assert link.window is not None
    link.window.ack(2)
    waiting = [True]
    link.route.start_resend(iter(()), "img", None, parked=lambda: waiting[0])
    link.hold(0.1, "subscription paused")
    link.release(0.2)  # a new epoch: ACTIVE queued behind the parked answer
    before = len(link.sender.sent)
    for tick in range(1, 6):
        link.heartbeat(0.2 + tick)  # the component's ticks while the fetch waits
        link.pump(0.2 + tick)
    assert len(link.sender.sent) == before, _order(link.sender.sent[before:])
    waiting[0] = False
    _drain(link, 6.0)
    order = _order(link.sender.sent[before:])
    statuses = [o[3] for o in order if o[3] is not None]
    assert statuses == ["PAUSED", "ACTIVE"], order
    active = next(i for i, o in enumerate(order) if o[3] == "ACTIVE")
    numbered = [i for i, o in enumerate(order) if o[1] is not None]
    assert numbered, order
    assert min(numbered) > active, order
    assert order[numbered[0]][:2] == ("HEARTBEAT", 0), order  # the new context starts at 0


def test_an_old_contexts_resend_is_not_overtaken_by_the_new_contexts_heartbeat() -> None:
    link = _link(3)
    link.window = None  # a subscriber that does not ack: its resends are never stale
    link.offer_many([(_pub(i), None) for i in range(1, 4)], 0.0)
    link.pump(0.0)  # 1..3
    resend = link.context.resend(GapRequest(1, 3))
    assert isinstance(resend, Resend)
    link.route.start_resend(link.fresh(resend), "gap", None)  # read on the repair turn
    link.hold(0.1, "subscription paused")
    link.release(0.2)  # reset: new epoch, frame 0 due
    before = len(link.sender.sent)
    link.heartbeat(5.0)  # the tick, before the repair turn read the resend
    link.pump(5.0)
    _drain(link, 5.1)
    order = _order(link.sender.sent[before:])
    zero = next(i for i, o in enumerate(order) if o[1] == 0)
    old = [i for i, o in enumerate(order) if o[0] != "HEARTBEAT" and o[1] in (1, 2, 3)
           and o[3] is None and o[2] is None]
    # the answer to the old context's request went out first, then the new context
    assert old, order
    assert max(old) < zero, order


def test_heartbeats_of_the_current_context_still_go_out_past_a_parked_answer() -> None:
    link = _link(3)
    link.offer_many([(_pub(1), None)], 0.0)
    link.pump(0.0)
    assert link.window is not None
    link.window.ack(1)
    link.route.start_resend(iter(()), "img", None, parked=lambda: True)
    before = len(link.sender.sent)
    link.heartbeat(2.0)
    order = _order(link.sender.sent[before:])
    assert order == [("HEARTBEAT", 2, None, None)], order


def test_a_resumed_subscriptions_frame_0_follows_its_active() -> None:
    """No parked answer: a subscription resumed (``release``) sends its frame 0 "on the next
    tick" (``on_seqrepair_subscription``), whose heartbeat runs before the pump. It was
    stamped there when due (a held link's heartbeats go on): frame 0 went before the new
    context's ``ACTIVE``, and the pump then sent its reset heartbeat as number 1."""
    link = _link(3)
    link.batch = False  # a transfer a frame: each one's number read off it
    link.offer_many([(_pub(1), None)], 0.0)
    link.pump(0.0)
    assert link.window is not None
    link.window.ack(1)
    link.hold(0.1, "subscription paused")
    link.pump(0.1)  # PAUSED
    link.heartbeat(1.1)  # a held link's heartbeat
    link.release(1.5)
    before = len(link.sender.sent)
    link.heartbeat(2.2)  # the next tick: due, before the pump
    link.pump(2.2)
    link.offer_many([(_pub(i), None) for i in range(2, 4)], 2.3)
    link.pump(2.3)
    order = _order(link.sender.sent[before:])
    numbers = [o[1] for o in order if o[1] is not None]
    # the window in step with the wire: the last number sent acknowledged, none outstanding
    link.window.ack(numbers[-1])
    outstanding = link.window.outstanding
    assert outstanding == 0, order
    assert order[0][3] == "ACTIVE", order
    assert numbers == [0, 1, 2], order
