"""``seqrepair gateway``: the transiting gateway as a process of its own, between subscribers
and a component."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .test_gateway_publish import gateway_process

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_a_subscriber_through_the_gateway_command_gets_the_stream(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2")
    got: list[Publication] = []
    with gateway_process(comp.url, tmp_path) as listen, contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(listen, "/weather/#", on_publication=got.append,
                       heartbeat_interval=0.2, link_name="behind-gateway")
        )
        # a heartbeat through the gateway: the link is relayed end to end
        assert wait_for(lambda: sub.stub.stats.heartbeats > 0)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.a", journal=Journal.from_url(redis_url))
        )
        publisher.publish_many([("/weather/wind/LEMD", {"n": i}, "update")
                                for i in range(50)])
        assert publisher.flush(30)
        assert wait_for(lambda: len(got) >= 50)
        time.sleep(0.3)  # a duplicate would arrive now
    assert [p.source_seq for p in got] == list(range(1, 51))
