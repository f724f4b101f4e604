"""How our clients come back: the reconnect step both runners share, and the error conditions
that end a client instead (:data:`FATAL_CONDITIONS`).

After a lost connection (or a refused or detached link) a client forgets the connection,
schedules ``_reconnect`` after a :class:`~seqrepair.amqp.wire.backoff.Backoff` delay and
connects again unless stopping; the backoff starts again once the peer has accepted the
client's link. When the peer ends what a client's links live in (detaches a link, ends its
session, closes its connection) with a condition in :data:`FATAL_CONDITIONS`, the client stops
and its ``error`` says why; anything else is a lost connection. The runners themselves are in
:mod:`seqrepair.amqp.client.runner`.
"""

from __future__ import annotations

import abc
import random
import socket
import threading
from collections.abc import Callable
from typing import Any, Self

from proton import Url
from proton.handlers import MessagingHandler

from seqrepair.amqp.wire.backoff import Backoff
from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.amqp.wire.hops import HOP_CONDITIONS, hop_refusal
from seqrepair.amqp.wire.reactor import Call
from seqrepair.amqp.wire.refusal import attach_refused
from seqrepair.amqp.wire.security import NO_CLIENT_SECURITY, ClientSecurity

FATAL_CONDITIONS = frozenset(
    {"amqp:not-found", "amqp:unauthorized-access", "amqp:decode-error", "amqp:invalid-field",
     "amqp:link:stolen", *HOP_CONDITIONS}
)
"""Error conditions (of a link of a client, or of the session or connection it lives in) that a
reconnect cannot cure: the client stops and reports them (its ``error``).
``seqrepair:relay-loop`` and ``seqrepair:hop-limit-exceeded`` (:mod:`~seqrepair.amqp.wire.hops`:
gateways or relays forwarding in a loop, a chain longer than a hop's limit) are reported as a
:class:`~seqrepair.amqp.wire.hops.RelayLoopError` or
:class:`~seqrepair.amqp.wire.hops.HopLimitError`: attaching again would go the same way.
``amqp:link:stolen`` is one for a subscriber: another subscriber attached the same link name,
and taking it back would only start a tug of war. Any other detach of one of its links by the
peer, or end of its session or connection (another condition, or none), is recovered by
reconnecting."""


def _failure(transport: Any) -> str | None:
    """The error ``transport`` failed with, as one line (None: none)."""
    cond = transport.condition if transport is not None else None
    return None if cond is None else f"{cond.name}: {cond.description}"


