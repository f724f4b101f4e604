"""A rejected request delivery is one rejection however many times proton reports it: its
``on_delivery`` calls ``on_rejected`` at every update of a delivery whose remote state is
rejected (the state, then the settlement, when a peer sends them in two dispositions). The
CI of 818b662 saw ``report.rejected`` 4 against the stub's 3 behind a gateway
(test_gateway_rejected_real): the report counted an update, not a rejection."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import SourceGapRequest


def _rejected(asked: tuple[Any, ...]) -> Any:
    condition = SimpleNamespace(name="amqp:resource-limit-exceeded", description="busy")
    delivery = SimpleNamespace(remote=SimpleNamespace(condition=condition), seqrepair_asked=asked)
    return SimpleNamespace(delivery=delivery)


def test_a_rejection_reported_twice_is_counted_and_told_once() -> None:
    sub = Subscriber("amqp://127.0.0.1:1", "/w/#", heartbeat_interval=0.2)
    event = _rejected((SourceGapRequest({"feed.a": 3}),))
    sub.on_rejected(event)
    sub.on_rejected(event)  # the same delivery's settlement, after its state
    assert sub.report.rejected == 1
    assert sub.stub.stats.requests_rejected == 1
    sub.on_rejected(_rejected((SourceGapRequest({"feed.a": 5}),)))  # another delivery
    assert sub.report.rejected == 2
    assert sub.stub.stats.requests_rejected == 2
