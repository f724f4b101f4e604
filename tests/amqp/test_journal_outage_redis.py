"""A numbering publisher without a journal of its own keeps publishing through a Redis outage.

Real parts only: a real redis-server is stopped while a :class:`Publisher` with ``journal=None``
(it numbers its publications itself) publishes steadily to a real component (``seqrepair
serve``), then started again on the same port and data. The component releases what it cannot
journal, and what the publisher sent after it; the publisher sends it again after a backoff, in
order. Nothing is rejected (no ``amqp:precondition-failed``: the source is not wedged), and a
subscriber gets every publication exactly once, in order. No timed assertions: every wait is a
generous deadline.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest

from seqrepair.amqp.client import Publisher, Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SOURCE = "feed.outage"
TOTAL = 1_200



def test_a_numbering_publisher_without_a_journal_publishes_through_a_redis_outage(
    private_server: EmbeddedRedis, tmp_path: Path
) -> None:
    comp = ComponentProcess(private_server.url, tmp_path, "--heartbeat", "0.2").start()
    got: list[Publication] = []
    published = threading.Event()
    try:
        with contextlib.ExitStack() as running:
            sub = running.enter_context(
                Subscriber(comp.url, "/own/#", on_publication=got.append,
                           heartbeat_interval=0.2, link_name="outage-watcher")
            )
            assert sub.connected.wait(20)
            time.sleep(0.3)
            publisher = running.enter_context(
                # small batches: many deliveries in flight when Redis goes
                Publisher(comp.url, SOURCE, address="/own/#", journal=None, max_batch=8)
            )

            def feed() -> None:  # steadily, before, during and after the outage
                for n in range(1, TOTAL + 1):
                    publisher.publish("/own/x", {"n": n})
                    time.sleep(0.002)
                published.set()

            feeder = threading.Thread(target=feed, name="feed", daemon=True)
            feeder.start()
            assert wait_for(lambda: publisher.accepted >= 200, 30), publisher.accepted
            private_server.stop()
            assert wait_for(lambda: publisher.released > 0, 30)  # the outage was felt
            time.sleep(1.0)  # publishing goes on meanwhile
            private_server.start()  # same port, same data
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
    assert "precondition-failed" not in log
    assert "message released" in log  # the component did release
    assert [(p.source_seq, p.fields["n"]) for p in held] == [(n, n) for n in range(1, TOTAL + 1)]
    assert [(p.source, p.source_seq, p.fields["n"]) for p in got] == [
        (SOURCE, n, n) for n in range(1, TOTAL + 1)
    ]
    assert report.unrecoverable == 0
