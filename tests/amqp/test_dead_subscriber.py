"""A dead-but-alive subscriber (huge credit, never reads) costs the component a bounded number
of bytes: its link is paused, then detached and its connection dropped; an honest subscriber
meanwhile gets everything once, in order; what the dead one held is released."""

from __future__ import annotations

import contextlib
import gc
import re
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .deadpeer import DeadPeer

pytestmark = [pytest.mark.amqp, pytest.mark.redis, pytest.mark.slow]

MiB = 1 << 20
BOUNDS = {"--link-unsent-bytes": 1 * MiB, "--link-context-bytes": 2 * MiB,
          "--connection-bytes": 8 * MiB, "--principal-bytes": 16 * MiB,
          "--component-bytes": 32 * MiB}
BASELINE_SLACK = 40 * MiB
"""RSS the component may grow by besides what its bounds count: the Python objects of
publications in flight, proton's transport buffers, malloc's arenas."""


def rss(pid: int) -> int:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert match is not None
    return int(match.group(1)) * 1024


def test_a_subscriber_that_never_reads_is_paused_detached_and_costs_no_more_than_the_bounds(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    args = [str(x) for pair in BOUNDS.items() for x in pair]
    comp = component(*args, "--memory-grace", "3", "--context-retention", "1")
    assert comp.proc is not None
    pid = comp.proc.pid
    got: list[int] = []
    total, rate, pad = 24_000, 2_000, "x" * 200
    peak = 0
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(comp.url, "/weather/#", link_name="honest",
                       on_publication=lambda p: got.append(p.source_seq))
        )
        assert sub.connected.wait(10)
        publisher = running.enter_context(
            Publisher(comp.url, "feed.m", journal=Journal.from_url(redis_url))
        )
        dead = DeadPeer(comp.url, "/weather/#", "dead").open()
        running.callback(dead.close)
        time.sleep(0.5)
        base = rss(pid)
        start, sent = time.monotonic(), 0
        while sent < total:
            due = min(total, int((time.monotonic() - start) * rate)) - sent
            if due > 0:
                publisher.publish_many([("/weather/wind/LEMD", {"n": sent + i, "pad": pad},
                                         "update", None) for i in range(due)])
                sent += due
            peak = max(peak, rss(pid))
            time.sleep(0.05)
        assert publisher.flush(60)
        assert wait_for(lambda: len(got) >= total, 60)
        peak = max(peak, rss(pid))
        log = comp.log_text()
        assert re.search(r"link paused .*link=dead reason='\d+ bytes sent and not yet taken", log)
        assert "link detached: peer does not read" in log
        time.sleep(0.5)
    assert got == list(range(1, total + 1))  # the honest subscriber: each once, in order
    ceiling = BOUNDS["--component-bytes"] + BASELINE_SLACK
    assert peak - base < ceiling, (peak - base) / MiB
    # both links' contexts expire (--context-retention 1): waited for, as a loaded machine
    # can take longer than the retention to sweep them
    assert wait_for(lambda: all(
        re.search(rf"link context expired .*link={name}\b", comp.log_text())
        for name in ("honest", "dead")), 30), comp.log_text()[-3000:]
    counters = comp.stop_counters()
    assert counters["paused_for_bytes"] >= 1
    assert counters["detached_for_bytes"] == 1
    assert counters["memory_peak"] <= BOUNDS["--component-bytes"]
    assert counters["link_states"] == 0  # what the links held is gone
    assert counters["memory_bytes"] == 0


def test_the_component_drops_every_reference_to_a_link_detached_for_bytes(redis_url: str) -> None:
    from .inthread import HereComponent

    comp = HereComponent(redis_url, link_unsent_bytes=256 * 1024, memory_grace=1.0,
                         context_retention=0.5).start()
    try:
        dead = DeadPeer(comp.here_url, "/weather/#", "dead").open()
        link = weakref.ref(comp.call(lambda: comp.links["dead"]))
        with Publisher(comp.here_url, "feed.r", journal=Journal.from_url(redis_url)) as pub:
            pad = "x" * 200
            for k in range(40):  # ~8 MB: past what the kernel's socket buffers hold
                pub.publish_many([("/weather/wind/LEMD", {"n": k, "pad": pad}, "update", None)
                                  for _ in range(500)])
                time.sleep(0.05)
            assert pub.flush(30)
        assert wait_for(lambda: comp.call(lambda: comp.stats["detached_for_bytes"]) == 1, 15)
        assert wait_for(lambda: comp.call(lambda: "dead" not in comp.links), 10)
        dead.close()

        def released() -> bool:
            return comp.call(lambda: (gc.collect(), link() is None)[1])

        assert wait_for(released, 10)
        assert comp.call(lambda: comp.stats["link_states"]) == 0
        with pytest.raises(Exception, match="no subscriber link"):
            comp.call(lambda: comp.gapfill.link("dead"))
    finally:
        comp.shut()
