"""The largest message the component takes (``serve --max-message-size``, AMQP max-message-size).

The component advertises its limit on every link it receives on (publishing links and
``$seqrepair``) and enforces it as the bytes arrive: a delivery that passes it is rejected with
``amqp:link:message-size-exceeded`` and its link detached with the same condition (AMQP 1.0
§2.7.3: a link error), before the rest of it comes; nothing of it is journaled. A message of
exactly the limit goes through; what came before on that link is kept, and every other link and
connection goes on. A subscriber bounds what it takes from a component the same way.

Real parts only: a real redis-server, the component in a thread of the test, plain proton
clients, the client ``Publisher`` and ``Subscriber`` over loopback.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from seqrepair.amqp.client.subscriber import DEFAULT_MAX_RECEIVED, Publisher, Subscriber
from seqrepair.amqp.component.component import ComponentConfig
from seqrepair.amqp.wire.errors import OversizedMessageError
from seqrepair.amqp.wire.sizelimit import DEFAULT_MAX_MESSAGE_SIZE
from seqrepair.amqp.wire.vocabulary import CONTROL_ADDRESS
from seqrepair.core.errors import InvalidConfigError
from seqrepair.journal.journal import Journal

from .conftest import free_port, wait_for
from .inthread import HereComponent

pytestmark = [pytest.mark.amqp, pytest.mark.redis]

LIMIT = 64 * 1024
EXCEEDED = "amqp:link:message-size-exceeded"
TOO_LARGE = "message too large: rejected, link detached"
PLAIN = "plain-big"  # the plain client's container id: the source the component numbers it as


def sized(size: int) -> Message:
    """A plain publication (a map body, no properties) of exactly ``size`` (>= 300) bytes on
    the wire."""

    def make(n: int) -> Message:
        return Message(body={"blob": "x" * n})

    overhead = len(make(1000).encode()) - 1000
    message = make(size - overhead)
    assert len(message.encode()) == size
    return message


class Plain(MessagingHandler):
    """A plain proton client on one connection: a sender per address named in ``steps``, each
    ``(address, message)`` sent once the outcome of the one before is in. Records each outcome
    (its address, the remote state and condition), each link the peer detached with an error
    and the max-message-size the peer advertised per address. With ``receive_from`` it also
    receives on a link named ``plain-data``, until ``until(received)`` holds."""

    def __init__(self, url: str, steps: list[tuple[str, Message]],
                 receive_from: str | None = None,
                 until: Callable[[list[Message]], bool] = lambda _: True) -> None:
        super().__init__(prefetch=10)
        self.url = url
        self.steps = list(steps)
        self.receive_from = receive_from
        self.until = until
        self.senders: dict[str, Any] = {}
        self.outcomes: list[tuple[str, Any, str | None]] = []
        self.detached: list[tuple[str, str | None]] = []
        self.advertised: dict[str, int] = {}
        self.received: list[Message] = []
        self.conn: Any = None
        self._sent = 0

    def run(self) -> Plain:
        container = Container(self)
        container.container_id = PLAIN
        container.run()
        return self

    def on_start(self, event: Any) -> None:
        self.timer = event.container.schedule(30, self)
        self.conn = event.container.connect(self.url, reconnect=False)
        for address, _ in self.steps:
            if address not in self.senders:
                self.senders[address] = event.container.create_sender(self.conn, address)
        if self.receive_from is not None:
            event.container.create_receiver(self.conn, self.receive_from, name="plain-data")

    def on_link_opened(self, event: Any) -> None:
        if event.link.is_sender:
            self.advertised[event.link.target.address] = event.link.remote_max_message_size

    def on_sendable(self, event: Any) -> None:
        self._next()

    def _next(self) -> None:
        if self._sent != len(self.outcomes) or self._sent == len(self.steps):
            return
        address, message = self.steps[self._sent]
        sender = self.senders[address]
        if sender.credit > 0:
            sender.send(message)
            self._sent += 1

    def on_settled(self, event: Any) -> None:
        cond = event.delivery.remote.condition
        self.outcomes.append((event.link.target.address, event.delivery.remote_state,
                              cond.name if cond else None))
        self._next()
        self._check()

    def on_link_error(self, event: Any) -> None:  # proton's default closes the connection
        cond = event.link.remote_condition
        self.detached.append((event.link.target.address, cond.name if cond else None))

    def on_message(self, event: Any) -> None:
        self.received.append(event.message)
        self._check()

    def _check(self) -> None:
        if len(self.outcomes) == len(self.steps) and self.until(self.received):
            self.on_timer_task(None)

    def on_timer_task(self, event: Any) -> None:
        self.conn.close()
        self.timer.cancel()


@pytest.fixture
def logged() -> Iterator[Callable[[str], list[dict[str, Any]]]]:
    with structlog.testing.capture_logs() as logs:
        yield lambda name: [dict(e) for e in list(logs) if e["event"] == name]


@pytest.fixture
def small(here: Callable[..., HereComponent]) -> HereComponent:
    """A component that takes messages of at most :data:`LIMIT` bytes."""
    return here(max_message_size=LIMIT)


def test_the_component_advertises_its_limit_on_the_links_it_receives_on(
    small: HereComponent,
) -> None:
    client = Plain(small.here_url, [("/big/a", sized(300)), (CONTROL_ADDRESS, sized(300))])
    client.run()
    assert client.advertised == {"/big/a": LIMIT, CONTROL_ADDRESS: LIMIT}


def test_a_publication_of_the_limit_goes_through_and_one_byte_more_is_refused(
    small: HereComponent, redis_url: str, logged: Callable[[str], list[dict[str, Any]]],
) -> None:
    client = Plain(small.here_url, [("/big/a", sized(LIMIT)), ("/big/a", sized(LIMIT + 1))])
    client.run()
    assert client.outcomes == [("/big/a", Delivery.ACCEPTED, None),
                               ("/big/a", Delivery.REJECTED, EXCEEDED)]
    assert client.detached == [("/big/a", EXCEEDED)]
    with Journal.from_url(redis_url) as journal:
        assert journal.high_water(PLAIN) == 1  # the first only: nothing of the refused one
        [kept] = journal.read_range(PLAIN, 1, 1)
    assert kept.fields == sized(LIMIT).body
    stats = small.call(lambda: dict(small.stats))
    assert (stats["oversized"], stats["rejected"], stats["ingested"]) == (1, 1, 1)
    [warning] = logged(TOO_LARGE)
    assert (warning["limit"], warning["received"], warning["kind"]) == (LIMIT, LIMIT + 1,
                                                                       "publish")
    assert warning["container"] == PLAIN


def test_a_message_many_times_the_limit_is_refused_before_the_rest_of_it_arrives(
    small: HereComponent, logged: Callable[[str], list[dict[str, Any]]],
) -> None:
    huge = 16 * 1024 * 1024
    client = Plain(small.here_url, [("/big/a", sized(huge))])
    client.run()
    assert client.outcomes == [("/big/a", Delivery.REJECTED, EXCEEDED)]
    [warning] = logged(TOO_LARGE)
    # refused on the frames that passed the limit: what it held was the limit and a read or so
    assert LIMIT < warning["received"] <= LIMIT + 1024 * 1024 < huge


def test_other_links_and_connections_go_on_when_one_link_is_refused(
    small: HereComponent, redis_url: str,
) -> None:
    got: list[tuple[str, int]] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(small.here_url, "/big/#", link_name="watcher", heartbeat_interval=0.2,
                       on_publication=lambda p: got.append((p.source, p.source_seq)))
        )
        assert sub.wait_connected(20)
        feed = running.enter_context(Publisher(small.here_url, "feed.steady", max_batch=8))
        feed.publish_many([("/big/steady", {"n": n}, "update") for n in range(20)])
        # one connection: a publishing link refused, then another of its publishing links and
        # its request link are used; its data link gets the publication and the answer
        client = Plain(small.here_url, [("/big/a", sized(LIMIT + 1)), ("/big/b", sized(300)),
                                        (CONTROL_ADDRESS, _capabilities_request())],
                       receive_from="/big/#", until=_publication_and_answer)
        client.run()
        feed.publish_many([("/big/steady", {"n": n}, "update") for n in range(20, 40)])
        assert feed.flush(20)
        assert wait_for(lambda: len(got) >= 41, 20), got
    assert client.outcomes == [("/big/a", Delivery.REJECTED, EXCEEDED),
                               ("/big/b", Delivery.ACCEPTED, None),
                               (CONTROL_ADDRESS, Delivery.ACCEPTED, None)]
    assert client.detached == [("/big/a", EXCEEDED)]
    assert _publication_and_answer(client.received)
    steady = [("feed.steady", n) for n in range(1, 41)]
    assert [p for p in got if p[0] == "feed.steady"] == steady  # in order, once
    assert sorted(got) == sorted([(PLAIN, 1), *steady])
    assert sub.error is None
    assert feed.rejected == 0
    with Journal.from_url(redis_url) as journal:
        assert journal.high_water(PLAIN) == 1


def _capabilities_request() -> Message:
    return Message(id=1, reply_to="$link/plain-data",
                   properties={"message-type": "CAPABILITIES"})


def _publication_and_answer(received: list[Message]) -> bool:
    """The plain client's own /big/b publication and the answer to its CAPABILITIES request
    came on its data link."""
    types = [(m.properties or {}).get("message-type") for m in received]
    topics = [(m.properties or {}).get("topic") for m in received]
    return "/big/b" in topics and "CAPABILITIES" in types


def test_a_request_past_the_limit_is_refused_and_its_link_detached(
    small: HereComponent,
) -> None:
    request = _capabilities_request()
    request.body = "x" * LIMIT
    client = Plain(small.here_url, [(CONTROL_ADDRESS, request), ("/big/a", sized(300))])
    client.run()
    assert client.outcomes == [(CONTROL_ADDRESS, Delivery.REJECTED, EXCEEDED),
                               ("/big/a", Delivery.ACCEPTED, None)]
    assert client.detached == [(CONTROL_ADDRESS, EXCEEDED)]
    assert small.call(lambda: small.stats["oversized"]) == 1


def test_a_client_publisher_without_a_journal_stops_naming_the_batch_too_large(
    small: HereComponent,
) -> None:
    with Publisher(small.here_url, "feed.big", max_batch=1) as pub:
        pub.publish("/big/a", {"n": 1})
        pub.publish("/big/a", {"blob": "x" * LIMIT})  # its batch alone passes the limit
        pub.publish("/big/a", {"n": 3})
        assert not pub.flush(20)
        assert wait_for(lambda: pub.error is not None, 20)
    # numbers 2 and on will never be in the journal: every later batch would be refused as
    # skipping them, so it stops here and says why
    assert pub.error is pub.rejection
    assert (pub.error.condition, pub.error.first, pub.error.expected) == (EXCEEDED, 2, LIMIT)
    assert pub.error.got > LIMIT
    assert (pub.accepted, pub.rejected) == (1, 1)


def test_a_journaling_client_publisher_goes_on_and_subscribers_get_everything(
    small: HereComponent, redis_url: str,
) -> None:
    got: list[int] = []
    with contextlib.ExitStack() as running:
        sub = running.enter_context(
            Subscriber(small.here_url, "/big/#", link_name="watcher", heartbeat_interval=0.2,
                       on_publication=lambda p: got.append(p.source_seq))
        )
        assert sub.wait_connected(20)
        journal = running.enter_context(Journal.from_url(redis_url))
        pub = running.enter_context(
            Publisher(small.here_url, "feed.big", journal=journal, max_batch=1,
                      reconnect_delay=0.02, max_reconnect_delay=0.16)
        )
        pub.publish("/big/a", {"n": 1})
        pub.publish("/big/a", {"blob": "x" * LIMIT})  # journaled first, then too large to send
        pub.publish("/big/a", {"n": 3})
        assert not pub.flush(20)  # something was rejected
        assert (pub.accepted, pub.rejected, pub.error) == (2, 1, None)
        assert pub.rejection is not None
        assert pub.rejection.condition == EXCEEDED
        # the component fans the rejected one out from the journal, in order
        assert wait_for(lambda: len(got) >= 3, 20), got
    assert got == [1, 2, 3]


def test_the_component_takes_1_mib_by_default() -> None:
    assert ComponentConfig().max_message_size == DEFAULT_MAX_MESSAGE_SIZE == 1 << 20


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_a_subscriber_limit_is_a_number_of_bytes_or_0_for_none(bad: object) -> None:
    with pytest.raises(InvalidConfigError):
        Subscriber("127.0.0.1:1", "/#", max_message_size=bad)  # type: ignore[arg-type]
    assert Subscriber("127.0.0.1:1", "/#", max_message_size=0).max_message_size == 0


# --- a subscriber bounds what it takes, too -------------------------------------------------


class Hostile(MessagingHandler):
    """A peer that answers a subscriber's attach and sends it one message of ``size`` bytes."""

    def __init__(self, size: int) -> None:
        super().__init__(prefetch=0)
        self.url = f"127.0.0.1:{free_port()}"
        self.size = size
        self.ready = threading.Event()
        self.advertised: int | None = None
        self.detached: str | None = None
        self.sent = False

    def on_start(self, event: Any) -> None:
        self.acceptor = event.container.listen(self.url)
        self.ready.set()

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_sender:
            link.source.address = link.remote_source.address
            self.advertised = link.remote_max_message_size
        else:
            link.target.address = link.remote_target.address

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body=b"x" * self.size))

    def on_link_error(self, event: Any) -> None:
        cond = event.link.remote_condition
        self.detached = cond.name if cond else None

    def on_connection_closing(self, event: Any) -> None:
        self.acceptor.close()


def test_a_subscriber_refuses_a_transfer_past_its_limit_and_stops_naming_it() -> None:
    peer = Hostile(4 * LIMIT)
    container = Container(peer)
    thread = threading.Thread(target=container.run, daemon=True)
    thread.start()
    assert peer.ready.wait(10)
    sub = Subscriber(peer.url, "/big/#", link_name="bounded", max_message_size=LIMIT)
    sub.start()
    try:
        assert wait_for(lambda: sub.error is not None, 20)
    finally:
        sub.stop()
    assert isinstance(sub.error, OversizedMessageError)
    assert sub.error.condition == EXCEEDED
    assert (sub.error.expected, sub.error.got > LIMIT) == (LIMIT, True)
    assert peer.advertised == LIMIT
    assert wait_for(lambda: peer.detached == EXCEEDED, 10)
    thread.join(10)
    assert not thread.is_alive()
    assert Subscriber("127.0.0.1:1", "/#").max_message_size == DEFAULT_MAX_RECEIVED
