"""What leaves at once on the live path (issue 26): what the publisher sends and what the
component pumps to a subscriber link is written to the socket then, not after every other
event of the round and a ``select``; the component sends what one publishing link brought
once that link has no further transfer in the read.
No timing is asserted: what is checked is what is written, pumped and delivered, and when in
the order of events."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from proton import Delivery, ProtonException

from seqrepair.amqp.client.subscriber import Publisher, Subscriber
from seqrepair.amqp.wire import guard, reactor
from seqrepair.amqp.wire.reactor import _write_now, write_now
from seqrepair.core.messages import Publication
from seqrepair.journal.journal import Journal

from .conftest import wait_for
from .inthread import HereComponent
from .test_numbering import Harness


class _Transport:
    """A proton transport stand-in holding output bytes."""

    def __init__(self, output: bytes, *, broken: bool = False) -> None:
        self.output = output
        self.broken = broken

    def pending(self) -> int:
        if self.broken:
            raise ProtonException("transport closed")
        return len(self.output)

    def peek(self, n: int) -> bytes:
        return self.output[:n]

    def pop(self, n: int) -> None:
        self.output = self.output[n:]


class _Socket:
    """A non-blocking socket stand-in: takes at most ``room`` bytes, else would block."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.written = b""

    def send(self, data: bytes) -> int:
        if self.room == 0:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        n = min(self.room, len(data))
        self.written += data[:n]
        self.room -= n
        return n


def test_a_transports_output_is_written_at_once_as_far_as_the_socket_takes_it() -> None:
    transport, sock = _Transport(b"abcdef"), _Socket(room=4)
    assert _write_now(transport, sock) == 1
    assert sock.written == b"abcd"
    assert transport.output == b"ef"  # the rest waits for the selector, as before
    assert _write_now(transport, sock) == 0  # would block: nothing taken, nothing lost
    assert transport.output == b"ef"


def test_nothing_pending_or_a_transport_in_error_writes_nothing() -> None:
    sock = _Socket(room=100)
    assert _write_now(_Transport(b""), sock) == 0
    broken = _Transport(b"abc", broken=True)
    assert _write_now(broken, sock) == 0  # left to the selector path, which ends it
    assert sock.written == b""
    assert broken.output == b"abc"


def test_a_connection_without_a_socket_is_left_to_the_selector() -> None:
    assert write_now(None) is False
    assert write_now(SimpleNamespace(transport=None)) is False
    terminal = SimpleNamespace(is_terminal=True)
    assert write_now(SimpleNamespace(transport=SimpleNamespace(_selectable=terminal))) is False
    sock = _Socket(room=10)
    sock.is_terminal = False  # type: ignore[attr-defined]
    transport = _Transport(b"xyz")
    transport._selectable = sock  # type: ignore[attr-defined]
    assert write_now(SimpleNamespace(transport=transport)) is True
    assert sock.written == b"xyz"


def test_a_link_with_nothing_more_queued_is_sent_at_once_and_a_busy_one_waits() -> None:
    """One message of a link with no further transfer in the read goes out before the
    read's other events are handled; while the link has more queued, what fan-out offered
    waits and goes out together (in order) with the last one."""
    h = Harness()
    pumped: list[list[int]] = []

    def pump(link: Any, now: float) -> None:
        pumped.append([p.source_seq for p, _ in link.pending])
        link.pending.clear()

    h.component._pump_link = pump  # type: ignore[method-assign]
    h.component.container = SimpleNamespace()  # running: pumps may wait for the quiet point
    h.receiver.queued = 0
    assert h.publish(1).outcome == Delivery.ACCEPTED
    assert pumped == [[1]]  # sent before the quiet point
    h.receiver.queued = 2  # two more transfers of this link in the read
    h.publish(2)
    h.receiver.queued = 1
    h.publish(3)
    assert pumped == [[1]]
    h.receiver.queued = 0
    h.publish(4)
    assert pumped == [[1], [2, 3, 4]]
    h.component.on_reactor_quiesced(None)  # nothing left to send
    assert pumped == [[1], [2, 3, 4]]


