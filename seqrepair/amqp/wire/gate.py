"""The door on a listener (the component's, the gateway's): proton's connection events against
the count limits of :mod:`.admission`, and the closing of what they refuse.

:class:`Gate` is the thin adapter the component (:mod:`seqrepair.amqp.component.component`;
the gateway likewise, for connections only) calls from its proton
handlers: :meth:`Gate.bound` when a transport is accepted, :meth:`Gate.opening` and
:meth:`Gate.opened` when its peer's ``open`` arrives, :meth:`Gate.attach` / :meth:`Gate.detach`
for links, :meth:`Gate.forget` when a connection ends and :meth:`Gate.tick` on the component's
timer (the open deadline, and the sockets of closed connections).

Closing a connection the peer has not opened takes care: proton's server transport writes
nothing before it has read the peer's protocol header, and a client's SASL exchange comes
before any AMQP frame, so

* a connection past ``max_connections`` is told why in a ``close`` right after its ``open``
  (its SASL done), within a second of its accept, for :data:`REFUSALS_EXPLAINED` such
  connections at once; past them it is closed unread, before its descriptor is ever waited on;
* a connection past the open deadline gets the ``close`` when it sent the protocol header (the
  transport's condition, else proton would send its own framing error), and its socket is
  closed at the next tick whatever is still unsent.

Over TLS the input of a connection closed here stays open a moment (closing it at once ends the
TLS session with an alert the peer reads before the AMQP close): a transport not closed
:data:`LINGER` seconds after its output was has its input closed too, so a silent TLS peer (no
handshake, never an end of file) cannot keep its socket past the open deadline and the count
limits bound descriptors over TLS as over plain TCP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proton import Endpoint

from seqrepair.amqp.wire.admission import Admission, LimitExceededError
from seqrepair.amqp.wire.security import principal_of
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.component")

REFUSALS_EXPLAINED = 16
"""Connections past ``--max-connections`` held at once (a second at most) to be told why in an
AMQP close; past them a connection is closed unread: descriptors stay bounded."""
EXPLAIN_WITHIN = 1.0
"""Seconds a connection refused at its accept is held for its ``open`` (to be told why)."""
LINGER = 1.0
"""Seconds a transport closed here waits, its output closed, for its peer to read what was
sent and end its side, before its input is closed too and its socket goes."""


class Gate:
    """Admits or refuses connections and links for the component (see the module)."""

    def __init__(self, admission: Admission, clock: Callable[[], float]) -> None:
        self.admission = admission
        self.clock = clock
        self._closing: dict[Any, None] = {}  # transports closed here: sockets go next tick
        self._lingering: dict[Any, float] = {}  # output closed, input open: until when
        self._refusing: dict[Any, float] = {}  # refused at accept, to be told why: by when

    # --- connections ----------------------------------------------------------------------

    def bound(self, conn: Any) -> None:
        """A transport was accepted for ``conn``: held, or refused (see the module)."""
        now = self.clock()
        # closed here but not gone: their descriptors count, or a flood accepted one a pass
        # while a wave past the open deadline is closing would be held on top of that wave
        refusal = self.admission.accept(conn, now, self._not_gone())
        if refusal is None:
            return
        conn.refusal = refusal
        if len(self._refusing) < REFUSALS_EXPLAINED:
            self._refusing[conn] = now + EXPLAIN_WITHIN
        else:
            self.close(conn, refusal, "connection refused", unread=True)

    def opening(self, conn: Any) -> bool:
        """``conn``'s peer sent its ``open``: True when it is taken; False when it is refused
        (proton's handshaker opens it next, then :meth:`opened` closes it)."""
        if getattr(conn, "refusal", None) is not None:  # refused at its accept
            return False
        refusal = self.admission.open(conn, principal_of(conn))
        if refusal is None:
            return True
        conn.refusal = refusal
        return False

    def opened(self, conn: Any) -> None:
        """``conn`` is open both ways: close it now if it was refused."""
        refusal = getattr(conn, "refusal", None)
        if refusal is not None:
            self._refusing.pop(conn, None)
            self.close(conn, refusal, "connection refused")

    def room(self) -> int:
        """How many more connections to accept now: the admission's room less the sockets this
        gate closed that are not gone yet (a connection past the open deadline is forgotten at
        once, its descriptor held until a tick or two later: a listener taking the room it
        left at once would hold both)."""
        return max(0, self.admission.room() - self._not_gone())

    def _not_gone(self) -> int:
        """Sockets of connections closed here (forgotten by the admission) still open."""
        return len(self._closing) + len(self._lingering)

    def forget(self, conn: Any) -> None:
        """``conn`` ended (idempotent)."""
        self.admission.forget(conn)
        self._refusing.pop(conn, None)
        transport = conn.transport
        if transport is not None and transport.closed:  # its socket goes in this pass
            self._closing.pop(transport, None)
            self._lingering.pop(transport, None)

    def tick(self, now: float) -> None:
        """Close the sockets of connections closed since the last tick (the input too of those
        closed :data:`LINGER` ago and still not gone), the refused ones not opened in time and
        those past the open deadline."""
        for transport, until in list(self._lingering.items()):
            if transport.closed or until <= now:
                del self._lingering[transport]
                if not transport.closed:
                    transport.close_tail()  # a peer that never reads or ends its side
        closing, self._closing = self._closing, {}
        for transport in closing:
            if not transport.closed:
                transport.close_head()
                self._lingering[transport] = now + LINGER
        for conn, deadline in list(self._refusing.items()):
            if deadline <= now:
                del self._refusing[conn]
                self.close(conn, conn.refusal, "connection refused")
        timeout = self.admission.limits.open_timeout
        for conn in self.admission.expired(now):  # a silent peer never opens: no idle timeout
            self.admission.forget(conn)
            self.close(conn, LimitExceededError(
                f"no AMQP open within {timeout:g} s of the connection (--open-timeout)",
                expected=timeout), "open timed out")

    def close(self, conn: Any, error: LimitExceededError, why: str,
              unread: bool = False) -> None:
        """Close ``conn`` with ``error``'s condition without waiting for its peer (``unread``:
        at once, nothing written)."""
        log.warning(why, connection=getattr(conn, "seqrepair_id", None),
                    condition=error.condition, error=error.message)
        transport = conn.transport
        if conn.state & Endpoint.LOCAL_CLOSED or transport is None:
            # no transport: its socket is gone and there is nobody to tell; opening the
            # connection now would have proton bind it to a transport without a socket
            return
        conn.condition = error.amqp_condition()
        if conn.state & Endpoint.LOCAL_UNINIT:
            conn.open()  # an open then the close: a peer that reads them learns why
        conn.close()
        transport.condition = error.amqp_condition()
        if unread:
            transport.close_tail()
            transport.close_head()
            return
        # over TLS, closing the input now makes the TLS layer end the session with an alert
        # the peer reads before the AMQP close: it would learn "SSL failure", not why
        if not getattr(conn, "seqrepair_tls", False):
            transport.close_tail()
        self._closing[transport] = None

    # --- links ----------------------------------------------------------------------------

    def attach(self, link: Any, acting_for: str | None = None) -> LimitExceededError | None:
        """The peer attached ``link`` (acting for principal ``acting_for``, None: its
        connection's): None when it is held, else why it is refused."""
        return self.admission.attach(link.connection, link, acting_for)

    def detach(self, link: Any) -> None:
        """``link`` ended (idempotent)."""
        self.admission.detach(link.connection, link)
