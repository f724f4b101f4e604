"""A numbering publisher without a journal of its own keeps publishing through a Redis outage.

Real parts only: a real redis-server is stopped while a :class:`Publisher` with ``journal=None``
(it numbers its publications itself) publishes steadily to a real component (``seqrepair
serve``), then started again on the same port and data. The component releases what it cannot
journal, and what the publisher sent after it; the publisher sends it again after a backoff, in
order. Nothing is rejected (no ``amqp:precondition-failed``: the source is not wedged), and a
subscriber gets every publication exactly once, in order. No timed assertions: every wait is a
generous deadline.

A plain publisher's publication whose answer from Redis is lost (the append was carried out;
:class:`LossyRelay` drops the reply and cuts the connection) is rejected, and its source then
publishes nothing more: the component fans it out all the same once it can read the journal
again, asking with a capped backoff while Redis stays down.

An append whose answer was lost can also land late, after the component read the high-water
again: the component's next number for that source is then taken. The message so numbered is
released, not acknowledged as journaled; sent again, it is numbered after what landed, which
subscribers get first.

Retention may trim what such an append journaled before the component could read it back:
those numbers never go out (a warning names them), the rest does, in order, and the source's
next publication is accepted as usual.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path

import attrs
import pytest
from proton import Delivery, Message

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.technical import DEFAULT_SOURCE_BITS
from seqrepair.core.messages import Publication
from seqrepair.core.stubstats import StubStats
from seqrepair.journal.journal import Journal
from seqrepair.journal.positions import link_durable, position_key
from seqrepair.journal.server import EmbeddedRedis

from .conftest import ComponentProcess, wait_for
from .test_numbering_redis import TOPIC, watched_plain_publisher

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SOURCE = "feed.outage"
TOTAL = 1_200

@attrs.frozen
class Steady:
    """What a steady numbering publisher without a journal and a subscriber saw of a run
    through a journal outage (:func:`publish_through`)."""

    publisher: Publisher
    got: list[Publication]
    report: StubStats
    flushed: bool
    done: bool
    held: list[Publication]  # what the journal holds of the source afterwards
    log: str  # the component's


def publish_through(
    server: EmbeddedRedis, comp: ComponentProcess, outage: Callable[[], ContextManager[object]],
    *, source: str, prefix: str, total: int, pace: float, lasting: float,
) -> Steady:
    """Publish ``total`` publications of ``source`` under ``prefix`` one every ``pace`` seconds
    through ``comp`` (a :class:`Publisher` with ``journal=None`` and small batches, so many
    deliveries are in flight when the journal goes); a sixth of the way in, hold ``outage``
    open until the publisher has had a release and ``lasting`` seconds more; then wait
    (generous deadlines) for everything to be flushed and delivered to a subscriber."""
    got: list[Publication] = []
    published = threading.Event()
    try:
        with contextlib.ExitStack() as running:
            sub = running.enter_context(
                Subscriber(comp.url, f"{prefix}/#", on_publication=got.append,
                           heartbeat_interval=0.2, link_name=f"{source}-watcher")
            )
            assert sub.connected.wait(20)
            time.sleep(0.3)
            publisher = running.enter_context(
                Publisher(comp.url, source, address=f"{prefix}/#", journal=None, max_batch=8)
            )

            def feed() -> None:  # steadily, before, during and after the outage
                for n in range(1, total + 1):
                    publisher.publish(f"{prefix}/x", {"n": n})
                    time.sleep(pace)
                published.set()

            threading.Thread(target=feed, name="feed", daemon=True).start()
            assert wait_for(lambda: publisher.accepted >= total // 6, 30), publisher.accepted
            with outage():
                assert wait_for(lambda: publisher.released > 0, 30)  # the outage was felt
                time.sleep(lasting)  # publishing goes on meanwhile
            assert published.wait(60)
            flushed = publisher.flush(60)
            done = wait_for(lambda: len(got) >= total, 60)
            time.sleep(0.5)  # anything extra (a duplicate) would arrive now
            report = sub.stats()
        with Journal.from_url(server.url) as journal:
            held = journal.read_range(source, 1, total + 10)
    finally:
        comp.stop()
    return Steady(publisher, got, report, flushed, done, held, comp.log_text())


def assert_once_in_order(run: Steady, source: str, total: int) -> None:
    """Every publication journaled and delivered exactly once, in order; nothing rejected."""
    publisher, log = run.publisher, run.log
    assert run.flushed, (publisher.accepted, publisher.rejected, publisher.released, log[-3000:])
    assert run.done, (len(run.got), run.report, log[-3000:])
    assert publisher.rejected == 0, log[-3000:]
    assert publisher.accepted == total
    assert "precondition-failed" not in log
    assert "message released" in log  # the component did release
    numbers = list(range(1, total + 1))
    assert [(p.source_seq, p.fields["n"]) for p in run.held] == [(n, n) for n in numbers]
    assert [(p.source, p.source_seq, p.fields["n"]) for p in run.got] == [
        (source, n, n) for n in numbers
    ]
    assert run.report.unrecoverable == 0


@contextlib.contextmanager
def stopped(server: EmbeddedRedis) -> Iterator[None]:
    """``server`` stopped inside the block, started again (same port, same data) after it."""
    server.stop()
    try:
        yield
    finally:
        server.start()


def test_a_numbering_publisher_without_a_journal_publishes_through_a_redis_outage(
    private_server: EmbeddedRedis, tmp_path: Path
) -> None:
    comp = ComponentProcess(private_server.url, tmp_path, "--heartbeat", "0.2").start()
    run = publish_through(private_server, comp, lambda: stopped(private_server),
                          source=SOURCE, prefix="/own", total=TOTAL, pace=0.002, lasting=1.0)
    assert_once_in_order(run, SOURCE, TOTAL)


class LossyRelay:
    """A TCP relay between the component and redis-server that can lose Redis's answers.

    After :meth:`lose_next_answer` the next answer Redis sends back is dropped and its
    connection cut: the request was carried out, its answer lost on the way. From then on
    every connection is cut (Redis unreachable) until :meth:`heal`.
    """

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.answers_lost = 0
        self._lose = threading.Event()
        self._cut = threading.Event()
        self._lock = threading.Lock()
        self._awaiting: dict[int, bool] = {}  # per connection: a request awaits its answer
        threading.Thread(target=self._accept, name="relay", daemon=True).start()

    def quiet(self) -> bool:
        """No request carried to Redis awaits its answer (the last thing each connection
        carried was an answer)."""
        with self._lock:
            return not any(self._awaiting.values())

    def lose_next_answer(self) -> None:
        self._lose.set()

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._cut.set()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                if self._cut.is_set():
                    raise OSError("cut")
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=2)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for src, dst, answers in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, answers, id(client)),
                                 daemon=True, name="relay-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool, conn: int) -> None:
        try:
            while data := src.recv(65536):
                if not answers:  # a request awaits its answer from before it is carried
                    with self._lock:
                        self._awaiting[conn] = True
                if answers and self._lose.is_set():
                    with self._lock:
                        self._lose.clear()
                        self._cut.set()
                        self.answers_lost += 1
                if self._cut.is_set():
                    break
                dst.sendall(data)
                if answers:  # carried (past the loss decision): nothing awaits
                    with self._lock:
                        self._awaiting[conn] = False
        except OSError:
            pass
        finally:
            with self._lock:
                self._awaiting.pop(conn, None)
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


RETRY_EVENT = "journaled publications not fanned out yet: the journal cannot be read"


def wait_topic_stored(server: EmbeddedRedis, relay: LossyRelay, link: str, source: str
                      ) -> None:
    """Wait until the component's own Redis writes in the background after the first
    publication are done: the new topic :data:`TOPIC` stored (``GET /topics``) and ``link``'s
    position through it (its ACK), and their answers came back through the relay (no request
    awaits one), so the answer the relay loses next is the journal's. (A position write
    still to come took the loss under load: the append was then never carried.)"""
    with Journal.from_url(server.url) as journal:
        assert wait_for(lambda: journal.client.sismember("seqrepair:topics", TOPIC), 20)
        key = position_key(link_durable(link))
        assert wait_for(lambda: journal.client.hget(key, source) == b"1", 20), (
            journal.client.hgetall(key))
    assert wait_for(relay.quiet, 20)


def test_a_plain_publication_whose_answer_redis_lost_reaches_subscribers_without_a_next_publish(
    private_server: EmbeddedRedis, tmp_path: Path
) -> None:
    assert private_server.port is not None
    relay = LossyRelay(private_server.port)
    comp = ComponentProcess(relay.url, tmp_path, "--heartbeat", "0.2").start()
    try:
        with watched_plain_publisher(comp.url, "lost-answer-watcher") as (sub, got, publisher):
            first = publisher.send(1)
            assert wait_for(lambda: len(got) >= 1, 20)
            wait_topic_stored(private_server, relay, "lost-answer-watcher", publisher.source)
            relay.lose_next_answer()
            second = publisher.send(2)  # journaled; Redis's answer is lost on its way back
            with Journal.from_url(private_server.url) as journal:
                held_then = journal.high_water(publisher.source)
            private_server.stop()  # and Redis is gone for a while; the source stays silent
            relay.heal()
            time.sleep(3.0)
            during = list(got)
            alive = comp.proc is not None and comp.proc.poll() is None
            private_server.start()  # same port, same data
            arrived = wait_for(lambda: len(got) >= 2, 30)
            time.sleep(0.5)  # anything extra (a duplicate) would arrive now
            report = sub.stats()
    finally:
        comp.stop()
        relay.close()
    log = comp.log_text()
    tries = log.count(RETRY_EVENT)
    assert (first, second) == ("accepted", "amqp:internal-error"), log[-3000:]
    assert relay.answers_lost == 1
    assert held_then == 2, log[-3000:]  # the journal took it: it is published
    assert alive, log[-3000:]
    assert [(p.source_seq, p.fields["n"]) for p in during] == [(1, 1)]
    assert arrived, (len(got), report, log[-3000:])
    assert [(p.source, p.source_seq, p.fields["n"]) for p in got] == [
        (publisher.source, 1, 1), (publisher.source, 2, 2)
    ]
    assert report.unrecoverable == 0
    # asked again with a growing delay while Redis was away (about 4 s), not on every tick
    assert 2 <= tries <= 15, (tries, log[-3000:])


def test_a_plain_message_numbered_before_a_late_write_landed_is_released_then_numbered_after_it(
    private_server: EmbeddedRedis, tmp_path: Path
) -> None:
    comp = ComponentProcess(private_server.url, tmp_path, "--heartbeat", "0.2").start()
    try:
        with watched_plain_publisher(comp.url, "late-write-watcher") as (sub, got, publisher):
            first = publisher.send(1)
            assert wait_for(lambda: len(got) >= 1, 20)
            # an earlier append of the source whose answer was lost lands now, behind the
            # back of a component that numbers the source from the high-water it read
            with Journal.from_url(private_server.url) as journal:
                journal.append([Publication(TOPIC, publisher.source, 2, fields={"n": 99})],
                               DEFAULT_SOURCE_BITS)
            stale = publisher.send(2)  # numbered 2 by the component: the journal holds a 2
            arrived = wait_for(lambda: len(got) >= 2, 20)  # on the component's timer
            again = publisher.send(2)  # the publisher sends it again
            wait_for(lambda: len(got) >= 3, 20)
            time.sleep(0.5)  # anything extra (a duplicate) would arrive now
            report = sub.stats()
        with Journal.from_url(private_server.url) as journal:
            held = journal.read_range(publisher.source, 1, 100)
    finally:
        comp.stop()
    log = comp.log_text()[-3000:]
    assert (first, stale, again) == ("accepted", str(Delivery.RELEASED), "accepted"), log
    assert arrived, (len(got), report, log)
    assert [(p.source_seq, p.fields["n"]) for p in held] == [(1, 1), (2, 99), (3, 2)]
    assert [(p.source, p.source_seq, p.fields["n"]) for p in got] == [
        (publisher.source, seq, n) for seq, n in ((1, 1), (2, 99), (3, 2))
    ]
    assert report.unrecoverable == 0


TRIMMED_UNSENT = "journaled publications trimmed before they were fanned out"


@pytest.mark.parametrize(
    ("through", "left"),
    [(3, [(4, 4)]), (4, [])],  # part of what the lost answer journaled, or all of it
)
def test_what_retention_trims_before_a_lost_answers_publications_went_out_is_passed_over(
    private_server: EmbeddedRedis, tmp_path: Path, through: int, left: list[tuple[int, int]]
) -> None:
    assert private_server.port is not None
    relay = LossyRelay(private_server.port)
    comp = ComponentProcess(relay.url, tmp_path, "--heartbeat", "0.2").start()
    try:
        with watched_plain_publisher(comp.url, "trimmed-watcher") as (sub, got, publisher):
            first = publisher.send(1)
            assert wait_for(lambda: len(got) >= 1, 20)
            wait_topic_stored(private_server, relay, "trimmed-watcher", publisher.source)
            relay.lose_next_answer()
            lost = publisher.sender.send(  # 2..4 journaled; Redis's answer lost on its way
                Message(body=[{"fields": {"n": n}} for n in (2, 3, 4)],
                        properties={"message-type": "PUBLICATIONS"}), error_states=[])
            with Journal.from_url(private_server.url) as journal:  # not through the relay
                held_then = journal.high_water(publisher.source)
                journal.trim_through(publisher.source, through, now=time.time())  # retention
            time.sleep(1.0)  # the component cannot reach Redis meanwhile
            relay.heal()
            arrived = wait_for(lambda: len(got) >= 1 + len(left), 30)
            time.sleep(0.5)  # anything trimmed or extra would arrive now
            recovered = list(got)
            later = publisher.send(5)  # the source is served again
            wait_for(lambda: len(got) >= 2 + len(left), 20)
            time.sleep(0.5)
            report = sub.stats()
        with Journal.from_url(private_server.url) as journal:
            held = journal.read_range(publisher.source, through + 1, 100)
    finally:
        comp.stop()
        relay.close()
    log = comp.log_text()
    warned = [line for line in log.splitlines() if TRIMMED_UNSENT in line]
    assert (first, lost.remote.condition.name, later) == (
        "accepted", "amqp:internal-error", "accepted"), log[-3000:]
    assert relay.answers_lost == 1
    assert held_then == 4  # the journal took 2..4: published, but trimmed before it went out
    assert arrived, (got, report, log[-3000:])
    assert [(p.source_seq, p.fields["n"]) for p in recovered] == [(1, 1), *left]
    assert [(p.source_seq, p.fields["n"]) for p in held] == [*left, (5, 5)]
    assert [(p.source, p.source_seq, p.fields["n"]) for p in got] == [
        (publisher.source, seq, n) for seq, n in [(1, 1), *left, (5, 5)]
    ]
    assert len(warned) == 1, log[-3000:]  # the numbers never fanned out, named once
    assert "first=2 " in warned[0], warned
    assert f"last={through} " in warned[0], warned
    assert report.unrecoverable == 0
