"""Marked tail probes over real processes (issue 27: the stub never stalls): at 3, 4 and 5
link bits with forced loss, a subscriber whose application pauses now and then leaves the
component's window full without an ``ACK``, so the component resends its newest frame marked
``tail_probe`` with the link's epoch (WIRE.md, Window discipline). The subscriber's stub takes
those as :meth:`~seqrepair.core.stub.SubscriberStub.receive_tail_probe` (its epoch matches)
and everything arrives exactly once, in order, with no ``Unrecoverable``.

The case the mark exists for (a window of stale frames whose newest original was lost) is
pinned sans I/O in tests/core/test_stub_stale_window.py and simulated in
tests/core/test_tail_probe_sim.py; here the wire path is proven end to end: the component
marks, the adapter matches the epoch, the stub counts and survives them under loss."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication

from .conftest import ComponentProcess, wait_for
from .test_relay import expected, publish

pytestmark = [pytest.mark.amqp, pytest.mark.redis]


@pytest.mark.parametrize("bits", [3, 4, 5])
def test_marked_tail_probes_at_narrow_widths_under_loss_cost_nothing(
    bits: int, redis_url: str, tmp_path: Path
) -> None:
    comp = ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits",
                            str(bits), "--drop-rate", "0.2", "--drop-seed", str(bits)).start()
    got: list[Publication] = []
    paused = threading.Event()

    def take(publication: Publication) -> None:
        got.append(publication)
        if len(got) % 25 == 0:  # the application stalls: the window stays full, no ACK
            paused.set()
            time.sleep(1.0)

    sub = Subscriber(comp.url, "/w/#", on_publication=take, link_name="slow",
                     heartbeat_interval=0.2).start()
    try:
        assert sub.wait_connected(60)
        publish(comp.url, "feed.a", 300)
        want = expected(redis_url, "feed.a", "/w/#")
        assert wait_for(lambda: len(got) >= len(want), 120), (
            len(got), len(want), sub.stats(), comp.log_text()[-3000:])
    finally:
        sub.stop()
        comp.stop()
    assert [(p.topic, p.source_seq) for p in got] == want
    assert not sub.unrecoverable
    assert paused.is_set()
    # the component's marked probes reached the stub as such (the epoch matched)
    assert sub.stub.stats.tail_probes > 0, (sub.stats(), comp.log_text()[-3000:])
