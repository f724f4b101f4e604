"""A source request the component cannot answer for its journal (Redis out of reach a moment)
is rejected at the delivery (no GAP-ERROR comes), and since 2980f1f the library ``Subscriber``
passes that rejection to ``stub.request_rejected``, which gives a request up at once unless
its condition passes. The journal's errors carry no AMQP condition, so the component rejected
them ``amqp:invalid-field`` (a malformed request): a subscriber whose resume came while Redis
restarted was told ``Unrecoverable`` for every source although the journal held everything
(before 2980f1f the rejection was not heard and the request was asked again on its timer).
Over real processes: a private redis-server stopped under a running ``seqrepair serve``."""

from __future__ import annotations

from pathlib import Path

import pytest
from proton import Delivery, Message, ulong
from proton.utils import BlockingConnection

from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS, LINK_PREFIX, PROP_LINK
from seqrepair.core.events import RequestSourceGap, Unrecoverable
from seqrepair.core.messages import SourceGapRequest
from seqrepair.core.stub import SubscriberStub
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_a_source_request_the_journal_cannot_answer_now_is_asked_again_not_given_up(
    tmp_path: Path,
) -> None:
    with EmbeddedRedis(appendfsync="always") as server:
        comp = ComponentProcess(server.url, tmp_path, "--heartbeat", "0.2").start()
        conn = None
        try:
            conn = BlockingConnection(comp.url, timeout=10)
            conn.create_receiver("/w/#", name="r", credit=10)
            control = conn.create_sender(CONTROL_ADDRESS)
            server.stop()  # the journal out of reach (a restart, a failover)
            delivery = control.link.send(Message(
                properties={"message-type": "SOURCE-GAP-REQUEST", PROP_LINK: "r"},
                body={"feed.a": ulong(0)}, reply_to=LINK_PREFIX + "r", id=1))
            conn.wait(lambda: delivery.remote_state != 0, timeout=10)
            assert delivery.remote_state == Delivery.REJECTED  # the premise: no answer comes
            cond = delivery.remote.condition
            condition = cond.name if cond else None
        finally:
            if conn is not None:
                conn.close()
            comp.stop()
    assert condition == "amqp:internal-error", condition  # the component's, not the request's
    # the stub, told so as the Subscriber tells it, asks again rather than give up
    stub = SubscriberStub(heartbeat_interval=0.2)
    request = stub.resume_point()
    events = stub.request_rejected(request, condition, now=0.0)
    assert [e for e in events if isinstance(e, Unrecoverable)] == []
    retry = [e for e in stub.poll(now=stub.next_deadline) if isinstance(e, RequestSourceGap)]
    assert [type(r.request) for r in retry] == [SourceGapRequest]
