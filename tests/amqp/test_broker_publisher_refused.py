"""A brokered publisher whose sender the broker refuses or ends.

RabbitMQ (``rabbitmq_amqp1_0``) does not detach a sender it refuses: it ends the link's session,
with ``amqp:not-found`` when the exchange does not exist (at the attach) and with
``amqp:unauthorized-access`` when the user may not write to it (at the first transfer, and at
the next one after the permission is revoked). Another broker may detach the link, with a
condition or without one, or close the connection. As the direct publisher does
(``test_publisher_refused``): a condition in :data:`~seqrepair.amqp.client.runner.FATAL_CONDITIONS`
stops the :class:`~seqrepair.amqp.client.brokered.BrokerPublisher`, whose ``error`` names it, and
``flush`` returns False at once rather than wait out its timeout; the journal keeps what was
published and a brokered subscriber repairs it from there. Any other refusal, detach, end or
close is a lost connection: the publisher reconnects with its backoff and sends what was
unsettled again, in order, so a subscriber gets every publication once, in order.

Real parts only: RabbitMQ for what it does (the session-wide ``rabbitmq`` fixture; its guest
user's write permission is narrowed for an exchange no other test uses, then given back), and
for what RabbitMQ never does (a curable detach, a detach or session end without a condition) the
component in a thread of the test as the broker: it accepts one publication per message, as a
broker does, and refuses, detaches, ends and closes as the test asks. Real redis-servers hold
the publisher's journal and the stand-in's. Every wait is a generous deadline.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog

from seqrepair.amqp.client.brokered import BrokerError, BrokerPublisher, BrokerSubscriber
from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.journal.journal import Journal
from seqrepair.journal.server import EmbeddedRedis

from .conftest import RABBITMQ_BIN, RabbitBroker, wait_for
from .test_link_contexts import publish_rows
from .test_publisher_refused import NON_FATAL, PROMPTLY, PublishingComponent
from .test_reconnect_backoff import CAP, FIRST, assert_backed_off

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

SOURCE = "feed.brokered-refused"


@pytest.fixture
def journal(private_server: EmbeddedRedis) -> Iterator[Journal]:
    """The publisher's journal: a redis-server of its own, not the stand-in broker's."""
    j = Journal.from_url(private_server.url)
    yield j
    j.close()


def high_water(journal: Journal) -> int:
    return journal.high_waters([SOURCE])[SOURCE][0]


def broker_publisher(url: str, journal: Journal, address: str) -> BrokerPublisher:
    return BrokerPublisher(url, SOURCE, journal, address=address, batch_size=16,
                           reconnect_delay=FIRST, max_reconnect_delay=CAP)


def assert_stopped_at_once(pub: BrokerPublisher, condition: str,
                           logs: list[Any]) -> None:
    """``flush`` returns False well before its timeout; the publisher stopped for good, saying
    why, and never tried again."""
    began = time.monotonic()
    assert pub.flush(60) is False
    assert time.monotonic() - began < PROMPTLY
    assert isinstance(pub.error, BrokerError)
    assert str(pub.error).startswith(f"{condition}: "), pub.error
    assert pub.error.got == pub.address
    assert pub._thread is not None
    pub._thread.join(20)
    assert not pub._thread.is_alive()
    assert not [e for e in logs if e["event"] == "reconnecting"], logs


# --- RabbitMQ: refusals it makes ---------------------------------------------------------------


@pytest.fixture
def deny_write(rabbitmq: RabbitBroker) -> Iterator[Callable[[str], None]]:
    """``deny_write(exchange)``: the guest user (whom anonymous clients log in as) may no
    longer publish to that exchange; everything is writable again after the test."""

    def set_write(pattern: str) -> None:
        subprocess.run([str(RABBITMQ_BIN / "rabbitmqctl"), "set_permissions", "-p", "/", "guest",
                        ".*", pattern, ".*"], env=rabbitmq.env, check=True,
                       capture_output=True, timeout=60)

    yield lambda exchange: set_write(f"^(?!{exchange.replace('.', '[.]')}$).*")
    set_write(".*")


def test_a_broker_publisher_to_an_exchange_that_does_not_exist_stops_and_flush_returns_false(
    rabbitmq: RabbitBroker, journal: Journal
) -> None:
    pub = broker_publisher(rabbitmq.url, journal, f"/exchange/seqrepair-none-{uuid.uuid4().hex}")
    with structlog.testing.capture_logs() as logs:
        pub.start()
        try:
            pub.publish_many(publish_rows(0, 20))
            assert_stopped_at_once(pub, "amqp:not-found", logs)
            assert pub.accepted == 0
            assert high_water(journal) == 20  # published: the journal holds it
        finally:
            pub.close(0.0)


def test_a_broker_publisher_that_may_not_write_to_the_exchange_stops_at_its_first_transfer(
    rabbitmq: RabbitBroker, journal: Journal, deny_write: Callable[[str], None]
) -> None:
    deny_write("amq.headers")
    pub = broker_publisher(rabbitmq.url, journal, "/exchange/amq.headers")
    with structlog.testing.capture_logs() as logs:
        pub.start()
        try:
            pub.publish_many(publish_rows(0, 20))
            assert_stopped_at_once(pub, "amqp:unauthorized-access", logs)
            assert pub.accepted == 0
            assert high_water(journal) == 20
        finally:
            pub.close(0.0)


def test_a_write_permission_revoked_mid_stream_stops_the_publisher_and_the_journal_repairs(
    rabbitmq: RabbitBroker, journal: Journal, deny_write: Callable[[str], None]
) -> None:
    got: list[int] = []
    sub = BrokerSubscriber(rabbitmq.url, "/exchange/amq.fanout", journal, probe_interval=0.3,
                           on_publication=lambda p: got.append(p.source_seq)).start()
    try:
        assert sub.connected.wait(20)
        pub = broker_publisher(rabbitmq.url, journal, "/exchange/amq.fanout")
        with structlog.testing.capture_logs() as logs:
            pub.start()
            try:
                pub.publish_many(publish_rows(0, 100))
                assert pub.flush(30)
                deny_write("amq.fanout")
                # an open session checks the permission again once it was idle (RabbitMQ's
                # channel forgets the permissions it checked when it hibernates)
                published = 100
                deadline = time.monotonic() + 40
                while pub.error is None and time.monotonic() < deadline:
                    time.sleep(1.5)
                    pub.publish_many(publish_rows(published, 10))
                    published += 10
                    pub.flush(5)  # accepted, or refused
                assert_stopped_at_once(pub, "amqp:unauthorized-access", logs)
                assert 100 <= pub.accepted < published
            finally:
                pub.close(0.0)
        assert high_water(journal) == published
        done = wait_for(lambda: len(got) >= published, 30)
        time.sleep(0.3)  # a duplicate would arrive now
        assert done, sub.stats().as_dict()
    finally:
        sub.stop()
    assert got == list(range(1, published + 1))  # what the broker did not take, from the journal
    assert sub.stats().replayed >= published - pub.accepted
    assert sub.error is None


# --- a broker that detaches, ends or closes: the component in a thread as the broker ----------


@pytest.fixture
def standin(redis_url: str) -> Iterator[PublishingComponent]:
    broker = PublishingComponent(redis_url).start()
    yield broker
    broker.shut()


@contextlib.contextmanager
def watched(
    broker: PublishingComponent, journal: Journal
) -> Iterator[tuple[BrokerPublisher, list[int]]]:
    """A brokered publisher sending to the stand-in, and a subscriber of the stand-in collecting
    the source numbers it is given (the stand-in's own journal cannot repair what the publisher
    failed to send: a loss stays a loss)."""
    got: list[int] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(broker.here_url, "/weather/#", link_name="watcher", heartbeat_interval=0.2,
                       on_publication=lambda p: got.append(p.source_seq))
        )
        assert sub.connected.wait(20)
        pub = broker_publisher(broker.here_url, journal, "/weather/#")
        running.callback(pub.close, 0.0)
        pub.start()
        yield pub, got
    assert sub.error is None


ENDS = ["link", "session", "connection"]


@pytest.mark.parametrize(
    ("endpoint", "condition"),
    [*(("link", c) for c in NON_FATAL),
     *((e, c) for e in ("session", "connection") for c in ("amqp:resource-limit-exceeded", None))],
)
def test_a_broker_that_ends_the_sender_for_a_curable_reason_gets_everything_once_in_order(
    standin: PublishingComponent, journal: Journal, endpoint: str, condition: str | None
) -> None:
    with structlog.testing.capture_logs() as logs, watched(standin, journal) as (pub, got):
        pub.publish_many(publish_rows(0, 200))
        assert pub.flush(30)
        pub.publish_many(publish_rows(200, 400))  # some of these are unsettled when it ends
        standin.end_publishing(endpoint, condition)
        pub.publish_many(publish_rows(600, 200))
        assert pub.flush(30), (pub.error, len(pub._pending), len(pub._unsettled))
        done = wait_for(lambda: len(got) >= 800, 30)
        time.sleep(0.5)  # a duplicate would arrive now
        assert done, len(got)
        assert got == list(range(1, 801))
        assert pub.error is None
        assert pub.accepted >= 800
        assert len(standin.publishing) == 2  # attached again, once
    reconnecting = [e for e in logs if e["event"] == "reconnecting" and e["source"] == SOURCE]
    assert len(reconnecting) == 1, reconnecting


@pytest.mark.parametrize("endpoint", ENDS)
def test_a_broker_that_ends_the_sender_with_a_fatal_condition_stops_the_publisher(
    standin: PublishingComponent, journal: Journal, endpoint: str
) -> None:
    with structlog.testing.capture_logs() as logs, watched(standin, journal) as (pub, got):
        pub.publish_many(publish_rows(0, 100))
        assert pub.flush(30)
        assert wait_for(lambda: len(got) >= 100, 30)
        standin.end_publishing(endpoint, "amqp:unauthorized-access")
        assert wait_for(lambda: pub.error is not None, 20)
        pub.publish_many(publish_rows(100, 100))
        assert_stopped_at_once(pub, "amqp:unauthorized-access", logs)
        assert high_water(journal) == 200  # the journal holds what it could not send
        assert len(standin.publishing) == 1  # it did not come back
        assert got == list(range(1, 101))


def test_a_broker_publisher_refused_for_a_curable_reason_backs_off_until_accepted(
    standin: PublishingComponent, journal: Journal
) -> None:
    def refuse_three() -> None:
        standin.refuse = 3

    standin.call(refuse_three)
    with structlog.testing.capture_logs() as logs, watched(standin, journal) as (pub, got):
        pub.publish_many(publish_rows(0, 300))
        assert pub.flush(30), (pub.error, len(pub._pending), len(pub._unsettled))
        assert wait_for(lambda: len(got) >= 300, 30)
        assert got == list(range(1, 301))
        assert pub.error is None
    assert standin.refused == 3
    reconnecting = [dict(e) for e in logs if e["event"] == "reconnecting"
                    and e.get("source") == SOURCE]
    assert len(reconnecting) == 3, reconnecting
    assert_backed_off(reconnecting)
    assert {e["reason"] for e in reconnecting} == {"sender link detached"}
