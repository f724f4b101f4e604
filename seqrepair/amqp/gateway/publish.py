"""Publishing through a gateway: each publishing link is carried to the component, and its
deliveries are settled only with the component's outcome.

Nothing is acknowledged that no journal holds. A publisher attached to the gateway (a receiving
link of the gateway whose target is not ``$seqrepair``) gets a link of its own at the
component: same target (a topic, a pattern, or the anonymous target), named
``<gateway>.<link name>``, on an upstream connection of its own connection whose container id
is ``<gateway>.<container id>`` (the component numbers a plain publisher's publications under
its container id, so two plain publishers behind one gateway stay two sources). The
publisher's attach is answered once the component has answered the gateway's: with the
component's ``max-message-size``, or with its refusal (condition and description).

Each message crosses as the bytes that came (no decoding, no re-encoding), unsettled; the
publisher's delivery is settled when the component settles the relayed one, with its outcome:
accepted, rejected with the component's condition and info (``expected``/``got``), released or
modified. Credit crosses too: the publisher gets what the component grants the gateway, so
nothing queues at the gateway. A message past the link's ``max-message-size`` is refused as its
bytes arrive (:func:`~seqrepair.amqp.wire.sizelimit.refuse`), as the component would.

When either side of the pair ends, so does the other: the component's connection lost closes
the publisher's with ``amqp:connection:forced`` (deliveries in flight stay unsettled: the
publisher sends them again after reconnecting, as connected directly), and the publisher's
gone closes the upstream one.

On the gateway's requests link (``$seqrepair``), a link frame or an answer is refused
(:func:`refuse_non_request`) rather than forwarded as a request: only requests cross there,
each settled with the component's outcome as publications are (:mod:`.requests`).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from proton import Condition, Delivery, Endpoint, Message, ulong
from proton.handlers import IncomingMessageHandler

from seqrepair.amqp.gateway.relaylinks import LinkProperties, close_forced
from seqrepair.amqp.gateway.relays import upstream_name, upstream_properties
from seqrepair.amqp.wire.codec import NOT_REQUESTS
from seqrepair.amqp.wire.errors import (
    AmqpAdapterError,
    MalformedMessageError,
    UnknownMessageTypeError,
)
from seqrepair.amqp.wire.hops import read_path
from seqrepair.amqp.wire.rawamqp import proton_message
from seqrepair.amqp.wire.refusal import attach_refused, refuse_link
from seqrepair.amqp.wire.security import principal_of
from seqrepair.amqp.wire.sizelimit import refuse
from seqrepair.amqp.wire.technical import MESSAGE_TYPE
from seqrepair.amqp.wire.vocabulary import PROP_PATH, PROP_PATH_HOPS
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.gateway")

CONTROL_ADDRESS = "$seqrepair"
FORCED = "amqp:connection:forced"


def refuse_non_request(message: Message) -> AmqpAdapterError | None:
    """Why ``message``, sent to the gateway's requests address, is not forwarded (None: it is
    a request, or a type the component judges): a publication or an answer there is no
    request, refused here with the reason rather than forwarded as one."""
    props: Any = message.properties or {}
    kind = props.get(MESSAGE_TYPE) if isinstance(props, dict) else None
    if kind is None:
        return MalformedMessageError("message has no message-type application property")
    if str(kind) in {t.value for t in NOT_REQUESTS}:
        return UnknownMessageTypeError(
            f"{kind} is not a request: publications go to a topic address", got=str(kind)
        )
    return None


class CheckedIncoming(IncomingMessageHandler):
    """proton's incoming-message handler, except that bytes proton cannot read (or would
    raise on later, a string that is not UTF-8) are rejected ``amqp:decode-error`` on that
    delivery instead of raising out of the gateway's event loop, which would end the gateway
    for every peer. A downstream link's credit for it is given back."""

    def on_delivery(self, event: Any) -> None:
        dlv = event.delivery
        link = dlv.link
        if not link.is_receiver or dlv.aborted or not dlv.readable or dlv.partial:
            super().on_delivery(event)
            return
        data = link.recv(dlv.pending)
        link.advance()
        message = proton_message(data)
        if isinstance(message, str):
            log.warning("message rejected", link=link.name, condition="amqp:decode-error",
                        error=message)
            settle_with(dlv, MalformedMessageError(f"not a well-formed AMQP message: {message}"))
            if not getattr(link.connection, "seqrepair_upstream", False):
                link.flow(1)
            return
        event.message = message
        if link.state & Endpoint.LOCAL_CLOSED:
            return
        self.on_message(event)


