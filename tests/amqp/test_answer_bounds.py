"""Answers a component queues for a peer that gives no credit stay bounded, without a network:
a contribution whose ``reply-to`` route already holds ``MAX_WAITING_ANSWERS`` answers is refused
(``amqp:resource-limit-exceeded``) before it is handed to the owner, as a request is
(``ResponseRoute.check_room``); its ``CONTRIBUTION-ACCEPTED`` would otherwise be queued for
every contribution taken, without bound. The tail probe's bound: test_tail_probe_queue.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from seqrepair.amqp.component.contributions import ContributionFloodError, check_answer_room
from seqrepair.amqp.component.responses import MAX_WAITING_ANSWERS, ResponseRoute
from seqrepair.amqp.wire.codec import encode
from seqrepair.amqp.wire.technical import Ack
from seqrepair.core.permissions import Entitlement

pytestmark = pytest.mark.amqp


def test_a_contribution_is_refused_while_its_reply_route_is_full() -> None:
    conn = SimpleNamespace(seqrepair_id=7)
    route = ResponseRoute(Entitlement.everything(), 256, lambda _s: 64)
    routes = {(7, "$link/mine"): route}
    for _ in range(MAX_WAITING_ANSWERS - 1):
        route.respond(encode(Ack("l", 1)), None)
    check_answer_room(routes, conn, "$link/mine")  # room for one more
    check_answer_room(routes, conn, None)  # no reply-to: nothing is answered
    check_answer_room(routes, conn, "$link/other")  # no such route: nothing queued there
    route.respond(encode(Ack("l", 1)), None)
    with pytest.raises(ContributionFloodError) as raised:
        check_answer_room(routes, conn, "$link/mine")
    assert raised.value.condition == "amqp:resource-limit-exceeded"
    assert (raised.value.expected, raised.value.got) == (MAX_WAITING_ANSWERS, MAX_WAITING_ANSWERS)
    check_answer_room(routes, SimpleNamespace(seqrepair_id=8), "$link/mine")  # another conn
