"""A brokered subscriber whose receiver the broker refuses or ends.

RabbitMQ (``rabbitmq_amqp1_0``) does not detach a receiver it refuses: it ends the link's
session, with ``amqp:not-found`` when the exchange or queue does not exist and with
``amqp:unauthorized-access`` when the user may not read it. Another broker may detach the link,
with a condition or without one, or close the connection. As the brokered publisher does
(``test_broker_publisher_refused``): a condition in
:data:`~seqrepair.amqp.client.runner.FATAL_CONDITIONS` stops the
:class:`~seqrepair.amqp.client.brokered.BrokerSubscriber`, whose ``error`` names it and the address,
and its iterator and :meth:`run` return at once rather than hang. Any other refusal, detach, end
or close is a lost connection: it reconnects with its backoff and the journal repairs what it
missed, so the application gets every publication once, in order.

Real parts only: RabbitMQ for what it does (the session-wide ``rabbitmq`` fixture; its guest
user's read permission is narrowed for a queue no other test uses, then given back), and for
what RabbitMQ never does (a curable detach, an end or close without a condition) the component in
a thread of the test as the broker. A real redis-server holds the journal. Every wait is a
generous deadline.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog

from seqrepair.amqp.client.brokered import BrokerError, BrokerSubscriber
from seqrepair.amqp.client.subscriber import Publisher
from seqrepair.journal.journal import Journal

from .conftest import RABBITMQ_BIN, RabbitBroker, wait_for
from .test_link_contexts import Feed
from .test_publisher_refused import PROMPTLY
from .test_reconnect_backoff import CAP, FIRST
from .test_subscriber_refused import EndingComponent, _seqrepair

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

FATAL = "amqp:unauthorized-access"


def broker_subscriber(url: str, journal: Journal, address: str,
                      **settings: Any) -> BrokerSubscriber:
    return BrokerSubscriber(url, address, journal, probe_interval=0.3, reconnect_delay=FIRST,
                            max_reconnect_delay=CAP, **settings)


@contextlib.contextmanager
def iterated(sub: BrokerSubscriber) -> Iterator[tuple[list[int], threading.Thread]]:
    """The subscriber started, and a thread that reads it (``for pub in sub``) into a list."""
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.extend(p.source_seq for p in sub), daemon=True)
    sub.start()
    reader.start()
    try:
        yield got, reader
    finally:
        sub.stop()
        reader.join(PROMPTLY)


def assert_stopped_at_once(sub: BrokerSubscriber, reader: threading.Thread, condition: str,
                           logs: list[Any]) -> None:
    """The iteration ended (nothing waits for ever), the subscriber stopped for good saying why,
    in the publishers' format, and never tried again."""
    reader.join(PROMPTLY)
    assert not reader.is_alive()
    assert isinstance(sub.error, BrokerError)
    assert str(sub.error).startswith(f"{condition}: "), sub.error
    assert sub.error.got == sub.address
    assert sub._thread is not None
    sub._thread.join(PROMPTLY)
    assert not sub._thread.is_alive()
    assert not [e for e in logs if e["event"] == "reconnecting"], logs
    with pytest.raises(BrokerError) as refused:  # at once: nothing waits out its timeout
        sub.wait_connected(timeout=3600)
    assert refused.value is sub.error


# --- RabbitMQ: refusals it makes ---------------------------------------------------------------


@pytest.fixture
def deny_read(rabbitmq: RabbitBroker) -> Iterator[Callable[[str], None]]:
    """``deny_read(queue)``: the guest user (whom anonymous clients log in as) may no longer
    read that queue; everything is readable again after the test."""

    def set_read(pattern: str) -> None:
        subprocess.run([str(RABBITMQ_BIN / "rabbitmqctl"), "set_permissions", "-p", "/", "guest",
                        ".*", ".*", pattern], env=rabbitmq.env, check=True,
                       capture_output=True, timeout=60)

    yield lambda queue: set_read(f"^(?!{queue.replace('.', '[.]')}$).*")
    set_read(".*")


@pytest.mark.parametrize("address", ["/exchange/seqrepair-none-{}/weather.#",
                                     "/amq/queue/seqrepair-none-{}"])
def test_a_broker_subscriber_to_what_does_not_exist_stops_and_its_iterator_ends(
    rabbitmq: RabbitBroker, journal: Journal, address: str
) -> None:
    sub = broker_subscriber(rabbitmq.url, journal, address.format(uuid.uuid4().hex))
    with structlog.testing.capture_logs() as logs, iterated(sub) as (got, reader):
        assert_stopped_at_once(sub, reader, "amqp:not-found", logs)
        assert got == []
        assert sub.stats().connections == 0


