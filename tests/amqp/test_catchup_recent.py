"""A catch-up sent from the entries the component fanned out lately (issue 26), over real
processes: the durable subscriber comes back and its replay is answered from the component's
recent entries (``--replay-cache-bytes``) instead of the journal's pages, exact and with
nothing twice; with the cache off, too small for the replay, or emptied by a restart, the
journal answers the rest the same way. No timing is asserted."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.messages import Publication

from .conftest import ComponentProcess, wait_for

N = 3_000


def _catch_up(comp: ComponentProcess, *, restart: bool = False, freeze_at: int = 0
              ) -> tuple[list[int], Subscriber, dict[str, int]]:
    with Subscriber(comp.url, "/recent/#", link_name="back") as first:
        assert first.wait_connected(20)
        time.sleep(0.3)  # its position is stored on the attach
    with Publisher(comp.url, "feed.r", address="/recent/#") as pub:
        for start in range(0, N, 500):
            pub.publish_many([("/recent/t", {"n": i, "pad": "x" * (i % 90)}, "update")
                              for i in range(start, start + 500)])
        assert pub.flush(60)
    if restart:
        comp.stop()
        comp.start()
    got: list[int] = []
    thawed: list[threading.Timer] = []

    def take(publication: Publication) -> None:
        got.append(publication.source_seq)
        if freeze_at and len(got) == freeze_at:  # the component stops for a while mid-replay
            assert comp.proc is not None
            os.kill(comp.proc.pid, signal.SIGSTOP)
            thawed.append(threading.Timer(1.5, os.kill, (comp.proc.pid, signal.SIGCONT)))
            thawed[-1].start()

    second = Subscriber(comp.url, "/recent/#", link_name="back", on_publication=take)
    with second:
        try:
            wait_for(lambda: len(got) >= N, 120)
            time.sleep(0.3)  # anything sent twice after the last one is counted too
        finally:
            for timer in thawed:
                timer.join(5)
    comp.stop()
    return got, second, comp.stop_counters()


@pytest.mark.parametrize("freeze_at", [0, N // 3])
def test_a_catch_up_of_recent_history_comes_from_the_cache_exact(
    component: Callable[..., ComponentProcess], freeze_at: int
) -> None:
    comp = component("--max-gap-range", "1000", "--replay-page", "200")
    got, second, counters = _catch_up(comp, freeze_at=freeze_at)
    assert got == list(range(1, N + 1))  # exactly once, in order
    assert second.unrecoverable == []
    assert second.stats().duplicates == 0
    assert second.stats().source_requests_sent >= 3  # one per --max-gap-range at least
    assert counters["replay_cache_served"] == N
    assert counters["replay_cache_mismatched"] == 0


@pytest.mark.parametrize("cache", ["0", "60000"])
def test_without_room_for_it_the_journal_answers_the_rest_exact(
    component: Callable[..., ComponentProcess], cache: str
) -> None:
    comp = component("--replay-cache-bytes", cache)
    got, second, counters = _catch_up(comp)
    assert got == list(range(1, N + 1))
    assert second.unrecoverable == []
    assert second.stats().duplicates == 0
    if cache == "0":
        assert counters["replay_cache_served"] == 0
    else:  # the newest entries only: the journal sends the older ones, the cache the rest
        assert 0 < counters["replay_cache_served"] < N
        assert counters["replay_cache_evicted"] > 0


def test_after_a_restart_the_journal_answers_exact(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component()
    got, second, counters = _catch_up(comp, restart=True)
    assert got == list(range(1, N + 1))
    assert second.unrecoverable == []
    assert counters["replay_cache_served"] == 0
