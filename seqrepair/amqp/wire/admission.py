"""How many connections and links the component holds, and which one more it refuses.

:class:`Admission` is the bookkeeping behind ``seqrepair serve``'s count limits (WIRE.md,
"Resource model"). It does no I/O and reads no clock (time comes in as ``now``): the
component (:mod:`seqrepair.amqp.component.component`; the gateway for connections) asks it
before it takes a connection or a link and tells it what ended; it answers with a
:class:`LimitExceededError` to refuse with, or None.

* ``max_connections``: transports held at once, counted from the moment one is accepted, before
  its peer sent a byte. Proton's Python reactor waits on ``select()``, which fails for every
  connection once the process holds a descriptor past 1023: the default leaves room below it.
* ``open_timeout``: a connection whose peer has not completed the AMQP open (the protocol
  header, SASL, the ``open`` frame) that many seconds after it was accepted is closed
  (:meth:`Admission.expired`). Before the open no idle timeout applies: a silent peer would
  otherwise hold its descriptor for ever.
* ``max_connections_per_principal``: connections of one principal
  (:func:`~seqrepair.amqp.wire.security.principal_of`: anonymous connections share one), checked
  when its ``open`` arrives.
* ``max_links_per_connection`` and ``max_links_per_principal``: links the peer attached and the
  component took (publishing, subscribing, ``$seqrepair``), counted until they detach. Links the
  component attaches itself (response targets, bounded on their own) are not counted. A link
  acting for another principal (``seqrepair-on-behalf-of``, honoured: a forwarding gateway's
  client) counts as that principal's, not the connection's: against the principal's
  ``max_links_per_principal`` and, on that connection, the principal's own
  ``max_links_per_connection``, so one client behind a forwarding gateway uses up its own
  allowance, never the gateway's or another client's. A connection acting for others holds at
  most :data:`FORWARDING_FACTOR` times the larger of the two limits in all, however many
  principals it acts for (the bound on a forwarding gateway's connection).

A refusal never touches what is already held: the connection or link refused is the one more.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.core.config import positive_int, positive_number


class LimitExceededError(AmqpAdapterError):
    """A connection or link past one of the component's count limits; ``expected`` is the
    limit, ``got`` the count it would have made."""

    condition = "amqp:resource-limit-exceeded"


MAX_CONNECTIONS = 800
"""Default ``--max-connections``: with the journal's, the REST API's (64 at most) and the
process's own descriptors, well below the 1024 ``select()`` can wait on."""
MAX_CONNECTIONS_PER_PRINCIPAL = 100
MAX_LINKS_PER_CONNECTION = 1_000
"""Default ``--max-links-per-connection``: a gateway carries all its subscribers' links over
one connection; a deployment with a busier gateway raises it."""
MAX_LINKS_PER_PRINCIPAL = 4_000
FORWARDING_FACTOR = 4
"""A connection acting for other principals holds at most this many times the larger of
``max_links_per_connection`` and ``max_links_per_principal`` links, all principals together."""
OPEN_TIMEOUT = 10.0
"""Default ``--open-timeout`` in seconds (RabbitMQ's handshake timeout is 10 s too)."""


@attrs.frozen
class CountLimits:
    """The count limits of a component (``seqrepair serve`` options of the same names)."""

    max_connections: int = attrs.field(default=MAX_CONNECTIONS, validator=positive_int)
    max_connections_per_principal: int = attrs.field(
        default=MAX_CONNECTIONS_PER_PRINCIPAL, validator=positive_int)
    max_links_per_connection: int = attrs.field(
        default=MAX_LINKS_PER_CONNECTION, validator=positive_int)
    max_links_per_principal: int = attrs.field(
        default=MAX_LINKS_PER_PRINCIPAL, validator=positive_int)
    open_timeout: float = attrs.field(default=OPEN_TIMEOUT, validator=positive_number)