def checked_incoming(handler: Any) -> None:
    """Make a :class:`~proton.handlers.MessagingHandler` (``auto_accept`` false) read with
    :class:`CheckedIncoming`."""
    handler.handlers = [
        CheckedIncoming(h.auto_accept, h.delegate) if type(h) is IncomingMessageHandler else h
        for h in handler.handlers
    ]


def settle_with(delivery: Any, error: AmqpAdapterError) -> None:
    """Reject ``delivery`` with ``error``'s condition (a pre-settled one is only freed)."""
    if not delivery.settled:
        delivery.local.condition = error.amqp_condition()
        delivery.update(Delivery.REJECTED)
    delivery.settle()


class PublishRelays:
    """The publishing links a :class:`~seqrepair.amqp.gateway.gateway.Gateway` carries upstream.

    The gateway calls :meth:`attach` for a publisher's link, :meth:`upstream_opened` and
    :meth:`link_closed` as links answer or end, :meth:`on_delivery` for every delivery event,
    :meth:`sendable` when an upstream link has credit and :meth:`connection_ended` for every
    connection that ends; each says whether the event was one of its own.
    """

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.stats = gateway.stats
        for key in ("published", "publish_outcomes", "publish_links"):
            self.stats.setdefault(key, 0)
        self._tags = itertools.count(1)
        self._pairs: dict[Any, Any] = {}  # downstream connection <-> its upstream connection
        # per client connection, its links held for the component's answer: since when
        self._held: dict[Any, dict[Any, float]] = {}

    def upstream_for(self, downstream: Any) -> Any:
        """The upstream connection of client connection ``downstream`` (made on first use:
        its publishing links and contributions links cross on it)."""
        conn = self._pairs.get(downstream)
        if conn is None:
            gw = self.gateway
            container_id = f"{gw.name}.{downstream.remote_container or 'anonymous'}"
            # authenticated as the gateway's own upstream connection is: the component's
            # policy sees the gateway; forwarding principals, each link names its client's
            # (an anonymous one's too: :func:`.relays.upstream_properties`), never the gateway
            security = gw.upstream_security
            conn = gw._container.connect(security.url(gw.upstream_url), reconnect=False,
                                         heartbeat=gw.idle_timeout, container_id=container_id,
                                         **security.connect_kwargs(gw.upstream_url))
            conn.seqrepair_upstream = True
            conn.seqrepair_publishing = downstream
            self._pairs[downstream] = conn
            self._pairs[conn] = downstream
        return conn

    def attach(self, link: Any) -> None:
        """A publisher's link: held until the component answers the one attached for it;
        refused at once when its ``seqrepair-path`` is (a loop, a chain too long, malformed:
        :mod:`seqrepair.amqp.wire.hops`), with no upstream connection or link made for it."""
        link.seqrepair_held = True
        address = link.remote_target.address
        link.target.address = address
        on_behalf_of = self.gateway._on_behalf_of(principal_of(link.connection))
        try:
            path, hops = self.gateway.hops.extend_route(link.remote_properties)
            barred = self.gateway.relays.refusal(read_path(link.remote_properties),
                                                 time.monotonic())
            if barred is not None:  # it would go round a loop (or too deep) again
                # a new one each time: the stored error's traceback would grow per raise
                raise type(barred)(barred.message, path=barred.path,
                                   expected=barred.expected, got=barred.got)
        except AmqpAdapterError as exc:
            self.gateway.hop_refused(link, exc)
            refuse_link(link, exc.amqp_condition())
            return
        properties = {**upstream_properties(None, on_behalf_of), PROP_PATH: list(path),
                      PROP_PATH_HOPS: ulong(hops)}
        sender = self.gateway._container.create_sender(
            self.upstream_for(link.connection), target=address,
            name=upstream_name(self.gateway.name, link.name),
            options=LinkProperties(properties),
        )
        sender.seqrepair_downstream = link
        sender.seqrepair_route = (path, hops)  # what a refusal for it bars (RelayTable.learn)
        link.seqrepair_upstream_link = sender
        self.hold(link)
        self.stats["publish_links"] += 1
        self.stats["upstream_attaches"] += 1
        self.gateway.log.info("attaching upstream", link=link.name, upstream=sender.name,
                              path=properties.get(PROP_PATH), kind="publish")

    def hold(self, link: Any) -> None:
        """Client link ``link`` (a publisher's, an owner's) waits for the component's answer
        to the link attached upstream for it: at most the hold timeout (:meth:`expire`)."""
        self._held.setdefault(link.connection, {})[link] = time.monotonic()

    def release(self, link: Any) -> None:
        """Client link ``link`` ended (its session ended, say, while it was held): it is held
        no more, and its connection is not closed for it at the hold timeout."""
        links = self._held.get(link.connection)
        if links is not None:
            links.pop(link, None)

    def expire(self, now: float, hold_timeout: float) -> None:
        """Client links held more than ``hold_timeout`` seconds (the component attached
        nothing for them, or a null terminus without its detach) end, their clients'
        connections closed so that they try again, as a held subscriber's are."""
        for conn, links in list(self._held.items()):
            if conn.state & Endpoint.LOCAL_CLOSED:
                del self._held[conn]  # its client is gone (or closed by the gateway)
                continue
            for link, since in list(links.items()):
                if not link.state & Endpoint.LOCAL_UNINIT:
                    del links[link]  # answered (or refused)
                elif now - since > hold_timeout:
                    del self._held[conn]
                    reason = f"the component did not answer within {hold_timeout:g} s; reconnect"
                    log.info("closing a client's connection", link=link.name, condition=FORCED,
                             reason=reason)
                    close_forced(conn, FORCED, reason)
                    break
            else:
                if not links:
                    del self._held[conn]

    def upstream_opened(self, sender: Any) -> bool:
        """The component answered an upstream publishing link: answer the publisher's."""
        down = getattr(sender, "seqrepair_downstream", None)
        if down is None:
            return False
        if sender.state & Endpoint.REMOTE_CLOSED:  # attached and detached at once: refused
            self._learn(sender)
            refuse_link(down, sender.remote_condition)
            return True
        if attach_refused(sender):  # a null target: its detach (link_closed) says why
            return True
        if down.state & Endpoint.LOCAL_UNINIT:
            down.max_message_size = sender.remote_max_message_size
            down.seqrepair_held = False
            down.open()
            log.info("publishing link relayed", link=down.name, address=down.target.address)
        self.sendable(sender)
        return True

    def link_closed(self, link: Any) -> bool:
        """A publishing link ended on one side: end the other with the same condition."""
        down = getattr(link, "seqrepair_downstream", None)
        if down is not None:
            self._learn(link)  # ended later for its path (a hop upstream learnt of a loop)
            refuse_link(down, link.remote_condition)  # proton copies it at the close
            return True
        up = getattr(link, "seqrepair_upstream_link", None)
        if up is not None:
            if not up.state & Endpoint.LOCAL_CLOSED:
                up.close()
            return True
        return False

    def _learn(self, sender: Any) -> None:
        """The component (or a hop upstream) refused or ended ``sender``: when for its path,
        what would go round again is barred (publishers' and contributors' links as
        subscribers' are), once per link."""
        cond = sender.remote_condition
        route = getattr(sender, "seqrepair_route", None)
        if cond is not None and route is not None:
            self.gateway._learn(route, (str(cond.name), str(cond.description or "")))
            sender.seqrepair_route = None

    def sendable(self, sender: Any) -> bool:
        """Give the publisher the credit the component gives the gateway, less what it has."""
        down = getattr(sender, "seqrepair_downstream", None)
        if down is None:
            return False
        if down.state & Endpoint.LOCAL_ACTIVE and not down.state & Endpoint.REMOTE_CLOSED:
            missing = sender.credit - sender.queued - down.credit
            if missing > 0:
                down.flow(missing)
        return True

    def on_delivery(self, event: Any) -> bool:
        """A publisher's message (relayed as it came) or the component's outcome of one."""
        dlv = event.delivery
        link = dlv.link
        if link.is_receiver:
            up = getattr(link, "seqrepair_upstream_link", None)
            if up is None:
                return False
            self._relay(dlv, link, up)
            return True
        down_dlv = getattr(dlv, "seqrepair_publisher_delivery", None)
        if getattr(link, "seqrepair_downstream", None) is None:
            return False
        if dlv.updated and dlv.remote_state in OUTCOMES:
            if down_dlv is not None and not down_dlv.settled:
                copy_outcome(dlv, down_dlv)
                self.stats["publish_outcomes"] += 1
            dlv.seqrepair_publisher_delivery = None  # settled by proton's handler (auto_settle)
        return True

    def _relay(self, dlv: Any, link: Any, up: Any) -> None:
        if dlv.aborted:  # proton's handler settles it
            return
        limit = link.max_message_size
        if limit and dlv.pending > limit:
            refuse(dlv, dlv.pending, limit)
            return
        if not dlv.readable or dlv.partial:
            return
        raw = link.recv(dlv.pending)
        link.advance()
        if not up.state & Endpoint.LOCAL_ACTIVE or up.state & Endpoint.REMOTE_CLOSED:
            # the component's link is gone (its detach crosses to the publisher): not taken
            if not dlv.settled:
                dlv.update(Delivery.RELEASED)
            dlv.settle()
            return
        self.gateway.contributions.contributed(link, raw, up.connection)
        out = up.delivery(str(next(self._tags)).encode())
        up.send(raw)
        up.advance()
        if dlv.settled:  # sent pre-settled: the publisher wants no outcome
            out.settle()
        else:
            out.seqrepair_publisher_delivery = dlv
        self.stats["published"] += 1

    def connection_ended(self, conn: Any) -> bool:
        """A connection of a pair ended: end the other (see the module's documentation).
        True when ``conn`` is an upstream publishing connection (nothing else to do)."""
        upstream = getattr(conn, "seqrepair_publishing", None) is not None
        self._held.pop(conn, None)  # a client's held links end with it
        other = self._pairs.pop(conn, None)
        if other is None:
            return upstream
        self._pairs.pop(other, None)
        if other.state & Endpoint.LOCAL_CLOSED:
            return upstream
        if upstream:
            log.warning("upstream publishing connection lost: closing the publisher's",
                     container=other.remote_container)
            close_forced(other, FORCED, "the component's connection was lost")
        else:
            other.close()
        return upstream


OUTCOMES = (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)
"""The terminal outcomes a relayed delivery's settlement is copied from."""


def has_outcome(delivery: Any) -> bool:
    """Whether the peer gave ``delivery`` its outcome (or settled it without one)."""
    return bool(delivery.remote_state in OUTCOMES or delivery.settled)  # settled: remotely


def copy_outcome(source: Any, target: Any) -> None:
    """Settle ``target`` with the outcome the peer gave ``source`` (its condition and info when
    rejected, its flags when modified; released when it gave none): the gateway settles the
    delivery it took with the outcome of the one it relayed, whichever way it crossed."""
    state = source.remote_state if source.remote_state in OUTCOMES else Delivery.RELEASED
    if state == Delivery.REJECTED:
        cond = source.remote.condition
        if cond is not None:
            target.local.condition = Condition(cond.name, cond.description, cond.info)
    elif state == Delivery.MODIFIED:
        target.local.failed = source.remote.failed
        target.local.undeliverable = source.remote.undeliverable
    target.update(state)
    target.settle()
