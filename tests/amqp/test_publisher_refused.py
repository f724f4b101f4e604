"""A publisher whose sender link the component refuses or detaches.

The component refuses a publishing link to an address it does not publish to (``$...``,
``/subscriptions/...``, a topic pattern that breaks the syntax) with ``amqp:not-found``, and may
detach a publishing link it had accepted, with a condition or without one. As the subscriber
does: a condition in :data:`~seqrepair.amqp.client.FATAL_CONDITIONS` stops the publisher, which
names it in ``error`` and :meth:`~seqrepair.amqp.client.Publisher.flush` returns False at once
rather than wait out its timeout; any other refusal or detach is a lost connection: the
publisher reconnects with its backoff and sends what was unsettled again, in order, so a
subscriber gets every publication once, in order.

Real parts only: a real redis-server, the component (``seqrepair serve`` as a process, or in a
thread of the test so that the test can refuse and detach links as the component would), a
publisher and a subscriber over proton on loopback. Every wait is a generous deadline.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
from proton import Endpoint

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS

from .conftest import ComponentProcess, wait_for
from .inthread import HereComponent, end_endpoint
from .test_link_contexts import publish_rows
from .test_reconnect_backoff import assert_backed_off

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

NON_FATAL = ["amqp:link:detach-forced", "amqp:resource-limit-exceeded", "amqp:internal-error",
             None]  # None: a plain detach (proton's on_link_closing, not on_link_error)

PROMPTLY = 10.0
"""A flush that returns within this returned because of the error, not its 60 s timeout."""


class _Busy(AmqpAdapterError):
    condition = "amqp:resource-limit-exceeded"


class PublishingComponent(HereComponent):
    """Keeps the publishing links it accepted; refuses the first :attr:`refuse` attaches of
    publishing links with a condition a reconnect may cure."""

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url)
        self.publishing: list[Any] = []
        self.refuse = 0
        self.refused = 0

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        publishing = link.is_receiver and link.remote_target.address != CONTROL_ADDRESS
        if publishing and self.refused < self.refuse:
            self.refused += 1
            self._refuse_link(link, _Busy("busy, try later"))
            return
        super().on_link_opening(event)

    def on_link_opened(self, event: Any) -> None:
        super().on_link_opened(event)
        link = event.link
        if getattr(link, "kind", None) == "publish" and link.state & Endpoint.LOCAL_ACTIVE:
            self.publishing.append(link)

    def end_publishing(self, endpoint: str, condition: str | None) -> None:
        """Detach the (one) attached publishing ``"link"``, end its ``"session"`` or close its
        ``"connection"``, with ``condition`` (None: without one)."""

        def end() -> None:
            links = [link for link in self.publishing if link.state & Endpoint.LOCAL_ACTIVE]
            assert len(links) == 1
            end_endpoint(links[0], endpoint, condition)

        self.call(end)


@pytest.fixture
def publishing(redis_url: str) -> Iterator[PublishingComponent]:
    comp = PublishingComponent(redis_url).start()
    yield comp
    comp.shut()


@contextlib.contextmanager
def watched(url: str, **publisher: Any) -> Iterator[tuple[Publisher, list[int]]]:
    """A publisher (no journal: what it loses is lost) and a subscriber to ``/weather/#``
    collecting the source numbers it is given."""
    got: list[int] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(url, "/weather/#", link_name="watcher", heartbeat_interval=0.2,
                       on_publication=lambda p: got.append(p.source_seq))
        )
        assert sub.connected.wait(20)
        pub = Publisher(url, "feed.refused", reconnect_delay=0.02, max_reconnect_delay=0.16,
                        max_batch=16, **publisher)
        running.callback(pub.close, 0.0)
        pub.start()
        yield pub, got
    assert sub.error is None


def _publish(pub: Publisher, first: int, n: int) -> None:
    pub.publish_many(publish_rows(first, n))


def _assert_stopped_naming(pub: Publisher, condition: str) -> None:
    assert isinstance(pub.error, AmqpAdapterError)
    assert str(pub.error).startswith(f"{condition}: "), pub.error
    assert pub._thread is not None
    pub._thread.join(20)
    assert not pub._thread.is_alive()  # stopped for good, nothing left running


# --- fatal: stop, say why, do not make flush wait ----------------------------------------------


@pytest.mark.parametrize("address", ["$control", "/subscriptions/none-such", "weather"])
def test_a_publisher_refused_with_a_fatal_condition_stops_and_flush_returns_false_at_once(
    component: Callable[..., ComponentProcess], address: str
) -> None:
    comp = component("--heartbeat", "0.2")
    pub = Publisher(comp.url, "feed.refused", address=address, reconnect_delay=0.02,
                    max_reconnect_delay=0.16)
    pub.start()
    try:
        pub.publish("/weather/wind/LEMD", {"n": 1})
        began = time.monotonic()
        assert pub.flush(60) is False
        assert time.monotonic() - began < PROMPTLY
        _assert_stopped_naming(pub, "amqp:not-found")
        assert pub.accepted == 0
    finally:
        pub.close(0.0)


def test_a_publishing_link_detached_with_a_fatal_condition_stops_the_publisher(
    publishing: PublishingComponent,
) -> None:
    with watched(publishing.here_url) as (pub, got):
        _publish(pub, 0, 100)
        assert pub.flush(30)
        assert wait_for(lambda: len(got) >= 100, 30)
        publishing.end_publishing("link", "amqp:unauthorized-access")
        assert wait_for(lambda: pub.error is not None, 20)
        _publish(pub, 100, 100)
        began = time.monotonic()
        assert pub.flush(60) is False
        assert time.monotonic() - began < PROMPTLY
        _assert_stopped_naming(pub, "amqp:unauthorized-access")
        assert len(publishing.publishing) == 1  # it did not come back
        assert got == list(range(1, 101))


# --- non-fatal: a lost connection, recovered in order --------------------------------------------


@pytest.mark.parametrize("condition", NON_FATAL)
def test_a_publishing_link_detached_for_a_curable_reason_reconnects_and_loses_nothing(
    publishing: PublishingComponent, condition: str | None
) -> None:
    with watched(publishing.here_url) as (pub, got):
        _publish(pub, 0, 200)
        assert pub.flush(30)
        _publish(pub, 200, 400)  # some of these are unsettled when the link goes
        publishing.end_publishing("link", condition)
        _publish(pub, 600, 200)
        assert pub.flush(30), (pub.error, len(pub._pending), len(pub._unsettled))
        done = wait_for(lambda: len(got) >= 800, 30)
        time.sleep(0.5)  # a duplicate would arrive now
        assert done, len(got)
        assert got == list(range(1, 801))
        assert pub.error is None
        assert len(publishing.publishing) == 2  # attached again, once


def test_a_publisher_refused_for_a_curable_reason_backs_off_until_accepted(
    publishing: PublishingComponent,
) -> None:
    def refuse_three() -> None:
        publishing.refuse = 3

    publishing.call(refuse_three)
    with structlog.testing.capture_logs() as logs, watched(publishing.here_url) as (pub, got):
        _publish(pub, 0, 300)
        assert pub.flush(30), (pub.error, len(pub._pending), len(pub._unsettled))
        assert wait_for(lambda: len(got) >= 300, 30)
        assert got == list(range(1, 301))
        assert pub.error is None
    assert publishing.refused == 3
    reconnecting = [dict(e) for e in logs if e["event"] == "reconnecting"
                    and e.get("source") == "feed.refused"]
    assert len(reconnecting) == 3, reconnecting
    assert_backed_off(reconnecting)
    assert {e["reason"] for e in reconnecting} == {"sender link detached"}
