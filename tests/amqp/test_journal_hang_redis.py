"""A redis-server that hangs (SIGSTOP) loses nothing and does not hold the component.

Real parts only: a real redis-server is stopped with SIGSTOP (it keeps its connections open
and answers nothing, as behind a path that drops packets) while a :class:`Publisher` that
numbers its own publications publishes steadily to a real component (``seqrepair serve
--redis-timeout 1``), then continued with SIGCONT. Each journal call fails only at the socket
timeout; the component then leaves the journal quiet for twice the time it waited (its log
says so) and releases what comes meanwhile untried, so its event loop goes on serving links.
The publisher sends the released publications again, in order; a subscriber gets every
publication exactly once, in order. No timed assertions: every wait is a generous deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqrepair.amqp.client import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SOURCE = "feed.hang"
TOTAL = 600


@contextlib.contextmanager
def hung(server: EmbeddedRedis) -> Iterator[None]:
    """``server`` stopped (SIGSTOP) inside the block, continued (SIGCONT) after it."""
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_hung_redis_loses_nothing_and_the_component_keeps_serving(
    private_server: EmbeddedRedis, tmp_path: Path
) -> None:
    comp = ComponentProcess(private_server.url, tmp_path, "--heartbeat", "0.2",
                            "--redis-timeout", "1").start()
    got: list[Publication] = []
    published = threading.Event()
    try:
        with contextlib.ExitStack() as running:
            sub = running.enter_context(
                Subscriber(comp.url, "/hang/#", on_publication=got.append,
                           heartbeat_interval=0.2, link_name="hang-watcher")
            )
            assert sub.connected.wait(20)
            time.sleep(0.3)
            publisher = running.enter_context(
                Publisher(comp.url, SOURCE, address="/hang/#", journal=None, max_batch=8)
            )

            def feed() -> None:  # steadily, before, during and after the hang
                for n in range(1, TOTAL + 1):
                    publisher.publish("/hang/x", {"n": n})
                    time.sleep(0.004)
                published.set()

            feeder = threading.Thread(target=feed, name="feed", daemon=True)
            feeder.start()
            assert wait_for(lambda: publisher.accepted >= 100, 30), publisher.accepted
            with hung(private_server):
                assert wait_for(lambda: publisher.released > 0, 30)  # the hang was felt
                time.sleep(3.0)  # publishing goes on meanwhile
            assert published.wait(60)
            flushed = publisher.flush(60)
            done = wait_for(lambda: len(got) >= TOTAL, 60)
            time.sleep(0.5)  # anything extra (a duplicate) would arrive now
            report = sub.stats()
        with Journal.from_url(private_server.url) as journal:
            held = journal.read_range(SOURCE, 1, TOTAL + 10)
    finally:
        comp.stop()
    log = comp.log_text()
    assert flushed, (publisher.accepted, publisher.rejected, publisher.released, log[-3000:])
    assert done, (len(got), report, log[-3000:])
    assert publisher.rejected == 0, log[-3000:]
    assert publisher.accepted == TOTAL
    assert "the journal stalled the event loop" in log  # the component stopped trying a while
    assert [(p.source_seq, p.fields["n"]) for p in held] == [(n, n) for n in range(1, TOTAL + 1)]
    assert [(p.source, p.source_seq, p.fields["n"]) for p in got] == [
        (SOURCE, n, n) for n in range(1, TOTAL + 1)
    ]
    assert report.unrecoverable == 0
