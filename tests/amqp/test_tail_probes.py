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


def _lossy(redis_url: str, tmp_path: Path, bits: int) -> ComponentProcess:
    """A component at ``bits`` link bits dropping a fifth of its frames (seeded), started."""
    return ComponentProcess(redis_url, tmp_path, "--heartbeat", "0.2", "--link-bits", str(bits),
                            "--drop-rate", "0.2", "--drop-seed", str(bits)).start()


def _takes_feed_a(comp: ComponentProcess, redis_url: str, sub: Subscriber,
                  got: list[Publication]) -> list[tuple[str, int]]:
    """``sub`` connects, 300 publications of feed.a go to ``comp``; until ``got`` has as many
    as their /w/# ones, which it returns."""
    assert sub.wait_connected(60)
    publish(comp.url, "feed.a", 300)
    want = expected(redis_url, "feed.a", "/w/#")
    assert wait_for(lambda: len(got) >= len(want), 120), (
        len(got), len(want), sub.stats(), comp.log_text()[-3000:])
    return want


@pytest.mark.parametrize("bits", [3, 4, 5])
def test_marked_tail_probes_at_narrow_widths_under_loss_cost_nothing(
    bits: int, redis_url: str, tmp_path: Path
) -> None:
    comp = _lossy(redis_url, tmp_path, bits)
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
        want = _takes_feed_a(comp, redis_url, sub, got)
    finally:
        sub.stop()
        comp.stop()
    assert [(p.topic, p.source_seq) for p in got] == want
    assert not sub.unrecoverable
    assert paused.is_set()
    # the component's marked probes reached the stub as such (the epoch matched)
    assert sub.stub.stats.tail_probes > 0, (sub.stats(), comp.log_text()[-3000:])


@pytest.mark.parametrize("bits", [3, 4])
def test_a_subscriber_without_credit_for_a_while_gets_its_stream_and_probes_stay_bounded(
    bits: int, redis_url: str, tmp_path: Path
) -> None:
    """A subscriber granting 4 credits whose application stalls 2.5 s now and then: its
    window stays full without an ``ACK`` and its credit runs out, so the component's tick
    has a probe due every 0.1 s with no credit to send it. One waits at most, the newest
    (``tail_probes_replaced``), made as it goes out (``tail_probes_dropped``: stale by then);
    what waits on any link stays small (``answers_waiting_peak``; one probe per tick would
    pile up 25 a stall); and the subscriber gets exactly its stream, in order."""
    comp = _lossy(redis_url, tmp_path, bits)
    got: list[Publication] = []
    stalls = threading.Event()

    def take(publication: Publication) -> None:
        got.append(publication)
        if len(got) % 60 == 0:  # no credit given, no ACK, while it sleeps
            stalls.set()
            time.sleep(2.5)

    sub = Subscriber(comp.url, "/w/#", on_publication=take, link_name="starved", credit=4,
                     heartbeat_interval=0.2).start()
    try:
        want = _takes_feed_a(comp, redis_url, sub, got)
    finally:
        sub.stop()
    counters = comp.stop_counters()
    assert [(p.topic, p.source_seq) for p in got] == want
    assert not sub.unrecoverable
    assert stalls.is_set()
    assert counters["tail_probes_replaced"] > 0, counters  # probes were due without credit
    assert counters["answers_waiting_peak"] <= 16, counters
