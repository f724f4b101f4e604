"""A contributor whose reply route gives no credit gets at most ``MAX_WAITING_ANSWERS``
``CONTRIBUTION-ACCEPTED`` answers queued for it, over real processes (``seqrepair serve``, a
private redis-server, SCRAM principals, the owner's library ``Publisher``): the next
contribution is refused ``amqp:resource-limit-exceeded`` before the owner sees it, and once the
contributor grants credit and takes its answers it may contribute again. Without a network:
tests/amqp/test_answer_bounds.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection

from seqrepair.amqp.component.responses import MAX_WAITING_ANSWERS
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess
from .principals import MISSING, amqp_identity, serve_args
from .test_contributions import ALICE, BOB, CAROL, MALLORY, POLICY, SOURCE, Owner

pytestmark = [pytest.mark.amqp, pytest.mark.redis,
              pytest.mark.skipif(MISSING is not None, reason=f"AMQP principals: {MISSING}")]

REPLY = "$link/quiet-replies"


def _contribute(conn: BlockingConnection, link: Any, n: int) -> tuple[Any, str | None]:
    """Send contribution ``n`` with its answers to :data:`REPLY`: its outcome and the
    condition it was refused with (None: accepted)."""
    message = Message(id=f"c-{n}", reply_to=REPLY, body={"n": n},
                      properties={"message-type": "PUBLICATION", "topic": "/weather/bob"})
    conn.wait(lambda: link.credit > 0, timeout=10)
    delivery = link.send(message)
    conn.wait(lambda: delivery.remote_state in (Delivery.ACCEPTED, Delivery.REJECTED),
              timeout=10)
    state = delivery.remote_state
    condition = None if state == Delivery.ACCEPTED else str(delivery.remote.condition.name)
    delivery.settle()
    return state, condition


def test_a_contribution_whose_reply_route_holds_a_full_queue_is_refused(
    component: Callable[..., ComponentProcess], tmp_path: Path, journal: Journal,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    # a rate that never throttles the test: only the reply room refuses
    served = component("--heartbeat", "0.2", *serve_args(tmp_path, ALICE, BOB, CAROL, MALLORY),
                       "--policy", str(policy), "--contribution-rate", "1000",
                       "--contribution-burst", "1000", "--contribution-timeout", "5")
    owner = Owner(served.url)
    conn = BlockingConnection(served.url, timeout=10, **amqp_identity(BOB))
    try:
        owner.wait_attached(served)
        replies = conn.create_receiver(REPLY, name=REPLY.removeprefix("$link/"), credit=0)
        link = conn.create_sender("$contribute/" + SOURCE).link
        outcomes = [_contribute(conn, link, n) for n in range(MAX_WAITING_ANSWERS)]
        assert outcomes == [(Delivery.ACCEPTED, None)] * MAX_WAITING_ANSWERS, outcomes
        seen = len(owner.seen)
        # its answers all wait on the route that has no credit: the next is refused at once
        assert _contribute(conn, link, MAX_WAITING_ANSWERS) == (
            Delivery.REJECTED, "amqp:resource-limit-exceeded")
        assert _contribute(conn, link, MAX_WAITING_ANSWERS + 1) == (
            Delivery.REJECTED, "amqp:resource-limit-exceeded")
        assert len(owner.seen) == seen == MAX_WAITING_ANSWERS  # the owner never saw them
        assert journal.high_water(SOURCE) == MAX_WAITING_ANSWERS  # nor were they taken
        # credit given, every answer comes, in order, each naming its contribution
        replies.flow(MAX_WAITING_ANSWERS + 8)
        answers = [replies.receive(timeout=10) for _ in range(MAX_WAITING_ANSWERS)]
        assert [a.correlation_id for a in answers] == [
            f"c-{n}" for n in range(MAX_WAITING_ANSWERS)]
        assert {dict(a.properties)["message-type"] for a in answers} == {
            "CONTRIBUTION-ACCEPTED"}
        assert [int(dict(a.properties)["source_seq"]) for a in answers] == list(
            range(1, MAX_WAITING_ANSWERS + 1))
        # with its answers taken there is room again
        assert _contribute(conn, link, MAX_WAITING_ANSWERS + 2) == (Delivery.ACCEPTED, None)
        assert replies.receive(timeout=10).correlation_id == f"c-{MAX_WAITING_ANSWERS + 2}"
    finally:
        conn.close()
        owner.close()
