"""A listener takes every connect its backlog holds in one readable event, not one a pass of
the event loop (:func:`seqrepair.amqp.wire.reactor.accept_in_batches`). Proton takes one: with
the component busy (a pass ~0.25 s during the chaos test's "all" attack) 300 never-open connects
queued in the backlog were taken at a few a second, and a fresh honest client behind them
waited 2-5 s for its CAPABILITIES answer.

An accept that fails otherwise (EMFILE...) pauses the listener instead of ending the event loop
(tests/amqp/test_accept_errors.py over real processes)."""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from proton.handlers import MessagingHandler
from structlog.testing import capture_logs

from seqrepair.amqp.wire.reactor import (
    ACCEPT_BATCH,
    accept_in_batches,
    make_container,
    widen_backlog,
)

QUEUED = 40


class _Listener(MessagingHandler):  # type: ignore[misc]
    """Counts the connections proton set up for what it accepted."""

    def __init__(self) -> None:
        super().__init__()
        self.accepted = 0

    def on_connection_init(self, event: Any) -> None:
        self.accepted += 1


@contextmanager
def _queued_connects(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` TCP connects the kernel completed, none yet accepted, none sending."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.create_connection(("127.0.0.1", port)))
                 for _ in range(count)]
        yield socks


def _accepted_after_one_readable_pass(batched: bool, room: int | None = None) -> int:
    listener = _Listener()
    container = make_container(listener)
    acceptor = container.listen("127.0.0.1:0")
    # both with the wide backlog (proton listens with 10: past it a connect would wait)
    if batched:
        assert accept_in_batches(acceptor, room=None if room is None else lambda: room)
    else:
        assert widen_backlog(acceptor)
    port = acceptor._selectable._delegate.getsockname()[1]
    container.start()
    try:
        with _queued_connects(port, QUEUED):
            for _ in range(20):  # until the listener's socket was found readable once
                container.process()
                if listener.accepted:
                    break
            return listener.accepted
    finally:
        acceptor.close()
        container.stop()


def test_proton_alone_takes_one_connect_a_pass() -> None:
    # what the batching is for: if proton ever takes more, this says so
    assert _accepted_after_one_readable_pass(batched=False) == 1


def test_a_batched_listener_takes_the_whole_backlog_in_one_pass() -> None:
    assert QUEUED < ACCEPT_BATCH
    assert _accepted_after_one_readable_pass(batched=True) == QUEUED


@pytest.mark.parametrize(("room", "taken"), [(7, 7), (0, 1)])
def test_a_batch_takes_no_more_than_its_owner_has_room_for_and_one_at_least(
    room: int, taken: int
) -> None:
    # past --max-connections the component refuses a connection a pass, as before: a flood's
    # descriptors stay bounded by the refusals it explains (tests/amqp/test_count_limits.py)
    assert _accepted_after_one_readable_pass(batched=True, room=room) == taken


def test_a_listener_without_what_batching_needs_is_left_as_proton_made_it() -> None:
    class Bare:
        pass

    assert accept_in_batches(Bare()) is False
    assert not hasattr(Bare(), "on_selectable_readable")


def test_an_empty_backlog_ends_the_batch() -> None:
    calls = []

    class Acceptor:
        def __init__(self) -> None:
            self._selectable = type("S", (), {"_delegate": socket.socket()})()

        def on_selectable_readable(self, event: Any) -> None:
            calls.append(event)
            if len(calls) == 3:
                raise BlockingIOError

    acceptor = Acceptor()
    try:
        assert accept_in_batches(acceptor, most=10)
        acceptor.on_selectable_readable("event")
    finally:
        acceptor._selectable._delegate.close()
    assert calls == ["event"] * 3


def _failing(acceptor: Any, failures: list[OSError]) -> None:
    """Make ``acceptor``'s accept raise each of ``failures`` in turn, then take connections."""
    take_one = acceptor.on_selectable_readable

    def flaky(event: Any) -> None:
        if failures:
            raise failures.pop(0)
        take_one(event)

    acceptor.on_selectable_readable = flaky


def test_a_failed_accept_pauses_the_listener_then_it_accepts_again() -> None:
    """Three EMFILEs in a row: the listener stops reading its socket after each (its
    descriptor left out of ``select()``), reads it again on a timer, then takes the connect
    that waited; each failure counted, the episode logged once. Before, the first EMFILE
    ended ``Container.run()``."""
    listener = _Listener()
    container = make_container(listener)
    acceptor = container.listen("127.0.0.1:0")
    _failing(acceptor, [OSError(errno.EMFILE, "Too many open files") for _ in range(3)])
    stats: dict[str, int] = {}
    assert accept_in_batches(acceptor, stats=stats)
    assert stats == {"accepts_failed": 0}
    port = acceptor._selectable._delegate.getsockname()[1]
    readings = []
    container.start()
    try:
        with capture_logs() as logs, _queued_connects(port, 1):
            deadline = time.monotonic() + 10
            while not listener.accepted and time.monotonic() < deadline:
                container.process()
                readings.append(acceptor._selectable.reading)
    finally:
        acceptor.close()
        container.stop()
    assert listener.accepted == 1
    assert stats == {"accepts_failed": 3}
    assert False in readings  # paused between the failures
    paused = [entry for entry in logs if entry["event"] == "accepts paused"]
    assert len(paused) == 1, logs
    assert paused[0]["errno"] == "EMFILE"
    assert paused[0]["pause"] == pytest.approx(0.005)


def test_a_listener_closed_while_paused_is_not_read_again() -> None:
    listener = _Listener()
    container = make_container(listener)
    acceptor = container.listen("127.0.0.1:0")
    _failing(acceptor, [OSError(errno.ENOBUFS, "No buffer space available")])
    assert accept_in_batches(acceptor)
    port = acceptor._selectable._delegate.getsockname()[1]
    container.start()
    try:
        with _queued_connects(port, 1):
            deadline = time.monotonic() + 10
            while acceptor._selectable.reading and time.monotonic() < deadline:
                container.process()
            assert not acceptor._selectable.reading  # paused
            acceptor.close()
            end = time.monotonic() + 0.1  # past the pause (5 ms): its timer fired
            while time.monotonic() < end:
                container.process()
            assert not acceptor._selectable.reading
            assert listener.accepted == 0
    finally:
        container.stop()
