"""One peer's bad input never ends an event loop that serves every peer.

Proton runs every handler inside :meth:`proton.reactor.Container.run`: an exception raised
while handling any event ends ``run()``, and with it the component (or the gateway) for every
connection. Handlers check what they read, but a peer controls more than messages: its
container id, link names, addresses and properties are strings it chose, and proton decodes
them from UTF-8 only when they are read (a byte that is not UTF-8 raises ``UnicodeDecodeError``
wherever that happens first). :class:`Guarded` is the last line: it dispatches each event to
the real handler and, should that raise, logs it with its traceback, counts it
(``event_failures``) and closes the connection the event came from, with
``amqp:decode-error`` for bytes that could not be decoded, ``amqp:internal-error`` otherwise.
The other connections are served on.
"""

from __future__ import annotations

from typing import Any

from proton import Condition, Endpoint

from seqrepair.logs import get_logger

log = get_logger(__name__)


IO_ONLY = frozenset({
    "on_selectable_init", "on_selectable_updated", "on_selectable_readable",
    "on_selectable_writable", "on_selectable_expired", "on_selectable_error",
    "on_selectable_final", "on_transport",
})
"""Events of sockets and transports that proton's I/O handler (the container's global
handler) acts on and no seqrepair handler does: not walked through the handler's tree (a
dispatch per child handler, for nothing: a few per message received or sent, tens of
microseconds each in proton's Python dispatch)."""


class SkipIO:
    """The root handler for ``Container(SkipIO(handler))``: every event but the I/O-only
    ones (:data:`IO_ONLY`) goes to ``handler`` and its child handlers, as proton dispatches
    them (the clients' runners: what they raise ends ``run()`` as before)."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def on_unhandled(self, method: str, event: Any) -> None:
        if method not in IO_ONLY:
            event.dispatch(self.handler)


class Guarded:
    """The root handler for ``Container(Guarded(handler))``: every event but the I/O-only
    ones (:data:`IO_ONLY`) goes to ``handler`` (and its child handlers, as proton dispatches
    them); what it raises ends the event's
    connection, not the container. ``stats`` (optional) counts ``event_failures``."""

    def __init__(self, handler: Any, stats: dict[str, int] | None = None) -> None:
        self.handler = handler
        self.stats = stats if stats is not None else {}

    def on_unhandled(self, method: str, event: Any) -> None:
        if method in IO_ONLY:
            return  # the I/O handler's alone (proton's global handler gets it next)
        try:
            event.dispatch(self.handler)
        except Exception as exc:
            self._contain(method, event, exc)

    def _contain(self, method: str, event: Any, exc: Exception) -> None:
        self.stats["event_failures"] = self.stats.get("event_failures", 0) + 1
        conn = getattr(event, "connection", None)
        log.error("event failed: its connection is closed, the others are served on",
                  proton_event=method, connection=getattr(conn, "seqrepair_id", None),
                  error=repr(exc)[:300], exc_info=exc)
        if conn is None or conn.state & Endpoint.LOCAL_CLOSED:
            return
        undecodable = isinstance(exc, UnicodeError)
        conn.condition = Condition(
            "amqp:decode-error" if undecodable else "amqp:internal-error",
            "a string the peer sent is not UTF-8" if undecodable
            else f"the peer's {method[3:].replace('_', ' ')} failed: {exc!r}"[:300],
        )
        conn.close()
        if conn.transport is not None:  # do not wait for the peer to answer the close
            conn.transport.close_tail()
