"""A request too large for the component, sent through a gateway, over real processes
(``seqrepair serve``, a private redis-server, ``seqrepair gateway``).

Every client of a gateway shares its one requests link upstream, and the component enforces
the ``max-message-size`` it advertises on that link by detaching it
(:mod:`seqrepair.amqp.wire.sizelimit`). A request past it, forwarded as it came, cost every
client its requests: the gateway's requests link was gone and not attached again while the
connection stayed up, so each later request was rejected ``amqp:internal-error`` (upstream
out of reach), the retries of every subscriber behind the gateway running out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection

from seqrepair.amqp.client.query import query_capabilities
from seqrepair.amqp.wire.sizelimit import DEFAULT_MAX_MESSAGE_SIZE

from .conftest import ComponentProcess
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

DEADLINE = 30.0


def _capabilities(listen: str, padding: int = 0) -> tuple[Any, str | None]:
    """Send a CAPABILITIES request to the gateway at ``listen`` (with ``padding`` bytes in a
    property): its outcome and condition."""
    conn = BlockingConnection(listen, timeout=DEADLINE)
    try:
        sender = conn.create_sender("$seqrepair")
        props = {"message-type": "CAPABILITIES"}
        if padding:
            props["padding"] = "x" * padding
        delivery = sender.send(Message(id="q", properties=props), error_states=[])
        cond = delivery.remote.condition
        return delivery.remote_state, cond and cond.name
    finally:
        conn.close()


def test_a_request_too_large_for_the_component_costs_only_its_sender(
    redis_url: str, tmp_path: Path,
) -> None:
    comp = ComponentProcess(redis_url, tmp_path).start()
    try:
        with gateway_process(comp.url, tmp_path) as listen:
            gw = f"127.0.0.1:{listen}" if ":" not in listen else listen
            assert query_capabilities(gw, timeout=DEADLINE).limits  # answered through it
            state, condition = _capabilities(gw, padding=DEFAULT_MAX_MESSAGE_SIZE + 1024)
            assert state == Delivery.REJECTED
            assert condition == "amqp:link:message-size-exceeded"
            # another client's request: before, rejected amqp:internal-error (the gateway's
            # requests link upstream detached by the component, never attached again)
            assert query_capabilities(gw, timeout=DEADLINE).limits
    finally:
        comp.stop()
