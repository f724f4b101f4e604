"""Every client reconnects with capped, jittered exponential backoff.

After a lost connection, a connection that could not be made, or a link the peer refused or
detached, a client waits ``reconnect_delay`` (plus up to a quarter of it at random), then twice
that after each further failed attempt, up to ``max_reconnect_delay``. Once the peer has
accepted its main link (a subscriber's receiving link, a publisher's sender) the next failure
starts again from ``reconnect_delay``; a refused attach (attached and detached at once) is a
failed attempt, not a success.

The delays are read from the clients' ``reconnecting`` log events (attempt number and delay),
so the assertions are on the sequence the client scheduled, not on timing: each delay lies in
``[base, 1.25 * base]`` for its attempt's base, and those ranges do not overlap until the cap.
Real parts: proton over loopback; the component as a process (killed to lose a connection it
had accepted) or in a thread of the test (to refuse and detach a link as it would itself); a
real redis-server for the component's and the brokered clients' journal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from proton import Connection

from seqrepair.amqp.client.brokered import BrokerPublisher, BrokerSubscriber
from seqrepair.amqp.client.runner import PublisherRunner, SubscriberRunner
from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.journal.journal import Journal

from .conftest import ComponentProcess, wait_for
from .inthread import HereComponent

FIRST = 0.02
CAP = 0.16
JITTER = 0.25
ROUNDING = 0.0005  # the log rounds delays to the millisecond


def base(attempt: int, first: float = FIRST, cap: float = CAP) -> float:
    """The delay before jitter of the ``attempt``-th reconnect in a row (from 1)."""
    return min(cap, first * 2 ** (attempt - 1))


def assert_backed_off(events: list[dict[str, Any]], first: float = FIRST,
                      cap: float = CAP) -> None:
    """``events`` are reconnects 1, 2, 3... in a row, each delayed by its attempt's base plus
    at most a quarter."""
    assert [e["attempt"] for e in events] == list(range(1, len(events) + 1)), events
    for event in events:
        low = base(event["attempt"], first, cap)
        assert low - ROUNDING <= event["delay"] <= low * (1 + JITTER) + ROUNDING, event


Logged = Callable[[str], list[dict[str, Any]]]


@pytest.fixture
def logged() -> Iterator[Logged]:
    """``logged(event)``: the log events of that name so far, in order (from any thread)."""
    with structlog.testing.capture_logs() as logs:
        yield lambda name: [dict(e) for e in list(logs) if e["event"] == name]


# --- the sequence a client schedules (no network) -----------------------------------------


class _Timers:
    """Stands in for the container: records the delays scheduled."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def schedule(self, delay: float, task: object) -> None:
        self.delays.append(delay)


def test_a_subscriber_schedules_doubling_delays_up_to_its_cap(
    logged: Logged,
) -> None:
    sub = Subscriber("127.0.0.1:1", "/weather/#", link_name="backoff", reconnect_delay=0.2,
                     max_reconnect_delay=2.0)
    timers = _Timers()
    sub._container = timers
    for _ in range(8):  # each reconnect fails in turn: a new connection, lost again
        sub._conn = Connection()
        sub._lost(sub._conn, "disconnected")
    bases = [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 2.0]
    assert len(timers.delays) == len(bases)
    for delay, low in zip(timers.delays, bases, strict=True):
        assert low <= delay <= low * (1 + JITTER)
    assert_backed_off(logged("reconnecting"), first=0.2, cap=2.0)
    assert [e["delay"] for e in logged("reconnecting")] == [round(d, 3) for d in timers.delays]


def test_a_cap_below_the_first_delay_keeps_the_first_delay() -> None:
    timers = _Timers()
    sub = Subscriber("127.0.0.1:1", "/weather/#", reconnect_delay=1.0, max_reconnect_delay=0.1)
    sub._container = timers
    for _ in range(3):
        sub._conn = Connection()
        sub._lost(sub._conn, "disconnected")
    assert len(timers.delays) == 3
    assert all(1.0 <= delay <= 1.25 for delay in timers.delays)


