"""A subscriber behind a gateway while the component is SIGKILLed and started again, over real
processes: ``seqrepair serve`` (its journal in a private redis-server, which outlives it),
``seqrepair gateway`` in front of it and the library :class:`Subscriber` behind the gateway.

The gateway rejects a request it cannot hand to the component ``amqp:internal-error``
(temporary for the stub). An outage of the component is no loss: the journal holds every
publication, so the subscriber must have them all once the component is back, and nothing
Unrecoverable, whatever the outage's length (here longer than the stub's retries).

It passes on the code before requests were settled with the component's outcome (518e62c) and
after: the gateway closes its subscribers' connections when it loses the component and holds
their links again until it is back, so no repair request is sent meanwhile (only ACKs, now
rejected ``amqp:internal-error`` instead of accepted and dropped: the subscriber counts them in
``rejected``, 87 in a run here, none before) and nothing is given up for the outage."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .conftest import ComponentProcess
from .test_gateway_publish import gateway_process
from .test_given_resume_real import _publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

OUTAGE = 16.0
"""Seconds the component stays down: longer than the stub's retries of a request (six, from
0.2 s doubling: about 12.6 s, up to 16 s with jitter)."""


def test_a_subscriber_behind_a_gateway_outlives_an_outage_of_the_component(
    redis_url: str, tmp_path: Path,
) -> None:
    from seqrepair.amqp.client.subscriber import Subscriber

    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2").start()
    got: list[tuple[str, int]] = []
    try:
        with gateway_process(comp.url, tmp_path) as listen, Subscriber(
                f"amqp://{listen}", "/w/#", heartbeat_interval=0.2, link_name="out",
                on_publication=lambda p: got.append((p.source, p.source_seq))) as sub:
            assert sub.connected.wait(10)
            _publish(comp.url, "feed.o", 10)
            deadline = time.monotonic() + 20
            while len(got) < 10 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(got) == 10, got
            comp.kill()
            time.sleep(OUTAGE)
            comp.start()
            _publish(comp.url, "feed.o", 10, after=10)
            deadline = time.monotonic() + 30
            while len(got) < 20 and not sub.unrecoverable and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.3)  # a duplicate would come now
            lost = list(sub.unrecoverable)
            report = sub.stats()
    finally:
        comp.stop()
    assert lost == [], (lost, report, got)
    assert got == [("feed.o", n) for n in range(1, 21)], (got, report)
