"""A subscriber whose link the peer detaches while the connection stays up.

The component (or a gateway) may detach one link of a subscriber, its data link or its control
link, and keep the connection: with a condition that a reconnect cures
(``amqp:link:detach-forced``, ``amqp:resource-limit-exceeded``, ``amqp:internal-error``...) or
with none at all. The subscriber then reconnects and resumes its link context exactly as after
a lost connection. A fatal condition stops it; ``amqp:link:stolen`` (another subscriber
attached the same link name) stops it too, rather than taking the name back.

Real parts only: a real redis-server, the component (here in a thread of the test, so that the
test can detach its links as the component itself would; or ``seqrepair serve`` as a process),
a gateway, publisher and subscribers over proton on loopback. No timed assertions: every wait
is a generous deadline.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from proton import Connection

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.gateway.gateway import Gateway
from seqrepair.amqp.wire.security import ANONYMOUS_LISTENER
from seqrepair.core.events import Event, LinkReset
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, _env, wait_for
from .inthread import HereComponent
from .test_gateway_links import relayed
from .test_link_contexts import Feed

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

NON_FATAL = [
    "amqp:link:detach-forced",
    "amqp:resource-limit-exceeded",
    "amqp:internal-error",
    None,  # a plain detach: proton reports it as on_link_closing, not on_link_error
]


@contextlib.contextmanager
def subscribed(
    url: str, name: str, redis_url: str, publish_to: str
) -> Iterator[tuple[Subscriber, Feed, list[int], list[Event]]]:
    """A subscriber on ``url`` (link ``name``) and a journaling publisher on ``publish_to``."""
    got: list[int] = []
    events: list[Event] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(url, "/weather/#", link_name=name, heartbeat_interval=0.2,
                       on_publication=lambda p: got.append(p.source_seq),
                       on_event=events.append)
        )
        assert sub.connected.wait(20)
        publisher = running.enter_context(
            Publisher(publish_to, "feed.d", journal=Journal.from_url(redis_url))
        )
        yield sub, Feed(publisher), got, events


def _publish(feed: Feed, n: int) -> None:
    feed.publish(n)
    assert feed.publisher.flush(30)


def _assert_exact_after_one_reconnect(
    sub: Subscriber, got: list[int], events: list[Event], total: int
) -> None:
    assert got == list(range(1, total + 1)), (sub.stats(), len(got))
    report = sub.stats()
    assert report.connections == 2, report
    assert report.disconnections == 1, report
    assert report.resets == 0, report  # the context was resumed: no link number 0
    assert not [e for e in events if isinstance(e, LinkReset)]
    assert report.unrecoverable == 0, report
    assert getattr(sub, "error", None) is None


@pytest.mark.parametrize("condition", NON_FATAL)
def test_a_detached_data_link_is_resumed_and_every_publication_arrives_once_in_order(
    here: Callable[..., HereComponent], redis_url: str, condition: str | None
) -> None:
    comp = here()
    with subscribed(comp.here_url, "detached-data", redis_url, comp.here_url) as (
        sub, feed, got, events
    ):
        _publish(feed, 200)
        assert wait_for(lambda: len(got) >= 200, 30)
        _publish(feed, 200)
        comp.detach_data("detached-data", condition)  # some of these are still on their way
        _publish(feed, 200)  # partly while it is away: kept by the context, or repaired
        done = wait_for(lambda: len(got) >= 600, 30)
        time.sleep(0.5)  # a duplicate would arrive now
        assert done, (sub.stats(), len(got))
    _assert_exact_after_one_reconnect(sub, got, events, 600)


@pytest.mark.parametrize("condition", ["amqp:link:detach-forced", None])
def test_a_detached_control_link_is_recovered_and_repair_works_again(
    here: Callable[..., HereComponent], redis_url: str, condition: str | None
) -> None:
    comp = here(drop_seed=7)
    with subscribed(comp.here_url, "detached-control", redis_url, comp.here_url) as (
        sub, feed, got, events
    ):
        _publish(feed, 200)
        assert wait_for(lambda: len(got) >= 200, 30)
        comp.detach_control("detached-control", condition)
        comp.set_drop_rate(0.05)  # losses only the control link's gap requests can repair
        _publish(feed, 400)
        done = wait_for(lambda: len(got) >= 600, 30)
        time.sleep(0.5)
        assert done, (sub.stats(), len(got))
    assert sub.stats().gaps_detected > 0  # there was something to repair
    _assert_exact_after_one_reconnect(sub, got, events, 600)


@pytest.mark.parametrize("condition", ["amqp:resource-limit-exceeded", None])
def test_a_data_link_detached_through_the_gateway_is_resumed(
    here: Callable[..., HereComponent], redis_url: str, condition: str | None
) -> None:
    # the component detaches the gateway's link; the gateway detaches the subscriber's with
    # the same condition (or none) and keeps the subscriber's connection
    comp = here()
    gw = Gateway("127.0.0.1:0", comp.here_url, security=ANONYMOUS_LISTENER,
                 name="edge").start()
    try:
        assert gw.ready.wait(10)
        with subscribed(gw.listening, "gw-detached", redis_url, comp.here_url) as (
            sub, feed, got, events
        ):
            assert wait_for(lambda: relayed(gw, "gw-detached"), 30)
            _publish(feed, 200)
            assert wait_for(lambda: len(got) >= 200, 30)
            comp.detach_data("edge.gw-detached", condition)
            _publish(feed, 200)
            done = wait_for(lambda: len(got) >= 400, 30)
            time.sleep(0.5)
            assert done, (sub.stats(), len(got), gw.stats)
        _assert_exact_after_one_reconnect(sub, got, events, 400)
    finally:
        gw.close()


@pytest.mark.parametrize("which", ["data", "control"])
def test_a_fatal_condition_on_either_link_stops_the_subscriber(
    here: Callable[..., HereComponent], redis_url: str, which: str
) -> None:
    comp = here()
    sub = Subscriber(comp.here_url, "/weather/#", link_name="fatal", heartbeat_interval=0.2)
    sub.start()
    try:
        assert sub.connected.wait(20)
        detach = comp.detach_data if which == "data" else comp.detach_control
        detach("fatal", "amqp:unauthorized-access")
        assert sub._thread is not None
        sub._thread.join(20)
        assert not sub._thread.is_alive()  # stopped for good, nothing left running
        assert "amqp:unauthorized-access" in str(sub.error)
        assert sub.report.connections == 1
    finally:
        sub.stop()


def test_a_refused_attach_with_a_fatal_condition_stops_the_subscriber(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    sub = Subscriber(comp.url, "/subscriptions/none-such", link_name="refused").start()
    try:
        assert sub._thread is not None
        sub._thread.join(20)
        assert not sub._thread.is_alive()
        assert "amqp:not-found" in str(sub.error)
        assert sub.report.connections == 1
    finally:
        sub.stop()


def test_seqrepair_subscribe_exits_1_naming_the_condition_that_stopped_it(
    component: Callable[..., ComponentProcess],
) -> None:
    comp = component("--heartbeat", "0.2")
    done = subprocess.run(
        [sys.executable, "-m", "seqrepair.cli", "subscribe", "--url", comp.url,
         "--address", "/subscriptions/none-such", "--duration", "30"],
        env=_env(), capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1
    assert "seqrepair subscribe: amqp:not-found" in done.stderr


def test_a_stolen_link_stops_the_first_subscriber_and_the_second_keeps_it(
    component: Callable[..., ComponentProcess], redis_url: str
) -> None:
    # two subscribers of one link name: taking the name back would start a tug of war (one
    # principal, anonymous: another principal's attach with the name is refused, test_authz.py)
    comp = component("--heartbeat", "0.2")
    got: list[int] = []
    first = Subscriber(comp.url, "/weather/#", link_name="twice", heartbeat_interval=0.2).start()
    try:
        assert first.connected.wait(20)
        with contextlib.ExitStack() as running:
            second = running.enter_context(
                Subscriber(comp.url, "/weather/#", link_name="twice", heartbeat_interval=0.2,
                           on_publication=lambda p: got.append(p.source_seq))
            )
            assert second.connected.wait(20)
            assert first._thread is not None
            first._thread.join(20)
            assert not first._thread.is_alive()
            assert "amqp:link:stolen" in str(first.error)
            publisher = running.enter_context(
                Publisher(comp.url, "feed.s", journal=Journal.from_url(redis_url))
            )
            feed = Feed(publisher)
            _publish(feed, 300)
            done = wait_for(lambda: len(got) >= 300, 30)
            time.sleep(0.5)
            assert done, (second.stats(), len(got))
        assert got == list(range(1, 301))
        assert first.report.connections == 1
        assert second.stats().connections == 1
    finally:
        first.stop()


# --- the handlers alone (no network) -----------------------------------------------------


class _Recorder:
    """Stands in for the container: records what the subscriber schedules."""

    def __init__(self) -> None:
        self.scheduled: list[Any] = []

    def schedule(self, delay: float, task: Any) -> None:
        self.scheduled.append(task)


class _LinkEvent:
    def __init__(self, link: Any) -> None:
        self.link = link
        self.connection = link.connection


def _attached() -> tuple[Subscriber, _Recorder, Any, Any]:
    """A subscriber whose connection has both its links, as ``_connect`` leaves them."""
    conn = Connection()
    session = conn.session()
    receiver = session.receiver("unit")
    control = session.sender("unit-control")
    sub = Subscriber("127.0.0.1:1", "/weather/#", link_name="unit")
    recorder = _Recorder()
    sub._container = recorder
    sub._conn = conn
    sub._receiver = receiver
    sub._control = control
    return sub, recorder, receiver, control


@pytest.mark.parametrize("which", ["data", "control"])
@pytest.mark.parametrize("handler", ["on_link_error", "on_link_closing"])
def test_a_link_detached_by_the_peer_reconnects_once(which: str, handler: str) -> None:
    sub, recorder, receiver, control = _attached()
    link = receiver if which == "data" else control
    getattr(sub, handler)(_LinkEvent(link))
    getattr(sub, handler)(_LinkEvent(link))  # the same link again: no second chain
    assert sub._conn is None
    assert len(recorder.scheduled) == 1
    assert not sub._stopping


@pytest.mark.parametrize("handler", ["on_link_error", "on_link_closing"])
def test_a_link_closing_while_the_subscriber_stops_is_no_error_and_no_reconnect(
    handler: str,
) -> None:
    sub, recorder, receiver, _control = _attached()
    conn = sub._conn
    sub._stopping = True
    getattr(sub, handler)(_LinkEvent(receiver))
    assert sub._conn is conn
    assert recorder.scheduled == []
    assert getattr(sub, "error", None) is None


def test_a_link_of_a_connection_given_up_on_is_ignored() -> None:
    sub, recorder, receiver, _control = _attached()
    old_conn = sub._conn
    newer = Connection()
    sub._conn = newer  # reconnected meanwhile: the old connection's links no longer count
    sub._receiver = newer.session().receiver("unit")
    sub.on_link_closing(_LinkEvent(receiver))
    assert old_conn is not None
    assert sub._conn is newer
    assert recorder.scheduled == []
