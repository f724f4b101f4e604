"""A plain publisher (no numbers of its own) through a Redis outage, on real parts only.

A real redis-server is stopped while the component journals a publication, then started
again on the same port and data: the message sent meanwhile is rejected, and the ones after it
are numbered right after what the journal holds. A subscriber gets every accepted publication,
in order, once. No timed assertions: every wait is a generous deadline.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

TOPIC = "/plain/outage"



class PlainPublisher:
    """One proton connection that knows nothing of seqrepair: every message it sends is a
    publication of the same source (its container id), numbered by the component."""

    def __init__(self, url: str) -> None:
        self.conn = BlockingConnection(url, timeout=20)
        self.sender = self.conn.create_sender(TOPIC)
        self.source = self.conn.container.container_id

    def send(self, n: int) -> str:
        """The outcome: "accepted", or the error condition it was rejected with."""
        delivery = self.sender.send(Message(body={"n": n}), error_states=[])
        if delivery.remote_state == Delivery.ACCEPTED:
            return "accepted"
        condition = delivery.remote.condition
        return condition.name if condition is not None else str(delivery.remote_state)

    def close(self) -> None:
        self.conn.close()


@contextlib.contextmanager
def watched_plain_publisher(
    url: str, link_name: str
) -> Iterator[tuple[Subscriber, list[Publication], PlainPublisher]]:
    """A subscriber to ``/plain/#`` of the component at ``url`` (heartbeats every 0.2 s) and
    the list of what it got, then a :class:`PlainPublisher`; both closed on exit."""
    got: list[Publication] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(url, "/plain/#", on_publication=got.append, heartbeat_interval=0.2,
                       link_name=link_name)
        )
        assert sub.connected.wait(20)
        time.sleep(0.3)  # attached before the first publication
        publisher = PlainPublisher(url)
        running.callback(publisher.close)
        yield sub, got, publisher


def test_a_plain_publisher_is_served_again_with_contiguous_numbers_after_redis_comes_back(
    private_server: EmbeddedRedis, tmp_path: Path
) -> None:
    comp = ComponentProcess(private_server.url, tmp_path, "--heartbeat", "0.2").start()
    try:
        with watched_plain_publisher(comp.url, "outage-watcher") as (_sub, got, publisher):
            outcomes = {1: publisher.send(1), 2: publisher.send(2)}
            private_server.stop()
            outcomes[3] = publisher.send(3)  # journaling fails: must be refused, not numbered
            private_server.start()  # same port, same data
            for n in (4, 5, 6):
                outcomes[n] = publisher.send(n)
            accepted = [n for n, outcome in outcomes.items() if outcome == "accepted"]
            wait_for(lambda: len(got) >= len(accepted), 30)
            time.sleep(0.5)  # anything extra (a duplicate) would arrive now
        with Journal.from_url(private_server.url) as journal:
            held = journal.read_range(publisher.source, 1, 100)
    finally:
        comp.stop()
    log = comp.log_text()[-3000:]
    assert accepted == [1, 2, 4, 5, 6], (outcomes, log)
    numbered = [(1, 1), (2, 2), (3, 4), (4, 5), (5, 6)]  # (number, n): no hole where 3 failed
    assert [(p.source_seq, p.fields["n"]) for p in held] == numbered
    assert [(p.source, p.source_seq, p.fields["n"]) for p in got] == [
        (publisher.source, seq, n) for seq, n in numbered
    ]
    assert outcomes[3] == "amqp:internal-error", log
