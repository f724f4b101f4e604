"""One proton :class:`~proton.reactor.Container` for every long-running part (component,
gateway, clients), with the guard against a proton 0.40 teardown race.

proton's :class:`~proton.handlers.IOHandler` selects the readable, writable and expired
selectables of a round, then pushes one event per selectable and kind. When a connection's
socket hits end-of-file (or its transport closes) in the *readable* event of a round in which
its idle-timeout deadline also *expired*, the readable handler detaches the transport from the
selectable (``s._transport = None``), and the expired event queued behind it then calls
``IOHandler.update(None, ...)``: ``AttributeError: 'NoneType' object has no attribute
'capacity'``, raised out of ``Container.run()``. Its readable and writable handlers already
return early for a selectable without a transport; the expired one does not. A restarted
component under load died of it (issue 22 §3); a client's runner once only survived it while
stopping.

:func:`make_container` builds a container whose I/O handler ignores the expiry of a selectable
whose transport is already gone (nothing is left to tick: the connection's own end is reported
by proton's transport-closed and disconnected events, as without the race). Use it instead of
``Container(handler)`` everywhere.

:class:`Injector` is proton's :class:`~proton.reactor.EventInjector` with a pipe that can be
closed: proton never closes the pipe an injector opens, so each client run left two file
descriptors behind, and once a process holds descriptors past 1023 proton's ``select()`` fails
for every connection it has (a process running many clients in turn, a test suite, met it).
"""

from __future__ import annotations

import errno
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from proton import ProtonException
from proton._reactor import GlobalOverrides, Reactor, SSLConfig
from proton.handlers import IOHandler
from proton.reactor import Container, EventInjector

from seqrepair.amqp.wire.backoff import AcceptPauses
from seqrepair.logs import Logger, get_logger

__all__ = [
    "GuardedIOHandler", "Injector", "LazySSLContainer", "accept_in_batches", "make_container",
    "write_now",
]

_log = get_logger("seqrepair.amqp.wire")


class GuardedIOHandler(IOHandler):
    """proton's I/O handler, but an expiry of a selectable without a transport, and a
    transport event of a transport that never had a selectable (bound to a connection whose
    socket was gone: proton's handler raises ``AttributeError: _selectable not in _attrs`` out
    of ``Container.run()``, seen once in the chaos test), are ignored (see the module
    docstring); ``skipped`` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped = 0

    def on_selectable_expired(self, event: Any) -> None:
        if event.selectable._transport is None:
            self.skipped += 1
            return
        super().on_selectable_expired(event)

    def on_transport(self, event: Any) -> None:
        if not _selected(event.transport):
            self.skipped += 1
            return
        super().on_transport(event)

    def on_transport_closed(self, event: Any) -> None:
        if not _selected(event.transport):
            self.skipped += 1
            event.transport.unbind()  # what proton's does last; there is no selectable to end
            return
        super().on_transport_closed(event)


def write_now(connection: Any) -> bool:
    """Write what ``connection``'s transport has to send now, as far as its socket takes it,
    rather than once every event at hand is handled and ``select`` says the socket is
    writable (proton's way): for what must leave at once (a publication to a subscriber, a
    transfer to the component), not after the rest of the round's events (proton's Python
    dispatch, tens of microseconds each, hundreds on a busy machine). What the socket does not
    take waits for the selector, as before; True when something was written."""
    transport = connection.transport if connection is not None else None
    selectable = getattr(transport, "_selectable", None) if transport is not None else None
    if selectable is None or selectable.is_terminal:
        return False  # not bound to a socket (yet, or any more): the selector's business
    return _write_now(transport, selectable) == 1


def _write_now(transport: Any, selectable: Any) -> int:
    """Write what ``transport`` has pending to its socket as far as the socket takes it now
    (sockets are non-blocking); 1 when something was written. Errors are left to the selector
    path, which meets them again and ends the transport as proton does."""
    try:
        pending = transport.pending()
        if pending <= 0:
            return 0
        sent = selectable.send(transport.peek(pending))
    except (OSError, ProtonException):  # would block, or a socket or transport in error
        return 0
    transport.pop(sent)
    return 1


def _selected(transport: Any) -> bool:
    """Whether proton's I/O handler gave ``transport`` a selectable (its attribute is unset,
    not None, on a transport bound outside the handler)."""
    try:
        transport._selectable  # noqa: B018
    except AttributeError:
        return False
    return True


def make_container(*handlers: Any) -> Container:
    """``Container(*handlers)`` with :class:`GuardedIOHandler` as its I/O handler, its default
    TLS configuration built when first used (:class:`LazySSLContainer`)."""
    return LazySSLContainer(*handlers, global_handler=GuardedIOHandler())


class _LazySSLConfig:
    """proton's ``SSLConfig`` (a container's default client and server TLS domains), built
    when first asked for: each domain is an OpenSSL context, and building the two took 20-40
    ms of CPU at every client's start (a subscriber catching up is timed from its start,
    issue 26). seqrepair gives proton its own ``ssl_domain`` wherever it uses TLS
    (:mod:`.security`); these defaults serve only an ``amqps://`` URL given none."""

    def __init__(self) -> None:
        self._config: SSLConfig | None = None

    def _built(self) -> SSLConfig:
        if self._config is None:
            self._config = SSLConfig()  # raises SSLUnavailable as proton's would
        return self._config

    @property
    def client(self) -> Any:
        # proton reads this at every connect given no ssl_domain (it uses it for amqps only)
        return _LazyDomain(self, "client")

    @property
    def server(self) -> Any:
        return _LazyDomain(self, "server")

    def set_credentials(self, cert_file: str, key_file: str, password: str | None) -> None:
        self._built().set_credentials(cert_file, key_file, password)  # type: ignore[no-untyped-call]

    def set_trusted_ca_db(self, certificate_db: str) -> None:
        self._built().set_trusted_ca_db(certificate_db)  # type: ignore[no-untyped-call]