@attrs.define
class _Connection:
    accepted_at: float
    principal: str | None = None  # set once its open arrived and was taken
    refused: bool = False  # its open was refused: closing, held until it ends
    links: dict[Any, str] = attrs.field(factory=dict)
    """The links held, each with the principal it counts for."""
    forwarded: Counter[str] = attrs.field(factory=Counter)
    """Links held per principal the connection acts for (not its own)."""


@attrs.define
class Admission:
    """Connections and links held, by connection and by principal, against ``limits``.

    Keys are the caller's: any hashable naming one connection (one link) while it lives.
    ``stats`` (shared with the component's stop counters) counts ``connections_refused``,
    ``links_refused``, ``opens_timed_out``, ``connections_peak`` and ``links_peak``.
    """

    limits: CountLimits = attrs.field(factory=CountLimits)
    stats: dict[str, int] = attrs.field(factory=dict)
    holder: str = "the component"
    """Who holds the connections, as refusals name it (a gateway's: "the gateway")."""
    _connections: dict[Any, _Connection] = attrs.field(factory=dict, init=False)
    _principal_connections: Counter[str] = attrs.field(factory=Counter, init=False)
    _principal_links: Counter[str] = attrs.field(factory=Counter, init=False)
    _links: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        for key in ("connections_refused", "links_refused", "opens_timed_out",
                    "connections_peak", "links_peak"):
            self.stats.setdefault(key, 0)

    # --- counts ---------------------------------------------------------------------------

    @property
    def connections(self) -> int:
        """Connections held (opened or not)."""
        return len(self._connections)

    @property
    def opening(self) -> int:
        """Connections held whose open has not been taken yet."""
        return sum(1 for c in self._connections.values() if c.principal is None and not c.refused)

    @property
    def links(self) -> int:
        """Links held, on every connection."""
        return self._links

    def links_of(self, conn: Any) -> int:
        """Links held on ``conn``."""
        held = self._connections.get(conn)
        return 0 if held is None else len(held.links)

    def connections_of(self, principal: str) -> int:
        """Opened connections of ``principal``."""
        return self._principal_connections[principal]

    def links_of_principal(self, principal: str) -> int:
        """Links held on the connections of ``principal``."""
        return self._principal_links[principal]

    # --- connections ----------------------------------------------------------------------

    def accept(self, conn: Any, now: float, closing: int = 0) -> LimitExceededError | None:
        """A transport was accepted: hold it (None) or say why not (it is not held).
        ``closing``: connections already forgotten here whose sockets are still open (closed
        by the caller, not gone yet); they count against ``max_connections`` as held ones do,
        so the descriptors held stay bounded by it."""
        if conn in self._connections:
            return None
        limit = self.limits.max_connections
        if len(self._connections) + closing >= limit:
            self.stats["connections_refused"] += 1
            of_them = f", {closing} of them closing" if closing else ""
            return LimitExceededError(
                f"{self.holder} holds {limit} connections{of_them} (--max-connections)",
                expected=limit, got=len(self._connections) + closing + 1)
        self._connections[conn] = _Connection(now)
        self.stats["connections_peak"] = max(self.stats["connections_peak"],
                                             len(self._connections))
        return None

    def room(self) -> int:
        """How many more connections :meth:`accept` would hold now, none closing."""
        return max(0, self.limits.max_connections - len(self._connections))

    def open(self, conn: Any, principal: str) -> LimitExceededError | None:
        """``conn``'s peer sent its open as ``principal``: take it (None) or say why not (the
        caller closes it; it stays held until :meth:`forget`)."""
        held = self._connections.get(conn)
        if held is None or held.principal is not None:
            return None
        if held.refused:  # asked again: still refused, counted once
            return LimitExceededError("this connection was refused at its open", got=principal)
        limit = self.limits.max_connections_per_principal
        count = self._principal_connections[principal]
        if count >= limit:
            held.refused = True
            self.stats["connections_refused"] += 1
            return LimitExceededError(
                f"principal {principal[:100]!r} holds {limit} connections "
                "(--max-connections-per-principal)", expected=limit, got=count + 1)
        held.principal = principal
        self._principal_connections[principal] += 1
        return None

    def expired(self, now: float) -> list[Any]:
        """The connections whose open has not been taken ``open_timeout`` seconds after they
        were accepted (counted in ``opens_timed_out``; the caller closes them and forgets them)."""
        late = now - self.limits.open_timeout
        out = [key for key, held in self._connections.items()
               if held.principal is None and not held.refused and held.accepted_at <= late]
        self.stats["opens_timed_out"] += len(out)
        return out

    def next_deadline(self) -> float | None:
        """When the first open deadline passes (None: no connection waits for its open)."""
        times = [held.accepted_at for held in self._connections.values()
                 if held.principal is None and not held.refused]
        return min(times) + self.limits.open_timeout if times else None

    def forget(self, conn: Any) -> None:
        """``conn`` ended: release it and its links (idempotent)."""
        held = self._connections.pop(conn, None)
        if held is None:
            return
        self._links -= len(held.links)
        if held.principal is not None:
            self._drop(self._principal_connections, held.principal, 1)
            for principal in held.links.values():
                self._drop(self._principal_links, principal, 1)

    # --- links ----------------------------------------------------------------------------

    def attach(self, conn: Any, link: Any, acting_for: str | None = None
               ) -> LimitExceededError | None:
        """``conn``'s peer attached ``link`` (``acting_for``: the principal it acts for, when
        the connection's may act for another; None: the connection's own): hold it (None) or
        say why not (not held)."""
        held = self._connections.get(conn)
        if held is not None and link in held.links:
            return None
        if held is None or held.principal is None:  # never taken, or its open was refused
            self.stats["links_refused"] += 1
            return LimitExceededError("this connection was not admitted", got=str(conn)[:100])
        principal = held.principal if acting_for is None else acting_for
        forwarded = principal != held.principal
        limit = self.limits.max_links_per_connection
        on_conn = held.forwarded[principal] if forwarded else (
            len(held.links) - sum(held.forwarded.values()))
        if on_conn >= limit:
            self.stats["links_refused"] += 1
            whose = f" for principal {principal[:100]!r}" if forwarded else ""
            return LimitExceededError(
                f"this connection holds {limit} links{whose} (--max-links-per-connection)",
                expected=limit, got=on_conn + 1)
        total = FORWARDING_FACTOR * max(self.limits.max_links_per_connection,
                                        self.limits.max_links_per_principal)
        if forwarded and len(held.links) >= total:
            self.stats["links_refused"] += 1
            return LimitExceededError(
                f"this connection holds {total} links for all the principals it acts for "
                f"({FORWARDING_FACTOR} x the larger of --max-links-per-connection and "
                "--max-links-per-principal)", expected=total, got=len(held.links) + 1)
        limit = self.limits.max_links_per_principal
        count = self._principal_links[principal]
        if count >= limit:
            self.stats["links_refused"] += 1
            return LimitExceededError(
                f"principal {principal[:100]!r} holds {limit} links "
                "(--max-links-per-principal)", expected=limit, got=count + 1)
        self._principal_links[principal] += 1
        if forwarded:
            held.forwarded[principal] += 1
        held.links[link] = principal
        self._links += 1
        self.stats["links_peak"] = max(self.stats["links_peak"], self._links)
        return None

    def detach(self, conn: Any, link: Any) -> None:
        """``link`` of ``conn`` ended: release it (idempotent; a link never held is ignored)."""
        held = self._connections.get(conn)
        if held is None or link not in held.links:
            return
        principal = held.links.pop(link)
        self._links -= 1
        if principal != held.principal:
            self._drop(held.forwarded, principal, 1)
        self._drop(self._principal_links, principal, 1)

    @staticmethod
    def _drop(counter: Counter[str], key: str, n: int) -> None:
        counter[key] -= n
        if counter[key] <= 0:
            del counter[key]
