"""Poison publications (issue 22 §3): what cannot be delivered is refused before it is
journaled, with a typed error or an AMQP condition; what an old journal holds of it never kills
a subscriber: the replay reports it ``Unrecoverable`` and delivers the rest.

Real parts: a real redis-server, ``seqrepair serve`` in a child process, the library clients
and a plain AMQP publisher (proton's BlockingConnection).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from proton import Delivery, Message, ulong
from proton.utils import BlockingConnection

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.core.errors import OversizedPublicationError, UndeliverableError
from seqrepair.core.events import Unrecoverable
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal
from seqrepair.journal.publisher import Publisher as JournalPublisher
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, wait_for

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

TOPIC = "/w/a"


@attrs.frozen
class Setup:
    server: EmbeddedRedis
    comp: ComponentProcess
    subscriber: Subscriber
    got: list[Publication]
    events: list[Any]

    def numbers(self, source: str) -> list[int]:
        return [p.source_seq for p in self.got if p.source == source]


@contextlib.contextmanager
def running(tmp_path: Path) -> Iterator[Setup]:
    server = EmbeddedRedis(data_dir=tmp_path / "redis", appendfsync="always").start()
    comp = ComponentProcess(server.url, tmp_path, "--heartbeat", "0.2").start()
    got: list[Publication] = []
    events: list[Any] = []
    try:
        with Subscriber(comp.url, "/w/#", link_name="watch", heartbeat_interval=0.2,
                        on_publication=got.append, on_event=events.append) as sub:
            assert sub.wait_connected(20)
            yield Setup(server, comp, sub, got, events)
    finally:
        comp.stop()
        server.stop()


POISON = [
    (TOPIC, {"x": 2**64}, UndeliverableError),
    (TOPIC, {"x": [1, -(2**63) - 1]}, UndeliverableError),
    ("/w/" + "t" * (1 << 20), {}, UndeliverableError),
    (TOPIC, {"blob": "b" * (2 << 20)}, OversizedPublicationError),
]


def test_a_journaling_publisher_refuses_poison_before_it_is_journaled(tmp_path: Path) -> None:
    with running(tmp_path) as s:
        journal = Journal.from_url(s.server.url)
        with Publisher(s.comp.url, "feed.j", journal=journal) as publisher:
            publisher.publish(TOPIC, {"n": 0})
            for topic, fields, error in POISON:
                with pytest.raises(error):
                    publisher.publish(topic, fields)
                with pytest.raises(error):  # in a batch: those before it are published
                    publisher.publish_many([(TOPIC, {"n": 1}, "update"),
                                            (topic, fields, "update")])
            # large but deliverable: ten of 300 kB go, in transfers the component takes
            publisher.publish_many([(TOPIC, {"n": 2, "blob": "b" * 300_000}, "update")] * 10)
            assert publisher.flush(60)
            assert publisher.rejected == 0
        total = 1 + len(POISON) + 10
        assert wait_for(lambda: len(s.got) >= total, 30)
        assert s.numbers("feed.j") == list(range(1, total + 1))
        assert journal.high_water("feed.j") == total
        assert [p.fields["n"] for p in journal.read_range("feed.j", 1, total)] == (
            [0] + [1] * len(POISON) + [2] * 10)


def test_the_journal_publisher_refuses_poison_and_consumes_no_number(tmp_path: Path) -> None:
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        journal = Journal.from_url(server.url)
        with JournalPublisher("feed.jp", journal) as publisher:
            for topic, fields, error in POISON:
                with pytest.raises(error):
                    publisher.publish(topic, fields)
            assert publisher.publish(TOPIC, {"n": 1}).source_seq == 1
        assert journal.high_water("feed.jp") == 1


class PlainPublisher:
    """A plain AMQP 1.0 publisher: publications without numbers, the component numbers them."""

    def __init__(self, url: str) -> None:
        self.conn = BlockingConnection(url, timeout=20)
        self.sender = self.conn.create_sender(TOPIC)
        self.source = self.conn.container.container_id

    def send(self, body: dict[str, Any]) -> str:
        delivery = self.sender.send(Message(body=body), error_states=[])
        if delivery.remote_state == Delivery.ACCEPTED:
            return "accepted"
        return str(delivery.remote.condition.name)


def test_the_component_refuses_a_plain_publishers_poison_before_journaling(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as s:
        plain = PlainPublisher(s.comp.url)
        try:
            outcomes = [
                plain.send({"x": ulong(2**64 - 1)}),  # an AMQP ulong past an AMQP long
                plain.send({"blob": "b" * 600_000}),  # within max-message-size, past a
                plain.send({"n": 1}),                 # publication's limit
            ]
        finally:
            plain.conn.close()
        assert outcomes == ["amqp:decode-error", "amqp:link:message-size-exceeded", "accepted"]
        assert wait_for(lambda: len(s.got) >= 1, 20)
        time.sleep(0.5)  # anything else would arrive now
        assert [(p.source_seq, dict(p.fields)) for p in s.got] == [(1, {"n": 1})]
        assert Journal.from_url(s.server.url).high_water(plain.source) == 1


def test_a_replay_across_an_old_poison_entry_reports_it_and_delivers_the_rest(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as s:
        journal = Journal.from_url(s.server.url)
        with Publisher(s.comp.url, "feed.p", journal=journal) as publisher:
            publisher.publish(TOPIC, {"n": 1})
            assert publisher.flush(20)
        assert wait_for(lambda: len(s.got) == 1, 20)
        s.comp.kill()
        # written by an older seqrepair that did not refuse them: 2 and 4 can never be sent
        journal.append([
            Publication(TOPIC, "feed.p", 2, fields={"x": 2**70}),
            Publication(TOPIC, "feed.p", 3, fields={"n": 3}),
            Publication("/w/" + "t" * 5000, "feed.p", 4, fields={"n": 4}),
            Publication(TOPIC, "feed.p", 5, fields={"n": 5}),
        ], 32)
        s.comp.start()  # the link context is gone: the subscriber replays by source
        assert wait_for(lambda: len(s.got) >= 3, 30), s.got
        with Publisher(s.comp.url, "feed.p", journal=journal) as publisher:
            publisher.publish(TOPIC, {"n": 6})
            assert publisher.flush(20)
        assert wait_for(lambda: len(s.got) >= 4, 30)
        assert s.subscriber.error is None
        assert s.numbers("feed.p") == [1, 3, 5, 6]
        lost = [e for e in s.events if isinstance(e, Unrecoverable)]
        assert [(e.source, e.after) for e in lost] == [("feed.p", 1), ("feed.p", 3)]
        # the item of the entry the journal holds; not that of one whose topic cannot be sent
        assert [e.items for e in lost] == [(TOPIC,), None]
        assert wait_for(lambda: s.comp.log_text().count("gapfill.undeliverable_entry") >= 2, 10)