class _LazyDomain:
    """One of :class:`_LazySSLConfig`'s domains, built when proton first reads it."""

    def __init__(self, config: _LazySSLConfig, which: str) -> None:
        self._config = config
        self._which = which

    def __getattr__(self, name: str) -> Any:
        return getattr(getattr(self._config._built(), self._which), name)


class LazySSLContainer(Container):
    """:class:`~proton.reactor.Container` whose ``ssl`` (default TLS domains) is built when
    first used (:class:`_LazySSLConfig`). proton's ``Container.__init__`` builds it at once,
    so this one sets what that sets itself (a test holds the attributes equal to proton's)."""

    def __init__(self, *handlers: Any, **kwargs: Any) -> None:
        Reactor.__init__(self, *handlers, **kwargs)
        self.ssl = _LazySSLConfig()  # type: ignore[assignment]  # an SSLConfig when used
        self.global_handler = GlobalOverrides(kwargs.get("global_handler", self.global_handler))
        self.trigger = None
        self.container_id = kwargs.get("container_id", str(uuid.uuid4()))
        self.allow_insecure_mechs = True
        self.allowed_mechs = None
        self.sasl_enabled = True
        self.user = None
        self.password = None


class Injector(EventInjector):
    """An :class:`~proton.reactor.EventInjector` whose pipe :meth:`release` closes, once the
    container that selected it has ended (see the module docstring). Triggers after that are
    ignored: the descriptors may already belong to another file."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._released = False

    def trigger(self, event: Any) -> None:
        with self._lock:
            if not self._released:
                super().trigger(event)

    def close(self) -> None:
        with self._lock:
            if not self._released:
                super().close()

    def release(self) -> None:
        """Close the pipe (call it once the container has stopped running); idempotent."""
        with self._lock:
            if self._released:
                return
            self._released = True
            for fd in self.pipe:
                os.close(fd)


class Call:
    """A timer handler that calls a function."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        """Proton's timer fired: call the function."""
        self.fn()


LISTEN_BACKLOG = 1024
"""Connections the kernel completes for a listener before it accepts them (proton listens
with 10: past it, the handshakes of a burst of connects wait on retransmits, a second and more
each; connecting peers, honest ones included, wait)."""


