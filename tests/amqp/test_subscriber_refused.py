"""A subscriber whose link, session or connection the peer ends.

The component (or a gateway, or a broker) may end what a subscriber's links live in while the
transport stays sound: detach a link (``test_link_detach``), end the session both links live in, or
close the connection with a close frame, with a condition or without one. As the publishers do
(``test_publisher_refused``): a condition in :data:`~seqrepair.amqp.client.runner.FATAL_CONDITIONS`
stops the :class:`~seqrepair.amqp.client.Subscriber`, its ``error`` starts with the condition and
names the address, and whatever waits on it (its iterator, :meth:`run`) returns at once rather than
hang; anything else is a lost connection: it reconnects with its backoff, resumes its link context
(or, from a component that forgot it, starts again at 0 and repairs by source) and the application
gets every publication once, in order.

Real parts only: a real redis-server, the component in a thread of the test (so that the test can
end sessions and connections as the component would), ``seqrepair serve`` as a process for the
command-line test, a publisher and subscribers over proton on loopback. Every wait is a generous
deadline.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from proton import Endpoint

from seqrepair.amqp.client.subscriber import Subscriber
from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.core.events import LinkReset

from .conftest import ComponentProcess, _env, wait_for
from .inthread import HereComponent, end_endpoint
from .test_link_detach import _assert_exact_after_one_reconnect, _publish, subscribed
from .test_publisher_refused import PROMPTLY

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

CURABLE = ["amqp:resource-limit-exceeded", "amqp:internal-error", None]
"""Conditions a reconnect may cure (None: a plain end, proton's ``on_*_closing``)."""

FATAL = "amqp:unauthorized-access"


class EndingComponent(HereComponent):
    """The component, which can end a subscriber's data link, its session or its connection."""

    def end(self, name: str, endpoint: str, condition: str | None, *,
            forget: bool = False) -> None:
        """End what the data link ``name`` lives in (``link``, ``session``, ``connection``);
        the link's context is kept for resumption unless ``forget``."""

        def end() -> None:
            link = self.links[name]
            sender = link.sender
            assert sender is not None
            assert sender.state & Endpoint.LOCAL_ACTIVE
            link.detach(self.clock())
            if forget:
                del self.links[name]
                self.gapfill.detach(name)
            end_endpoint(sender, endpoint, condition)

        self.call(end)


@pytest.fixture
def ending(redis_url: str) -> Iterator[EndingComponent]:
    comp = EndingComponent(redis_url).start()
    yield comp
    comp.shut()


def assert_stopped_naming(sub: Subscriber, condition: str) -> None:
    """Stopped for good, saying why (the publishers' format), nothing left running."""
    assert isinstance(sub.error, AmqpAdapterError)
    assert str(sub.error).startswith(f"{condition}: "), sub.error
    assert sub.error.got == sub.address
    assert sub._thread is not None
    sub._thread.join(PROMPTLY)
    assert not sub._thread.is_alive()
    with pytest.raises(AmqpAdapterError) as refused:  # at once: nothing waits out its timeout
        sub.wait_connected(timeout=3600)
    assert refused.value is sub.error


# --- curable: a lost connection, resumed ---------------------------------------------------------


@pytest.mark.parametrize("condition", CURABLE)
@pytest.mark.parametrize("endpoint", ["session", "connection"])
def test_a_session_or_connection_ended_for_a_curable_reason_is_resumed_and_nothing_is_lost(
    ending: EndingComponent, redis_url: str, endpoint: str, condition: str | None
) -> None:
    with subscribed(ending.here_url, "ended", redis_url, ending.here_url) as (
        sub, feed, got, events
    ):
        _publish(feed, 200)
        assert wait_for(lambda: len(got) >= 200, 30)
        _publish(feed, 200)
        ending.end("ended", endpoint, condition)  # some of these are still on their way
        _publish(feed, 200)  # partly while it is away: kept by the context, or repaired
        done = wait_for(lambda: len(got) >= 600, 30)
        time.sleep(0.5)  # a duplicate would arrive now
        assert done, (sub.stats(), len(got))
    _assert_exact_after_one_reconnect(sub, got, events, 600)


@pytest.mark.parametrize("endpoint", ["session", "connection"])
def test_an_end_by_a_component_that_forgot_the_link_starts_again_at_0_and_repairs_by_source(
    ending: EndingComponent, redis_url: str, endpoint: str
) -> None:
    with subscribed(ending.here_url, "forgotten", redis_url, ending.here_url) as (
        sub, feed, got, events
    ):
        _publish(feed, 200)
        assert wait_for(lambda: len(got) >= 200, 30)
        ending.end("forgotten", endpoint, "amqp:resource-limit-exceeded", forget=True)
        _publish(feed, 300)  # while it is away, or after it is back on a new context
        done = wait_for(lambda: len(got) >= 500, 30)
        time.sleep(0.5)
        assert done, (sub.stats(), len(got))
    assert got == list(range(1, 501)), (sub.stats(), len(got))
    report = sub.stats()
    assert report.connections == 2, report
    assert report.disconnections == 1, report
    assert report.resets == 1, report  # a new context: the source repair covered the switch
    assert len([e for e in events if isinstance(e, LinkReset)]) == 1
    assert report.unrecoverable == 0, report
    assert sub.error is None


# --- fatal: stop, say why, let nothing wait -------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["link", "session", "connection"])
def test_an_end_with_a_fatal_condition_stops_the_subscriber_and_ends_its_iterator(
    ending: EndingComponent, redis_url: str, endpoint: str
) -> None:
    got: list[int] = []
    sub = Subscriber(ending.here_url, "/weather/#", link_name="fatal", heartbeat_interval=0.2,
                     reconnect_delay=0.02, max_reconnect_delay=0.16).start()
    reader = threading.Thread(target=lambda: got.extend(p.source_seq for p in sub),
                              daemon=True)
    try:
        reader.start()
        assert sub.connected.wait(20)
        with subscribed(ending.here_url, "watcher", redis_url, ending.here_url) as (
            _watcher, feed, _seen, _events
        ):
            _publish(feed, 100)
            assert wait_for(lambda: len(got) >= 100, 30)
            ending.end("fatal", endpoint, FATAL)
            reader.join(PROMPTLY)
            assert not reader.is_alive()  # the iteration ended: nothing more will come
            assert_stopped_naming(sub, FATAL)
            _publish(feed, 100)
        assert got == list(range(1, 101))
        assert sub.report.connections == 1  # it did not come back
        assert "fatal" not in _attached_names(ending)
    finally:
        sub.stop()


def test_run_returns_once_a_fatal_condition_stopped_the_subscriber(
    ending: EndingComponent,
) -> None:
    sub = Subscriber(ending.here_url, "/weather/#", link_name="run", heartbeat_interval=0.2)
    runner = threading.Thread(target=sub.run, daemon=True)
    runner.start()
    try:
        assert sub.connected.wait(20)
        ending.end("run", "connection", FATAL)
        runner.join(PROMPTLY)
        assert not runner.is_alive()
        assert isinstance(sub.error, AmqpAdapterError)
        assert str(sub.error).startswith(f"{FATAL}: "), sub.error
        assert sub.report.connections == 1
    finally:
        sub.stop()


def test_waiting_for_a_refused_first_attach_raises_the_refusal_rather_than_time_out(
    ending: EndingComponent,
) -> None:
    sub = Subscriber(ending.here_url, "/subscriptions/nope", link_name="nope",
                     heartbeat_interval=0.2).start()
    try:
        started = time.monotonic()
        with pytest.raises(AmqpAdapterError, match=r"^amqp:not-found: ") as refused:
            sub.wait_connected(timeout=60)
        assert time.monotonic() - started < PROMPTLY
        assert refused.value is sub.error
        assert not sub.connected.is_set()
    finally:
        sub.stop()


def test_wait_connected_is_true_once_attached_and_false_once_stopped(
    ending: EndingComponent,
) -> None:
    sub = Subscriber(ending.here_url, "/weather/#", link_name="waits",
                     heartbeat_interval=0.2).start()
    assert sub.wait_connected(timeout=20) is True
    sub.stop()
    sub.connected.clear()  # as a lost connection would leave it
    started = time.monotonic()
    assert sub.wait_connected(timeout=60) is False
    assert time.monotonic() - started < PROMPTLY
    assert sub.error is None


def test_wait_connected_is_false_when_its_timeout_passes_first() -> None:
    sub = Subscriber("amqp://127.0.0.1:1", "/weather/#", link_name="nobody",
                     heartbeat_interval=0.2, reconnect_delay=0.05).start()
    try:
        started = time.monotonic()
        assert sub.wait_connected(timeout=0.5) is False
        assert time.monotonic() - started >= 0.5
        assert sub.error is None  # no listener is a lost connection, not a refusal
    finally:
        sub.stop()


def _attached_names(comp: HereComponent) -> set[str]:
    def names() -> set[str]:
        return {name for name, link in comp.links.items() if link.sender is not None}

    result: set[str] = comp.call(names)
    return result


# --- the command line -----------------------------------------------------------------------------


def _seqrepair(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "seqrepair.cli", *args], env=_env(),
                          capture_output=True, text=True, timeout=120, check=False)


def test_seqrepair_publish_exits_1_naming_the_condition_that_stopped_it(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    done = _seqrepair("publish", "--url", comp.url, "--source", "feed.cli",
                      "--address", "$control", "--count", "5")
    assert done.returncode == 1, done.stderr
    assert "seqrepair publish: amqp:not-found: " in done.stderr, done.stderr
