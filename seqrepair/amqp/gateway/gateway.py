"""A transiting gateway between two address scopes, by message rewriting (respann §2.5).

Subscribers in one address scope attach to the gateway; the gateway attaches the same sources
upstream, at the component, under names of the component's scope (``<gateway>.<link name>``)
and relays the frames. A subscriber's request (GAP-REQUEST, SOURCE-GAP-REQUEST, CAPABILITIES)
names addresses of the subscriber's scope; the gateway forwards it rewritten, or with response
annotations when the component takes them, and routes the answers back (:mod:`.requests`); the
subscriber's delivery of it is settled with the component's outcome (a rejection heard as it
would be connected directly), or rejected ``amqp:internal-error`` when the component is lost
before it.

Attaches cross the gateway both ways. The upstream link is attached with the subscriber's link
properties (``seqrepair-epoch``, ``seqrepair-start-after``...: they name contexts and sources,
never a link, so they pass unchanged), and the subscriber's attach is answered only once the
component has answered, with the component's reply properties (the epoch it granted, the
subscription's start) or its refusal and error condition (``amqp:invalid-field``...). A
subscriber behind the gateway therefore resumes its link context, or learns of a new one, as it
would connected directly. A subscriber that detaches makes the gateway detach upstream (the
component keeps the context); a name is attached upstream again only once the component has
seen the previous link detached. Settlement and credit cross as well: the relayed link sends
as the component does (pre-settled), and the component gets on the upstream link the credit the
subscriber gives the gateway, so the gateway keeps no queue and a slow subscriber is paused by the
component as a direct one is.

When the connection to the component is lost, the gateway closes the connection of every
subscriber whose link had reached the component, with ``amqp:connection:forced``: each sees a
lost connection, as it would connected directly, and reconnects and re-attaches with its epoch.
The gateway reconnects with capped, jittered exponential backoff
(:class:`~seqrepair.amqp.wire.backoff.Backoff`) and holds new attaches until the component
answers (at most ``hold_timeout``, then their connections are closed the same way; a
publisher's or a contributions owner's attach too). Nothing is
lost: what did not reach a subscriber is repaired from the resumed context or, in a new one,
from the journal, as for any subscriber.

The requests link every subscriber's requests share upstream, when the component detaches it
while the connection stays up, is attached again after a short backoff; after
:data:`CONTROL_DETACHES` detaches in a row the connection is dropped and made again, as when it
is lost (its reconnect backoff not reset until the link holds).

Publishers attached to the gateway are carried to the component link by link, each delivery
settled only with the component's outcome (:mod:`.publish`).

The rewriting itself is pure (:mod:`.rewrite`: :func:`rewrite_request`,
:func:`restore_response`, :class:`ReplyTable`), so is the relay bookkeeping
(:class:`~seqrepair.amqp.gateway.relays.RelayTable`); :class:`Gateway` is the thin proton
adapter around them: the connections and the proton events, the relay table's actions done
on proton's links by :mod:`.relaylinks`.
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, cast

from proton import Connection, Endpoint
from proton.handlers import EndpointStateHandler, MessagingHandler
from proton.reactor import ApplicationEvent

from seqrepair.amqp.gateway.contrib import Contributions, is_owner_address
from seqrepair.amqp.gateway.publish import (
    PublishRelays,
    checked_incoming,
    refuse_non_request,
    settle_with,
)
from seqrepair.amqp.gateway.relaylinks import HoldingEndpoints, perform, top_up
from seqrepair.amqp.gateway.relays import (
    CloseDownstreamConnection,
    DetachDownstream,
    Relay,
    RelayState,
    RelayTable,
)
from seqrepair.amqp.gateway.requests import (
    MAX_AWAITED,
    MAX_AWAITED_PER_PRINCIPAL,
    Requests,
    UpstreamLostError,
)
from seqrepair.amqp.gateway.rewrite import RESPONSES_ADDRESS
from seqrepair.amqp.wire.admission import (
    MAX_CONNECTIONS,
    MAX_LINKS_PER_CONNECTION,
    MAX_LINKS_PER_PRINCIPAL,
    OPEN_TIMEOUT,
    Admission,
    CountLimits,
)
from seqrepair.amqp.wire.backoff import Backoff
from seqrepair.amqp.wire.errors import AmqpAdapterError, OversizedMessageError, RequestFloodError
from seqrepair.amqp.wire.gate import Gate
from seqrepair.amqp.wire.guard import Guarded
from seqrepair.amqp.wire.hops import (
    DEFAULT_MAX_HOPS,
    HOP_CONDITIONS,
    Hops,
    MalformedPathError,
    Route,
    check_max_hops,
    default_hop_id,
)
from seqrepair.amqp.wire.reactor import (
    Call,
    Injector,
    accept_in_batches,
    listening_address,
    make_container,
)
from seqrepair.amqp.wire.refusal import attach_refused, refuse_link
from seqrepair.amqp.wire.respann import RESPONSE_ANNOTATIONS
from seqrepair.amqp.wire.security import (
    NO_CLIENT_SECURITY,
    ClientSecurity,
    ServerSecurity,
    principal_of,
)
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.gateway")

CONTROL_ADDRESS = "$seqrepair"
PATH_REFUSALS = HOP_CONDITIONS | {MalformedPathError.condition}
"""The conditions of an attach the gateway refuses for its ``seqrepair-path``."""
TICK = 0.5
"""Seconds between two looks for subscribers held too long (``hold_timeout``)."""
STOP_GRACE = 1.0
"""Seconds :meth:`Gateway.stop` gives peers to answer its close before cutting them off."""
CONTROL_RETRY = 0.25
"""Seconds before the requests link the component detached is attached again (doubled at each
detach that follows closely; jittered down to half of it)."""
CONTROL_DETACHES = 4
"""Detaches of the requests link in a row (each within :data:`CONTROL_STABLE` seconds of its
attach) after which the gateway drops the upstream connection and makes it again."""
CONTROL_STABLE = 5.0
"""Seconds a requests link must have stayed attached for its detach to start a new count."""


# --------------------------------------------------------------------------------------------
# the proton adapter


def _upstream(endpoint: Any) -> bool:
    """Whether a link or connection belongs to the gateway's side at the component."""
    conn = endpoint if isinstance(endpoint, Connection) else endpoint.connection
    return bool(getattr(conn, "seqrepair_upstream", False))