def widen_backlog(acceptor: Any, backlog: int = LISTEN_BACKLOG) -> bool:
    """Listen again with ``backlog`` (Linux takes a second ``listen`` as a new backlog).
    Proton's Python binding keeps the socket in its selectable; False where it does not."""
    try:
        acceptor._selectable._delegate.listen(backlog)
    except (AttributeError, OSError):
        return False
    return True


ACCEPT_BATCH = 64
"""Connections one readable event of a listener accepts at most (proton accepts one: a pass of
the event loop can take a quarter second when the component is busy, so connects queued in the
backlog (a burst of never-open ones, say) were taken at four a second and an honest client
behind them waited seconds for its first frame)."""


def accept_in_batches(acceptor: Any, most: int = ACCEPT_BATCH,
                      room: Callable[[], int] | None = None,
                      stats: dict[str, int] | None = None, log: Logger | None = None) -> bool:
    """Have ``acceptor`` take up to ``most`` queued connections each time its socket is
    readable, until the backlog is empty, with the backlog widened (:func:`widen_backlog`).
    ``room`` (None: no bound) says how many more connections the listener's owner would
    hold: a batch takes no more than that, and one at least (as proton alone does), so a flood
    past a connection limit is refused a connection a pass, its descriptors bounded as before.
    Each connection is set up by proton's own handler, as one accepted alone.

    An ``accept()`` that fails otherwise than for an empty backlog or a peer that gave up (the
    process out of descriptors, EMFILE, say) would end ``Container.run()``, and every
    connection with it: instead the listener stops reading its socket for a pause
    (:class:`~seqrepair.amqp.wire.backoff.AcceptPauses`: 5 ms doubling to 1 s) and reads it
    again on a timer, while the connections held are served as before. ``stats`` (the owner's
    stop counters) counts each failure in ``accepts_failed``; the first failure of an episode
    is logged on ``log`` (``accepts paused``). False where proton's binding does not keep what
    this needs."""
    take_one = getattr(acceptor, "on_selectable_readable", None)
    if take_one is None or not widen_backlog(acceptor):
        return False
    pauses = AcceptPauses()
    logger = _log if log is None else log
    if stats is not None:
        stats.setdefault("accepts_failed", 0)

    def take_many(event: Any) -> None:
        batch = most if room is None else min(most, max(1, room()))
        for _ in range(batch):
            try:
                take_one(event)
            except BlockingIOError:
                break  # the backlog is empty
            except ConnectionAbortedError:
                continue  # its peer gave up while it waited: the next one
            except OSError as exc:
                pause(exc)
                return
            pauses.accepted()
        pauses.caught_up()

    def pause(exc: OSError) -> None:
        seconds, started = pauses.failed()
        if stats is not None:
            stats["accepts_failed"] += 1
        if started:
            logger.warning("accepts paused", listener=listening_address(acceptor, "?"),
                           errno=errno.errorcode.get(exc.errno or 0, exc.errno),
                           error=exc.strerror or str(exc), pause=seconds)
        selectable = acceptor._selectable
        selectable.reading = False
        selectable.update()  # proton's selector leaves it out of select() from now
        # a selectable's event names no container; proton's selectable keeps its own
        selectable._reactor.schedule(seconds, Call(lambda: resume(selectable)))

    def resume(selectable: Any) -> None:
        if not selectable.is_terminal:  # not closed meanwhile
            selectable.reading = True
            selectable.update()

    acceptor.on_selectable_readable = take_many
    return True


def listening_address(acceptor: Any, configured: str) -> str:
    """``host:port`` an acceptor is bound to: the port the system chose for a configured port
    0. Proton's Python binding keeps the listening socket in its selectable (no public
    accessor); where that differs, the configured address is all there is."""
    try:
        host, port = acceptor._selectable._delegate.getsockname()[:2]
    except (AttributeError, OSError, TypeError, ValueError):
        return configured
    return f"{host}:{port}"