def test_with_writes_at_once_every_publication_arrives_once_in_order(
    redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The component, a journaling publisher and a subscriber over loopback, one
    ``publish()`` per record, idle moments among them: every one arrives once, in order, and
    the sends were written at once (by both the publisher and the component)."""
    written: list[bool] = []
    real = reactor._write_now

    def counting(transport: Any, selectable: Any) -> int:
        n = real(transport, selectable)
        written.append(n == 1)
        return n

    monkeypatch.setattr(reactor, "_write_now", counting)
    comp = HereComponent(redis_url).start()
    got: list[Publication] = []
    sub = Subscriber(comp.here_url, "/flush/#", on_publication=got.append).start()
    pub = None
    try:
        assert sub.connected.wait(20)
        pub = Publisher(comp.here_url, "flush.src", address="/#",
                        journal=Journal.from_url(redis_url)).start()
        for n in range(300):
            pub.publish("/flush/a", {"n": n})
            if n % 50 == 0:
                time.sleep(0.01)
        assert pub.flush(30)
        wait_for(lambda: len(got) >= 300, timeout=30)
        assert [p.source_seq for p in got] == list(range(1, 301))
        assert [p.fields["n"] for p in got] == list(range(300))
        assert any(written)
    finally:
        if pub is not None:
            pub.close(5)
        sub.stop()
        comp.shut()


class _Recorder:
    """A handler tree stand-in: records the events dispatched to it."""

    def __init__(self) -> None:
        self.got: list[str] = []

    def on_unhandled(self, method: str, event: Any) -> None:
        self.got.append(method)


class _Event:
    """Dispatches as proton's events do: the method, else ``on_unhandled``."""

    def __init__(self, method: str) -> None:
        self.method = method

    def dispatch(self, handler: Any) -> None:
        fn = getattr(handler, self.method, None)
        if fn is not None:
            fn(self)
        else:
            handler.on_unhandled(self.method, self)


def test_io_events_are_not_walked_through_the_handlers_the_rest_is() -> None:
    for root in (guard.Guarded, guard.SkipIO):
        inner = _Recorder()
        handler = root(inner)
        for method in ("on_selectable_updated", "on_selectable_readable", "on_transport",
                       "on_delivery", "on_reactor_quiesced", "on_transport_error",
                       "on_link_flow", "on_timer_task"):
            handler.on_unhandled(method, _Event(method))
        assert inner.got == ["on_delivery", "on_reactor_quiesced", "on_transport_error",
                             "on_link_flow", "on_timer_task"]


def test_flush_does_not_return_while_a_batch_is_being_sent() -> None:
    """A batch taken from the queue and not yet unsettled (its transfer being encoded and
    sent) is neither queued nor unsettled: flush waits for it all the same (it returned True
    there, with nothing accepted, and a CLI publisher exited with ``accepted: 0``)."""
    publisher = Publisher("127.0.0.1:1", "flush.in-hand")
    publisher._injector.trigger = lambda event: None  # type: ignore[method-assign]
    entered, release = threading.Event(), threading.Event()

    class Blocking:
        credit = 100
        remote_max_message_size = 0
        connection = None

        def send(self, message: Any) -> Any:
            entered.set()
            assert release.wait(10)
            return SimpleNamespace(tag="1")

    try:
        publisher._sender = Blocking()
        publisher.publish("/flush/a", {"n": 1})
        sending = threading.Thread(target=publisher._send)
        sending.start()
        assert entered.wait(10)
        assert not publisher._pending  # taken from the queue
        assert not publisher._unsettled  # and not unsettled yet
        assert publisher.flush(timeout=0.2) is False  # still in hand: not flushed
        release.set()
        sending.join(10)
        assert list(publisher._unsettled) == ["1"]
        assert publisher.flush(timeout=0.1) is False  # unsettled until accepted
    finally:
        release.set()
        publisher._injector.close()