@pytest.mark.parametrize("delays", [{"reconnect_delay": 0.0}, {"max_reconnect_delay": -1.0}])
def test_delays_that_are_not_positive_are_refused(delays: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        Subscriber("127.0.0.1:1", "/weather/#", **delays)


# --- every client, over the network ---------------------------------------------------------


def _client(kind: str, url: str, journal: Journal) -> SubscriberRunner | PublisherRunner[Any]:
    delays = {"reconnect_delay": FIRST, "max_reconnect_delay": CAP}
    if kind == "subscriber":
        return Subscriber(url, "/weather/#", link_name="backoff-sub", **delays)
    if kind == "publisher":
        return Publisher(url, "feed.backoff", **delays)
    if kind == "broker subscriber":
        return BrokerSubscriber(url, "/weather/#", journal, link_name="backoff-bsub", **delays)
    return BrokerPublisher(url, "feed.backoff-brokered", journal, address="/weather/backoff",
                           **delays)


@pytest.mark.amqp
@pytest.mark.redis
@pytest.mark.parametrize("kind", ["subscriber", "publisher", "broker subscriber",
                                  "broker publisher"])
def test_a_client_backs_off_while_nothing_listens_and_starts_again_once_accepted(
    redis_url: str, tmp_path: Path, logged: Logged, kind: str
) -> None:
    comp = ComponentProcess(redis_url, tmp_path)  # its port is chosen, nothing listens yet
    journal = Journal.from_url(redis_url)
    client = _client(kind, comp.url, journal)
    try:
        client.start()
        assert wait_for(lambda: len(logged("reconnecting")) >= 6, 30), logged("reconnecting")
        comp.start()
        assert wait_for(lambda: bool(logged("reconnected")), 30), comp.log_text()
        tried = len(logged("reconnecting"))
        assert logged("reconnected")[0]["attempt"] == tried
        assert_backed_off(logged("reconnecting"))
        comp.kill()  # the accepted connection is lost: the backoff starts again
        assert wait_for(lambda: len(logged("reconnecting")) > tried + 2, 30)
        assert_backed_off(logged("reconnecting")[tried:])
    finally:
        if isinstance(client, SubscriberRunner):
            client.stop()
        else:
            client.close(timeout=0.0)
        comp.stop()
        journal.close()


# --- a refused attach is a failed attempt -----------------------------------------------------


class _Busy(AmqpAdapterError):
    condition = "amqp:resource-limit-exceeded"


class RefusingComponent(HereComponent):
    """Refuses the attach of the data link named :attr:`refuse` (with a condition a reconnect
    may cure) while it is set."""

    refuse: str | None = None
    refused = 0

    def on_link_opening(self, event: Any) -> None:
        if event.link.is_sender and event.link.name == self.refuse:
            self.refused += 1
            self._refuse_link(event.link, _Busy("busy, try later"))
            return
        super().on_link_opening(event)


@pytest.mark.amqp
@pytest.mark.redis
def test_a_subscriber_refused_again_and_again_backs_off_and_starts_again_once_attached(
    redis_url: str, logged: Logged
) -> None:
    comp = RefusingComponent(redis_url)
    comp.refuse = "refused"
    with contextlib.ExitStack() as running:
        running.callback(comp.shut)
        comp.start()
        sub = running.enter_context(
            Subscriber(comp.here_url, "/weather/#", link_name="refused", reconnect_delay=FIRST,
                       max_reconnect_delay=CAP)
        )
        # every connection is opened: only the refused attach makes these failures
        assert wait_for(lambda: len(logged("reconnecting")) >= 6, 30), logged("reconnecting")
        assert sub.error is None  # not a fatal condition: it keeps trying

        def stop_refusing() -> None:
            comp.refuse = None

        comp.call(stop_refusing)
        assert wait_for(lambda: bool(logged("reconnected")), 30)
        tried = len(logged("reconnecting"))
        assert comp.refused == tried
        assert logged("reconnected")[0]["attempt"] == tried
        assert_backed_off(logged("reconnecting"))
        assert {e["reason"] for e in logged("reconnecting")} == {"data link detached"}

        comp.detach_data("refused", "amqp:link:detach-forced")  # after it was accepted
        assert wait_for(lambda: len(logged("reconnected")) == 2, 30)
        again = logged("reconnecting")[tried:]
        assert len(again) == 1
        assert_backed_off(again)
        assert logged("reconnected")[1]["attempt"] == 1
