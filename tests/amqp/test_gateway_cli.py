"""``seqrepair gateway``: the transiting gateway as a process of its own, between subscribers
and a component."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, _env, free_port, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


def test_a_subscriber_through_the_gateway_command_gets_the_stream(
    component: Callable[..., ComponentProcess], redis_url: str, tmp_path: Path
) -> None:
    comp = component("--heartbeat", "0.2")
    ready = tmp_path / "gateway-ready"
    listen = f"127.0.0.1:{free_port()}"
    gateway = subprocess.Popen(
        [sys.executable, "-m", "seqrepair.cli", "gateway", "--listen", listen,
         "--upstream", comp.url, "--name", "edge", "--ready-file", str(ready),
         "--allow-anonymous"],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    got: list[Publication] = []
    try:
        assert wait_for(ready.exists), gateway.stderr.read() if gateway.poll() is not None else ""
        with contextlib.ExitStack() as running:
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
    finally:
        gateway.terminate()
        assert gateway.wait(10) == 0