def test_a_broker_subscriber_that_may_not_read_the_queue_stops_and_its_iterator_ends(
    rabbitmq: RabbitBroker, journal: Journal, deny_read: Callable[[str], None]
) -> None:
    queue = f"seqrepair-denied-{uuid.uuid4().hex[:12]}"
    deny_read(queue)
    sub = broker_subscriber(rabbitmq.url, journal, f"/queue/{queue}")
    with structlog.testing.capture_logs() as logs, iterated(sub) as (_got, reader):
        assert_stopped_at_once(sub, reader, "amqp:unauthorized-access", logs)


def test_run_of_a_refused_broker_subscriber_returns(
    rabbitmq: RabbitBroker, journal: Journal
) -> None:
    sub = broker_subscriber(rabbitmq.url, journal,
                            f"/exchange/seqrepair-none-{uuid.uuid4().hex}/weather.#")
    runner = threading.Thread(target=sub.run, daemon=True)
    runner.start()
    try:
        runner.join(PROMPTLY)
        assert not runner.is_alive()
        assert isinstance(sub.error, BrokerError)
        assert str(sub.error).startswith("amqp:not-found: "), sub.error
    finally:
        sub.stop()


def test_seqrepair_subscribe_and_publish_with_a_broker_name_the_refusal_and_exit_1(
    rabbitmq: RabbitBroker, redis_url: str
) -> None:
    exchange = f"/exchange/seqrepair-none-{uuid.uuid4().hex}"
    sub = _seqrepair("subscribe", "--broker", rabbitmq.url, "--redis-url", redis_url,
                     "--address", f"{exchange}/weather.#", "--duration", "60")
    assert sub.returncode == 1, sub.stderr
    assert "seqrepair subscribe: amqp:not-found: " in sub.stderr, sub.stderr
    pub = _seqrepair("publish", "--broker", rabbitmq.url, "--redis-url", redis_url,
                     "--source", "feed.cli", "--address", exchange, "--count", "5")
    assert pub.returncode == 1, pub.stderr
    assert "seqrepair publish: amqp:not-found: " in pub.stderr, pub.stderr


# --- a broker that detaches, ends or closes: the component in a thread as the broker ----------


@pytest.fixture
def standin(redis_url: str) -> Iterator[EndingComponent]:
    broker = EndingComponent(redis_url).start()
    yield broker
    broker.shut()


@contextlib.contextmanager
def fed(broker: EndingComponent, journal: Journal) -> Iterator[Feed]:
    """A journaling publisher to the stand-in (its journal is the subscriber's)."""
    with Publisher(broker.here_url, "feed.bsub", journal=journal) as publisher:
        yield Feed(publisher)


def _publish(feed: Feed, n: int) -> None:
    feed.publish(n)
    assert feed.publisher.flush(30)


@pytest.mark.parametrize(
    ("endpoint", "condition"),
    [(e, c) for e in ("link", "session", "connection")
     for c in ("amqp:resource-limit-exceeded", "amqp:link:detach-forced", None)],
)
def test_a_broker_that_ends_the_receiver_for_a_curable_reason_delivers_everything_once_in_order(
    standin: EndingComponent, journal: Journal, endpoint: str, condition: str | None
) -> None:
    sub = broker_subscriber(standin.here_url, journal, "/weather/#", link_name="bsub")
    with structlog.testing.capture_logs() as logs, iterated(sub) as (got, _reader), \
            fed(standin, journal) as feed:
        assert sub.connected.wait(20)
        _publish(feed, 200)
        assert wait_for(lambda: len(got) >= 200, 30)
        _publish(feed, 200)
        standin.end("bsub", endpoint, condition)  # some of these are still on their way
        _publish(feed, 200)  # partly while it is away: the journal repairs it
        done = wait_for(lambda: len(got) >= 600 and sub.stats().connections == 2, 30)
        assert done, (sub.stats().as_dict(), len(got))
        time.sleep(0.5)  # a duplicate would arrive now
        assert got == list(range(1, 601))
        assert sub.error is None
        assert sub.stats().disconnections == 1
    reconnecting = [e for e in logs if e["event"] == "reconnecting"]
    assert len(reconnecting) == 1, reconnecting


@pytest.mark.parametrize("endpoint", ["link", "session", "connection"])
def test_a_broker_that_ends_the_receiver_with_a_fatal_condition_stops_the_subscriber(
    standin: EndingComponent, journal: Journal, endpoint: str
) -> None:
    sub = broker_subscriber(standin.here_url, journal, "/weather/#", link_name="bsub")
    with structlog.testing.capture_logs() as logs, iterated(sub) as (got, reader), \
            fed(standin, journal) as feed:
        assert sub.connected.wait(20)
        _publish(feed, 100)
        assert wait_for(lambda: len(got) >= 100, 30)
        standin.end("bsub", endpoint, FATAL)
        assert_stopped_at_once(sub, reader, FATAL, logs)
        _publish(feed, 100)
        assert got == list(range(1, 101))
        assert sub.stats().connections == 1