class _Reconnecting(MessagingHandler, abc.ABC):
    """The reconnect step both runners share: connect again, after a backoff, unless stopping
    or connected.

    The delay before a reconnect is ``reconnect_delay`` after the first failure, doubled at
    each further failed attempt up to ``max_reconnect_delay`` (never below ``reconnect_delay``),
    each plus up to a quarter of itself at random so that clients a restart disconnected
    together do not come back in step. A failure is a lost connection, a connection that
    could not be made, or a link the peer refused or detached.

    The backoff starts again from ``reconnect_delay`` once the client is *accepted*
    (:meth:`_accepted`): when the peer answers the attach of its main link (a subscriber's
    receiving link, a publisher's sender) and does not detach it at once. An open connection
    is not enough: a component, gateway or broker that takes connections but refuses the
    attach for a reason a reconnect may cure (a resource limit, an upstream that is down)
    answers with an attach and a detach together, and a reset there would bring the client
    back at the first delay, again and again.
    """

    _container: Any
    _conn: Any
    _stopping: bool
    _thread: threading.Thread | None
    log: Any
    url: str
    security: ClientSecurity = NO_CLIENT_SECURITY
    """How the connection authenticates (TLS, SASL): see :mod:`seqrepair.amqp.wire.security`."""
    address: str
    error: AmqpAdapterError | None
    refusal_error: type[AmqpAdapterError] = AmqpAdapterError
    """The type of ``error`` when the peer refuses or ends the client for good."""

    def __init__(
        self, *, reconnect_delay: float, max_reconnect_delay: float, **handler: Any
    ) -> None:
        if reconnect_delay <= 0 or max_reconnect_delay <= 0:
            raise ValueError(
                f"reconnect_delay ({reconnect_delay}) and max_reconnect_delay "
                f"({max_reconnect_delay}) must be > 0"
            )
        super().__init__(**handler)
        self.reconnect_delay = reconnect_delay
        """The delay before the first reconnect (jittered); the backoff starts here."""
        self.max_reconnect_delay = max_reconnect_delay
        """The longest delay between reconnects, before jitter."""
        self._reconnect_backoff = Backoff(
            initial=reconnect_delay, maximum=max(reconnect_delay, max_reconnect_delay)
        )
        self._rng = random.Random()
        self._reconnect_task: Any = None
        self._attempt_error: str | None = None  # why this attempt failed, for its log line
        self.last_failure: str | None = None
        """Why the peer could not be reached the last time (the transport's error, or a host
        name that does not resolve); None once the peer has accepted the client's link."""

    @abc.abstractmethod
    def _connect(self) -> None:
        """Open the connection and the links of this client."""

    def _open(self) -> None:
        """:meth:`_connect`, unless the peer's host name does not resolve: that is a failed
        attempt too (proton would raise it from inside its event loop, ending the client)."""
        try:
            url = Url(self.url)  # type: ignore[no-untyped-call]  # proton's Url is not annotated
            url.defaults()  # type: ignore[no-untyped-call]
            socket.getaddrinfo(url.host, int(url.port), socket.AF_UNSPEC, socket.SOCK_STREAM)
        except (OSError, ValueError) as exc:
            self.last_failure = self._attempt_error = f"cannot resolve {self.url}: {exc}"
            self._schedule_reconnect("host name not resolved")
            return
        self._connect()

    @abc.abstractmethod
    def start(self) -> Self:
        """Run in a background thread."""

    def __enter__(self) -> Self:
        """``with Client(...) as client``: started on entry (unless it runs already)."""
        return self if self._thread is not None else self.start()

    def _schedule_reconnect(self, reason: str) -> None:
        """Count one failed attempt and connect again after the backoff's next delay.

        Each failed attempt is logged once, at info (``reconnecting``, with the transport's
        error when there was one): retrying is routine, and what gives up says why."""
        backoff = self._reconnect_backoff
        delay = backoff.next_delay(self._rng)
        assert delay is not None  # no max_attempts: it never gives up
        error, self._attempt_error = self._attempt_error, None
        self.log.info("reconnecting", reason=reason, error=error, attempt=backoff.attempts,
                      delay=round(delay, 3))
        self._reconnect_task = self._container.schedule(delay, Call(self._reconnect))

    def _cancel_reconnect(self) -> None:
        """Stopping: a reconnect still to come would only keep the container running."""
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()
            self._reconnect_task = None

    def on_transport_error(self, event: Any) -> None:
        """The transport failed (a connection refused or lost...): the reconnect that follows
        logs it (:meth:`on_disconnected`); proton's default would print it on every attempt."""
        self.log.debug("transport error", error=_failure(event.transport))

    def _accepted(self, link: Any) -> bool:
        """The peer answered the attach of ``link``, the client's main link: unless it detached
        it at once too (a refusal, whose detach proton reports next), the client is back and
        the next failure starts the backoff again from ``reconnect_delay``. True when back."""
        if attach_refused(link):
            return False
        backoff = self._reconnect_backoff
        if backoff.attempts:
            self.log.info("reconnected", attempt=backoff.attempts)
        backoff.reset()
        self.last_failure = None
        return True

    def _reconnect(self) -> None:
        self._reconnect_task = None
        if not self._stopping and self._conn is None:
            self._open()

    # --- the peer ends a link, its session or its connection ----------------------------

    @abc.abstractmethod
    def _main_links(self) -> dict[str, Any]:
        """The links of the current connection, by kind (``sender``, ``data``...; a link not
        made yet or forgotten is None): what the peer may end."""

    def on_disconnected(self, event: Any) -> None:
        """The connection is lost, or could not be made: reconnect."""
        conn = event.connection
        if not self._stopping and conn is not None and conn == self._conn:
            # not one given up on (torn down after a refused link: "connection aborted")
            self._attempt_error = _failure(event.transport)
            if self._attempt_error is not None:
                self.last_failure = self._attempt_error
        self._lost(conn, "disconnected")

    @abc.abstractmethod
    def _lost(self, conn: Any, reason: str) -> None:
        """``conn`` is lost: unless stopping or already given up on, forget it and schedule a
        reconnect (:meth:`_schedule_reconnect`)."""

    @abc.abstractmethod
    def _fail(self, error: AmqpAdapterError) -> None:
        """Stop for good: :attr:`error` says why; whatever waits on the client returns."""

    def on_link_error(self, event: Any) -> None:
        """The peer detached (or refused) a link with an error condition."""
        kind = self._kind_of(lambda link: link == event.link)
        self._ended(kind, event.link.remote_condition, "link", f"{kind} link detached")

    def on_link_closing(self, event: Any) -> None:
        """The peer detached a link without an error condition."""
        kind = self._kind_of(lambda link: link == event.link)
        self._ended(kind, None, "link", f"{kind} link detached")

    def on_session_error(self, event: Any) -> None:
        """The peer ended a session with an error condition (RabbitMQ's refusal of a link)."""
        kind = self._kind_of(lambda link: link.session == event.session)
        self._ended(kind, event.session.remote_condition, "session", f"{kind} session ended")

    def on_session_closing(self, event: Any) -> None:
        """The peer ended a session without an error condition."""
        kind = self._kind_of(lambda link: link.session == event.session)
        self._ended(kind, None, "session", f"{kind} session ended")

    def on_connection_error(self, event: Any) -> None:
        """The peer closed a connection with an error condition (``amqp:connection:forced``
        comes as a lost connection: proton's own rule)."""
        kind = "connection" if event.connection == self._conn else None
        self._ended(kind, event.connection.remote_condition, "connection",
                    "connection closed by the peer")

    def on_connection_closing(self, event: Any) -> None:
        """The peer closed a connection without an error condition."""
        kind = "connection" if event.connection == self._conn else None
        self._ended(kind, None, "connection", "connection closed by the peer")

    def _kind_of(self, matches: Callable[[Any], bool]) -> str | None:
        """The kind of the first current link ``matches``, None when none does."""
        for kind, link in self._main_links().items():
            if link is not None and matches(link):
                return kind
        return None

    def _ended(self, kind: str | None, cond: Any, endpoint: str, reason: str) -> None:
        """The peer ended a link of the client (``kind``), its session or its connection
        (``endpoint``) while the transport stays sound; proton's defaults would close the
        connection with no ``on_disconnected`` after it (nothing reconnects, nothing wakes
        what waits) or ignore it. A condition in :data:`FATAL_CONDITIONS` stops the client
        (:meth:`_fail`: :attr:`error` is a ``refusal_error`` whose message starts with the
        condition and whose ``got`` is the address); anything else is a lost connection: torn
        down and made again with the backoff."""
        if self._stopping or kind is None:
            return  # stopping (a close is no error), or an endpoint of a connection given up on
        name = cond.name if cond else None
        description = cond.description if cond else None
        if name in FATAL_CONDITIONS:
            self.log.error("link refused", link_kind=kind, endpoint=endpoint, condition=name,
                           description=description)
            text = f"{name}: {description or ''}"
            self._fail(hop_refusal(name, text, self.address)
                       or self.refusal_error(text, got=self.address))
            return
        self.log.warning("link detached by the peer; reconnecting", link_kind=kind,
                         endpoint=endpoint, condition=name, description=description)
        conn = self._conn
        transport = conn.transport if conn is not None else None
        self._lost(conn, reason)
        if transport is not None:
            # torn down: the peer sees the connection lost (a component keeps the link's
            # context for the resume), and its on_disconnected is for a connection given up on
            transport.close_tail()
            transport.close_head()