def _condition(endpoint: Any) -> tuple[str, str] | None:
    cond = endpoint.remote_condition
    return None if cond is None else (str(cond.name), str(cond.description or ""))


class Gateway(MessagingHandler):
    """Relays subscriber links from ``listen`` (downstream scope) to the component at
    ``upstream`` and rewrites requests and their answers across the boundary.

    A subscriber's attach is answered once the component has answered the gateway's (with the
    component's link properties, or its refusal). When the connection to the component is lost
    the gateway closes the connections of the subscribers that were relayed through it
    (``amqp:connection:forced``) and connects again after ``backoff``'s delays; attaches that
    come meanwhile wait for it, at most ``hold_timeout`` seconds.

    Requests go upstream with response annotations when the component takes them and
    ``annotations`` is true, rewritten otherwise (:mod:`.requests`).

    :meth:`run` in this thread or :meth:`start` in a background one, :meth:`close` from any;
    :attr:`stats` counts rewritten requests and restored answers, annotated requests and answers
    routed by their cookie (``answers_held``: those whose credit waited for a slow subscriber),
    relayed messages and upstream connections; :attr:`error` says why
    the gateway gave up, when it did (then :attr:`stopped` is set, as after :meth:`close`).
    ``security``: how its listener authenticates subscribers (by default nobody can, and the
    constructor refuses; ``ANONYMOUS_LISTENER`` lets everyone in as ``anonymous``);
    ``upstream_security``: how it proves itself to the component (WIRE.md "Authentication").
    ``forward_principals``: attach and ask upstream on behalf of the principal each client
    proved (``seqrepair-on-behalf-of``; the component must grant the gateway ``act-for``), so
    the component's policy, ownership and link names apply to the client, not the gateway.
    ``hop_id``, ``max_hops``: its identity on the paths of the attaches it carries upstream
    (by default its name, listen address and a random tag) and the most hops an attach may
    cross (:mod:`seqrepair.amqp.wire.hops`: a loop of gateways, or a chain longer than that,
    is refused to the subscriber naming the path).
    ``max_connections``, ``open_timeout``: the component's door on its listener
    (:class:`~seqrepair.amqp.wire.gate.Gate`): client connections held at once, opened
    or not (one more is refused ``amqp:resource-limit-exceeded``), and the seconds a client
    has to complete its AMQP open; its own connections to the component are not counted.
    ``max_links_per_connection``, ``max_links_per_principal``: links (of every kind) one
    client connection, and the connections of one proven principal, hold attached here (one
    more is refused ``amqp:resource-limit-exceeded`` by the gateway itself): a gateway that
    does not forward principals is one principal upstream for all its clients, so these keep
    one client from using up that shared allowance.
    ``max_waiting_requests``, ``max_waiting_requests_per_principal``: client requests waiting
    for the component's outcome at most, in all and from the connections of one proven
    principal (one more is rejected ``amqp:resource-limit-exceeded``; :mod:`.requests`).
    """

    def __init__(
        self,
        listen: str,
        upstream: str,
        *,
        name: str = "gw",
        capacity: int = 10_000,
        on_ready: Callable[[str], None] | None = None,
        idle_timeout: float = 10.0,
        hold_timeout: float = 30.0,
        backoff: Backoff | None = None,
        seed: int | None = None,
        annotations: bool = True,
        security: ServerSecurity | None = None,
        upstream_security: ClientSecurity = NO_CLIENT_SECURITY,
        forward_principals: bool = False,
        hop_id: str | None = None,
        max_hops: int = DEFAULT_MAX_HOPS,
        max_connections: int = MAX_CONNECTIONS,
        open_timeout: float = OPEN_TIMEOUT,
        max_links_per_connection: int = MAX_LINKS_PER_CONNECTION,
        max_links_per_principal: int = MAX_LINKS_PER_PRINCIPAL,
        max_waiting_requests: int = MAX_AWAITED,
        max_waiting_requests_per_principal: int = MAX_AWAITED_PER_PRINCIPAL,
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.security = security if security is not None else ServerSecurity()
        # InvalidConfigError: a listener that would let in whom it must not
        self.security.check(listen, option="--listen")
        self.upstream_security = upstream_security
        self.forward_principals = forward_principals
        # MessagingHandler builds its handlers as a list; ours holds downstream attaches
        self.handlers = [
            HoldingEndpoints(False, weakref.proxy(self))
            if isinstance(h, EndpointStateHandler) else h
            for h in cast(list[Any], self.handlers)
        ]
        checked_incoming(self)  # bytes proton cannot read are refused, not raised
        self.listen_url = listen
        self.listening = listen  # host:port bound (the chosen port when listen names port 0)
        self.upstream_url = upstream
        self.name = name
        self.on_ready = on_ready
        self.idle_timeout = idle_timeout
        self.backoff = backoff or Backoff()
        self.hop_id = hop_id
        self.hops = Hops(hop_id or default_hop_id(name, listen),
                         check_max_hops(max_hops, option="max_hops"))
        self.relays = RelayTable(name, hold_timeout=hold_timeout, hops=self.hops)
        self.stats = {"rewritten": 0, "restored": 0, "annotated": 0, "routed": 0,
                      "answers_held": 0, "relayed": 0, "unroutable": 0,
                      "dropped_requests": 0, "upstream_connections": 0, "upstream_losses": 0,
                      "refused": 0, "upstream_attaches": 0, "hop_refusals": 0}
        # client connections and links against the count limits, as at the component; one
        # principal (anonymous, say) may hold every connection: its bound is max_connections
        self.admission = Admission(CountLimits(
            max_connections=max_connections, max_connections_per_principal=max_connections,
            max_links_per_connection=max_links_per_connection,
            max_links_per_principal=max_links_per_principal,
            open_timeout=open_timeout), self.stats, holder="the gateway")
        self.gate = Gate(self.admission, time.monotonic)
        # requests forwarded upstream, answers routed back
        self.requests = Requests(self, capacity, annotations, max_awaited=max_waiting_requests,
                                 max_awaited_per_principal=max_waiting_requests_per_principal)
        self.replies = self.requests.replies
        self.publishing = PublishRelays(self)  # publishers' links, carried to the component
        self.contributions = Contributions(self)  # owners' links, contributors' answers
        self.error: str | None = None
        self.ready = threading.Event()
        self.stopped = threading.Event()
        """Set when the gateway has stopped (closed, or given up: see :attr:`error`)."""
        self.log = log.bind(gateway=name, upstream=upstream)
        self._rng = random.Random(seed)
        self._container: Any = None
        self._acceptor: Any = None
        self._upstream: Any = None
        self._downstream: list[Any] = []  # the subscribers' connections
        self._tasks: dict[str, Any] = {}
        self._stopping = False
        self._stop_requested = False
        self._injector = Injector()
        self._thread: threading.Thread | None = None
        # its attempts: the detaches of the requests link in a row; delays CONTROL_RETRY
        # doubling, each drawn from half of it to all of it
        self._control_backoff = Backoff(initial=CONTROL_RETRY / 2,
                                        maximum=CONTROL_RETRY * 2 ** CONTROL_DETACHES,
                                        jitter=1.0)
        self._control_since = 0.0  # when it was last attached

    # --- running ------------------------------------------------------------------------

    def run(self) -> None:
        """Run the gateway in this thread until :meth:`close` (or until it gives up)."""
        container = make_container(Guarded(self, self.stats))  # a bad peer ends its own connection
        container.selectable(self._injector)
        try:
            container.run()
        finally:
            self._injector.release()
            self.stopped.set()

    def start(self) -> Gateway:
        """Run the gateway in a background thread."""
        self._thread = threading.Thread(target=self.run, name="gateway", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the gateway (safe from any thread)."""
        self._injector.trigger(ApplicationEvent("seqrepair_stop"))
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    def request_stop(self) -> None:
        """Stop at the next tick (at most ``TICK`` seconds away). Safe from a signal handler:
        it only sets a flag."""
        self._stop_requested = True

    def on_seqrepair_stop(self, event: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Close the listener and every connection (from the container's thread); peers that
        have not answered the close within ``STOP_GRACE`` seconds are cut off."""
        if self._stopping and "abort" in self._tasks:
            return
        self._stopping = True
        for task in self._tasks.values():
            task.cancel()
        if self._acceptor is not None:
            self._acceptor.close()
        for conn in self._connections():
            conn.close()
        self._injector.close()
        self._schedule("abort", STOP_GRACE, self._abort)

    def _connections(self) -> list[Any]:
        return [*self._downstream, *([] if self._upstream is None else [self._upstream])]

    def _abort(self) -> None:
        for conn in self._connections():
            transport = conn.transport
            if transport is not None:
                transport.close_tail()
                transport.close_head()
        self._container.stop()

    def on_start(self, event: Any) -> None:
        self._container = event.container
        self.security.prepare()
        try:
            self._acceptor = event.container.listen(self.listen_url,
                                                    ssl_domain=self.security.ssl_domain())
        except OSError as exc:  # its address taken, or not this host's: nothing to relay
            self.error = f"cannot listen on {self.listen_url}: {exc.strerror or exc}"
            self.log.error("cannot listen", listen=self.listen_url, error=str(exc))
            event.container.stop()
            return
        # a burst of connects is taken at once, as many as may be held, not left waiting; a
        # failed accept (out of descriptors) pauses the listener, never ends the loop
        accept_in_batches(self._acceptor, room=self.gate.room, stats=self.stats, log=self.log)
        self.listening = listening_address(self._acceptor, self.listen_url)
        if self.hop_id is None:  # the address bound (a port 0 chosen) says more
            self.hops = self.relays.hops = Hops(default_hop_id(self.name, self.listening),
                                                self.hops.max_hops)
        self._connect()
        self._schedule("tick", TICK, self._tick)
        self.log.info("gateway listening", listen=self.listening, hop_id=self.hops.identity,
                      max_hops=self.hops.max_hops)
        self.ready.set()
        if self.on_ready is not None:
            self.on_ready(self.listening)

    def _schedule(self, what: str, delay: float, fn: Callable[[], None]) -> None:
        self._tasks[what] = self._container.schedule(delay, Call(fn))

    def _tick(self) -> None:
        if self._stopping:
            return
        if self._stop_requested:
            self.stop()
            return
        now = time.monotonic()
        self.gate.tick(now)  # the open deadline; sockets of connections closed by the gate
        perform(self, self.relays.expire(now))
        self.publishing.expire(now, self.relays.hold_timeout)
        self.requests.repay_gone()
        if (self._control_backoff.attempts and self.requests.control is not None
                and now - self._control_since > CONTROL_STABLE):
            self._control_backoff.reset()  # the requests link holds again
            self.backoff.reset()
        self._schedule("tick", TICK, self._tick)

    # --- the upstream connection ----------------------------------------------------------

    def _connect(self) -> None:
        conn = self._container.connect(self.upstream_security.url(self.upstream_url),
                                       reconnect=False, heartbeat=self.idle_timeout,
                                       desired_capabilities=[str(RESPONSE_ANNOTATIONS)],
                                       **self.upstream_security.connect_kwargs(self.upstream_url))
        conn.seqrepair_upstream = True
        self._upstream = conn
        self._attach_control()

    def _attach_control(self) -> None:
        """Attach the requests link every client's requests share on the upstream
        connection (again, when the component detached it)."""
        conn = self._upstream
        if self._stopping or conn is None or self.requests.control is not None:
            return
        # unsettled: each request's outcome is the component's, copied to its client's
        control = self._container.create_sender(conn, CONTROL_ADDRESS)
        control.seqrepair_requests = True
        self.requests.control = control
        self._control_since = time.monotonic()

    def _control_detached(self, link: Any) -> None:
        """The component detached the requests link (its waiting requests already rejected,
        temporary): attach it again after a short backoff; after :data:`CONTROL_DETACHES`
        in a row, drop the upstream connection and make it again, as when it is lost."""
        conn = self._upstream
        if self._stopping or conn is None or link.connection != conn or (
                self.requests.control is not None):
            return  # an earlier connection's, or the gateway's own close
        if conn.state & (Endpoint.LOCAL_CLOSED | Endpoint.REMOTE_CLOSED):
            return  # the connection ends: _upstream_lost does the rest
        backoff = self._control_backoff
        if time.monotonic() - self._control_since > CONTROL_STABLE:
            backoff.reset()
        delay = backoff.next_delay(self._rng)  # one detach more in a row
        assert delay is not None  # no max_attempts: never None
        cond = _condition(link)
        self.stats["control_detaches"] = self.stats.get("control_detaches", 0) + 1
        self.log.warning("requests link detached upstream",
                         condition=cond[0] if cond else None,
                         description=cond[1] if cond else None,
                         in_a_row=backoff.attempts)
        if backoff.attempts >= CONTROL_DETACHES:
            why = f"the requests link detached {backoff.attempts} times in a row"
            conn.close()
            self._upstream_lost(conn, why)
            return
        self._schedule("control", delay, self._attach_control)

    def _reconnect(self) -> None:
        if not self._stopping and self._upstream is None:
            self._connect()

    def _upstream_lost(self, conn: Any, why: str) -> None:
        if conn != self._upstream or self._stopping:
            return  # an earlier connection, already given up; or the gateway closing it
        was_open = self.relays.upstream_ready
        self._upstream = None
        self.requests.upstream_lost()
        actions = self.relays.upstream_down()
        if was_open:
            self.stats["upstream_losses"] += 1
            self.log.warning("upstream connection lost", reason=why,
                             subscribers=sum(isinstance(a, CloseDownstreamConnection)
                                             for a in actions))
        perform(self, actions)
        if self._stopping:
            return
        delay = self.backoff.next_delay(self._rng)
        if delay is None:
            self.error = (f"gave up reaching the component at {self.upstream_url} after "
                          f"{self.backoff.attempts} attempts ({why})")
            self.log.error("upstream unreachable; gateway stops", attempts=self.backoff.attempts)
            self.stop()
            return
        self.log.info("reconnecting upstream", delay=round(delay, 3),
                      attempt=self.backoff.attempts, reason=why)
        self._schedule("reconnect", delay, self._reconnect)

    def on_connection_bound(self, event: Any) -> None:
        conn = event.connection
        if not _upstream(conn):  # a client's (the gateway's own to the component are not)
            event.transport.idle_timeout = self.idle_timeout
            self.security.configure(event.transport)
            conn.seqrepair_tls = self.security.tls  # see Gate.close
            self.gate.bound(conn)  # counted, or refused (seqrepair/amqp/wire/gate.py)

    def on_connection_opening(self, event: Any) -> None:
        if self.gate.opening(event.connection):  # else closed once proton has opened it
            self._downstream.append(event.connection)

    def on_connection_opened(self, event: Any) -> None:
        conn = event.connection
        if not _upstream(conn):
            self.gate.opened(conn)  # closed now if it was refused
            return
        if conn != self._upstream:
            return
        if not self._control_backoff.attempts:  # else its backoff goes on until the link holds
            self.backoff.reset()
        self.stats["upstream_connections"] += 1
        self.log.info("upstream connected", connections=self.stats["upstream_connections"],
                      waiting=len(self.relays))
        perform(self, self.relays.upstream_up())

    def on_transport_error(self, event: Any) -> None:
        if event.connection is not None and getattr(event.connection, "seqrepair_forced", False):
            return  # a subscriber's connection the gateway closed itself
        cond = event.transport.condition
        self.log.info("transport error", condition=cond.name if cond else None,
                      description=cond.description if cond else None,
                      upstream=event.connection is not None and _upstream(event.connection))

    def on_transport_closed(self, event: Any) -> None:
        self._ended(event.connection, "transport closed")

    def on_disconnected(self, event: Any) -> None:
        self._ended(event.connection, "disconnected")

    def on_connection_closing(self, event: Any) -> None:
        self._ended(event.connection, "closed by the peer")

    def on_connection_error(self, event: Any) -> None:
        cond = event.connection.remote_condition
        self._ended(event.connection, f"closed by the peer: {cond.name if cond else '?'}")

    def on_connection_closed(self, event: Any) -> None:
        self._ended(event.connection, "closed")

    def _ended(self, conn: Any, why: str) -> None:
        """A connection ended, whichever way: the component's, or a subscriber's."""
        if conn is None:
            return
        if not _upstream(conn):
            self.gate.forget(conn)  # its place is free again
        if self.publishing.connection_ended(conn):
            return
        if _upstream(conn):
            self._upstream_lost(conn, why)
            return
        if conn in self._downstream:
            self._downstream.remove(conn)
        for relay in self.relays:
            if relay.downstream.connection == conn:
                perform(self, self.relays.downstream_detached(relay))

    # --- attaching ----------------------------------------------------------------------

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if _upstream(link):
            if link.is_receiver and link.remote_target.address == RESPONSES_ADDRESS:
                # the component attaches it to answer annotated requests (respann §2.3)
                link.target.address = RESPONSES_ADDRESS
                self.requests.responses_attached(link)
            return
        limited = self.gate.attach(link)  # a client's link, of any kind, against its counts
        if limited is not None:
            self.log.warning("link refused", link=link.name, condition=limited.condition,
                             error=limited.message)
            refuse_link(link, limited.amqp_condition())
            return
        if link.is_sender and is_owner_address(link.remote_source.address):
            self.contributions.attach_owner(link)  # an owner's: unsettled, both ways
        elif link.is_sender:  # a subscriber's data link: held until the component answers
            link.seqrepair_held = True
            address = link.remote_source.address
            link.source.address = address
            principal = principal_of(link.connection)
            relay, actions = self.relays.attach(
                link.name, address, link.remote_properties, link, time.monotonic(),
                principal=principal, on_behalf_of=self._on_behalf_of(principal))
            link.seqrepair_relay = relay
            refusal = actions[0] if actions and not self.relays.is_current(relay) else None
            if isinstance(refusal, DetachDownstream) and refusal.condition in PATH_REFUSALS:
                self.hop_refused(link, refusal)  # refused for its path: never went upstream
            perform(self, actions)
        elif link.remote_target.address != CONTROL_ADDRESS:  # a publisher's
            self.publishing.attach(link)
        else:  # the requests link
            link.target.address = link.remote_target.address
            link.flow(64)

    def _on_behalf_of(self, principal: str) -> str | None:
        """The principal to name upstream for a client that proved ``principal``: itself
        when the gateway forwards principals, else None (the component sees the gateway)."""
        return principal if self.forward_principals else None

    def hop_refused(self, link: Any, refusal: Any) -> None:
        """An attach refused for its ``seqrepair-path`` (a loop, a chain too long, malformed):
        counted and logged, once per attach (nothing retries it). ``refusal``: the
        :class:`~.relays.DetachDownstream` or the error."""
        self.stats["hop_refusals"] += 1
        self.log.warning("attach refused for its path", link=link.name,
                         condition=refusal.condition,
                         description=getattr(refusal, "description", None) or str(refusal))

    def _learn(self, relay: Relay | Route, refused: tuple[str, str]) -> None:
        """The upstream refused ``relay`` (or an attach sent with that route: a publisher's)
        with ``refused`` (condition, description): for its path, what would go round again is
        barred for a while (:meth:`~.relays.RelayTable.learn_route`), reported."""
        now = time.monotonic()
        barred = (self.relays.learn(relay, *refused, now) if isinstance(relay, Relay)
                  else self.relays.learn_route(relay, *refused, now))
        if barred is not None:
            self.stats["loops_barred"] = self.stats.get("loops_barred", 0) + 1
            bars = self.relays.bars
            until = max([bars.cut_until, *(u for _e, u in bars.barred.values()),
                         *(u for _e, u in bars.barred_paths.values())])
            self.log.error("a loop runs through this gateway: every attach is refused at "
                           "once for a while, then tried again" if barred.startswith("every")
                           else "attach refused upstream for its path: attaches that would go "
                           "round again are refused at once for a while", condition=refused[0],
                           description=refused[1], refusing=barred,
                           seconds=round(until - now, 1))

    def on_link_opened(self, event: Any) -> None:
        link = event.link
        if self.contributions.upstream_opened(link):
            return
        if self.publishing.upstream_opened(link):
            return
        if self.requests.control_opened(link):
            return
        relay: Relay | None = getattr(link, "seqrepair_relay", None)
        if relay is None or not _upstream(link):
            return
        if link.state & Endpoint.REMOTE_CLOSED:  # attached and detached at once: refused
            self._refused_upstream(relay, link)
        elif not attach_refused(link):
            perform(self, self.relays.upstream_attached(relay, link.remote_properties))
        # else a null source: the detach that follows says why (on_link_closed)

    def _refused_upstream(self, relay: Relay, link: Any) -> None:
        """The component refused ``relay``'s upstream attach (``link``): its subscriber's
        attach is refused with the component's condition, and what it says of a path learnt."""
        refused = _condition(link) or ("amqp:link:detach-forced", "refused upstream")
        self.stats["refused"] += 1
        self.log.info("attach refused upstream", link=relay.name, condition=refused[0],
                      description=refused[1])
        self._learn(relay, refused)
        perform(self, self.relays.upstream_attached(relay, link.remote_properties, refused))

    def on_link_error(self, event: Any) -> None:
        link = event.link
        cond = _condition(link)
        self.log.info("link detached with an error", link=link.name, upstream=_upstream(link),
                      condition=cond[0] if cond else None)
        if link.state & Endpoint.LOCAL_CLOSED:
            # an answer, with an error, to a detach of ours: proton reports no "closed"
            self.on_link_closed(event)

    def on_session_closing(self, event: Any) -> None:
        self._session_ended(event.session)

    def on_session_error(self, event: Any) -> None:
        self._session_ended(event.session)
        super().on_session_error(event)  # proton's: the client's connection is closed, as before

    def _session_ended(self, session: Any) -> None:
        """A client ended a session with links still attached: they end with it, and proton
        says nothing of them; each goes as if its client had detached it."""
        conn = session.connection
        if _upstream(conn):
            return
        # only the links the client still holds (an ended session's are): proton keeps every
        # link a connection ever had, and a walk over all of them in Python per ended session
        # would let a client that attaches and detaches without end stall the loop
        link = conn.link_head(Endpoint.REMOTE_ACTIVE)
        while link is not None:
            following = link.next(Endpoint.REMOTE_ACTIVE)
            if link.session == session:
                self._link_ended(link)
            link = following

    def on_link_closed(self, event: Any) -> None:
        link = event.link
        if not _upstream(link):
            self._link_ended(link)
            return
        if self.requests.control_closed(link):
            self._control_detached(link)
            return
        if self.contributions.link_closed(link):
            return
        if self.publishing.link_closed(link):
            return
        relay: Relay | None = getattr(link, "seqrepair_relay", None)
        if relay is None:
            return
        if relay.state is RelayState.ATTACHING and self.relays.is_current(relay):
            self._refused_upstream(relay, link)  # attached with a null source, then this
        condition = _condition(link)
        if condition is not None and relay.state is RelayState.OPEN:  # ended for its path?
            self._learn(relay, condition)
        perform(self, self.relays.upstream_detached(relay, condition))

    def _link_ended(self, link: Any) -> None:
        """A client's link ended (detached, or its session ended; once): its place given
        back, what the gateway carries for it ended."""
        if getattr(link, "seqrepair_ended", False):
            return
        link.seqrepair_ended = True
        self.gate.detach(link)
        self.publishing.release(link)  # held for the component's answer: no longer
        if self.contributions.link_closed(link) or self.publishing.link_closed(link):
            return
        relay: Relay | None = getattr(link, "seqrepair_relay", None)
        if relay is not None:
            perform(self, self.relays.downstream_detached(relay))

    # --- messages -----------------------------------------------------------------------

    def on_message(self, event: Any) -> None:
        receiver = event.receiver
        if _upstream(receiver) and self.contributions.message(event):
            return
        if _upstream(receiver):
            self.requests.from_upstream(receiver, event.message)
            delivery = event.delivery
            if delivery.settled:  # sent pre-settled (the component's frames): only free it
                delivery.settle()
            else:
                self.accept(delivery)
            relay = getattr(receiver, "seqrepair_relay", None)
            if relay is not None and self.relays.is_current(relay):
                top_up(relay)
        else:
            waits = False
            try:
                refused = (refuse_non_request(event.message)
                           or self.requests.foreign_link(event.message, receiver.connection))
                if refused is None:
                    waits = self.requests.forward(event.message, self._on_behalf_of(
                        principal_of(receiver.connection)), event.delivery)
                    if not waits:
                        self.accept(event.delivery)
            # the component out of reach, too many waiting (both asked again, with backoff),
            # too large for the component (its sender's alone): no hop refusals
            except (UpstreamLostError, RequestFloodError, OversizedMessageError) as exc:
                refused = exc
            except AmqpAdapterError as exc:  # past the hop limit, a malformed hop count
                refused = exc
                self.stats["hop_refusals"] += 1
                self.log.warning("request refused for its hop count", link=receiver.name,
                                 condition=exc.condition, description=exc.message)
            except Exception as exc:  # one peer's message must not end the gateway for all
                self.log.exception("request failed", link=receiver.name)
                refused = AmqpAdapterError(f"internal error: {exc!r}")
            if refused is not None:
                settle_with(event.delivery, refused)
            if not waits:  # else given back with the component's outcome (requests.outcome)
                receiver.flow(1)

    def on_delivery(self, event: Any) -> None:
        if self.requests.outcome(event.delivery):  # the component's outcome of a request
            return
        if self.contributions.outcome(event):  # an owner's outcome of a contribution
            return
        self.publishing.on_delivery(event)  # publishers' messages and their outcomes

    def on_sendable(self, event: Any) -> None:
        if self.contributions.sendable(event.sender):
            return
        if self.publishing.sendable(event.sender):
            return
        relay: Relay | None = getattr(event.sender, "seqrepair_relay", None)
        if relay is not None and not _upstream(event.sender) and self.relays.is_current(relay):
            top_up(relay)
            if self.requests.owes(relay.name):
                self.requests.repay(relay, relay.name)
