"""Requests and their answers across the gateway (respann §2.1, §2.3, §2.5).

A subscriber's request (GAP-REQUEST, SOURCE-GAP-REQUEST, CAPABILITIES) names addresses of the
subscriber's scope: its ``reply-to`` (``$link/NAME``) and its ``link`` property mean nothing at
the component. When the component does not take response annotations, the gateway forwards a
*new* message: the same bare message except a distinct ``message-id`` and the response
addresses rewritten to the upstream link (:func:`.rewrite.rewrite_request`). Answers come back
on that upstream link with the new id as ``correlation-id``; the gateway applies the inverse
(:func:`.rewrite.restore_response`): the original ``message-id`` as ``correlation-id``,
delivered to the original ``reply-to``. This is what a transiting container does when the next
hop does not take response annotations (respann §2.1, §3 item 3).

When the component does take them (its connection offers ``RESPONSE_ANNOTATIONS_V1_0`` and its
control link ``response-address-supported``), the gateway forwards with annotations instead
(§2.3, §3 item 2; :func:`.rewrite.annotate_request`): the request keeps its ``message-id``, only
its ``link`` property names the upstream link, and it carries ``response-link-target-address``
(:data:`.rewrite.RESPONSES_ADDRESS`, a link the component attaches to the gateway) and
``response-address-cookie`` (the subscriber's link name). The answers come back on that link
with the cookie as ``address-cookie`` and the original id as ``correlation-id``: the gateway
routes them by the cookie (:func:`.rewrite.answer_route`) and keeps no table of requests. They
share that one link (:data:`RESPONSE_WINDOW` credit): the credit an answer used is given back
at once while its subscriber has fewer than that many messages waiting at the gateway, and
otherwise only once it has taken them, so at most twice the window waits for one subscriber: a
slow subscriber slows answers, never grows the gateway's memory. ``Gateway(annotations=False)``
(``seqrepair gateway --rewrite``) always rewrites.

An ACK crosses renamed like a request; no answer comes, nothing is remembered.

**Outcomes.** The gateway does not accept a request as it forwards it: it sends it upstream
unsettled and settles the client's delivery with the component's outcome (accepted, or
rejected with the component's condition, description and info, copied:
:func:`.publish.copy_outcome`, as publishers' deliveries are), so a subscriber behind the
gateway hears a rejected request (the replay room, its request allowance, its journal out of
reach) as it would connected directly, and its stub asks again or gives it up. What cannot
reach the component is rejected ``amqp:internal-error`` (:class:`UpstreamLostError`, a
condition the stub takes as temporary): the component out of reach when it comes, or its
connection (or the requests link) lost before the outcome, never left unsettled. A request
sent pre-settled is forwarded pre-settled (nothing to copy). The client's delivery waits in a
table bounded by credit and three counts: the client's requests link gets back the credit of
a request only with its outcome (at most its window waiting per link); past
:data:`MAX_AWAITED_PER_CONNECTION` from one client connection (which may attach any number of
links), past ``max_awaited_per_principal`` (:data:`MAX_AWAITED_PER_PRINCIPAL`) from the
connections of one proven principal (which may open any number of them), or past
``max_awaited`` (:data:`MAX_AWAITED`) in all, a request is rejected
``amqp:resource-limit-exceeded`` (:class:`RequestFloodError`), asked again with backoff: one
client, or one principal however many connections it opens, filling the table refuses its own
requests, not every other principal's. The principal is the one the client's connection
authenticated as (:func:`~seqrepair.amqp.wire.security.principal_of`), never anything a
message claims; anonymous connections are one principal, ``anonymous``, as at the component's
door (``--max-connections-per-principal``), RabbitMQ's per-user limits (``guest`` is one user)
and NATS's account limits (clients without credentials share one account): an operator who
lets anonymous peers in grants them one allowance together, and a bound they could escape by
opening one more connection would bound nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import attrs
from proton import Endpoint, Message, symbol, ulong

from seqrepair.amqp.gateway.publish import copy_outcome, has_outcome, settle_with
from seqrepair.amqp.gateway.relays import Relay, RelayState, upstream_name
from seqrepair.amqp.gateway.rewrite import (
    Addressing,
    ReplyTable,
    annotate_request,
    answer_route,
    downstream_link,
    restore_response,
    rewrite_request,
)
from seqrepair.amqp.wire.errors import (
    AmqpAdapterError,
    OversizedMessageError,
    RequestFloodError,
    UnknownAddressError,
)
from seqrepair.amqp.wire.hops import HOPS_PROPERTY, count_hop
from seqrepair.amqp.wire.respann import RESPONSE_ADDRESS_SUPPORTED, RESPONSE_ANNOTATIONS
from seqrepair.amqp.wire.security import principal_of
from seqrepair.amqp.wire.technical import MessageType
from seqrepair.amqp.wire.vocabulary import (
    LINK_PREFIX,
    PROP_ON_BEHALF_OF,
    is_ack,
    says_type,
)
from seqrepair.core.errors import InvalidConfigError

RESPONSE_WINDOW = 64
"""Credit on the responses link, and how many messages waiting for one subscriber make the
gateway hold back the credit of its answers."""
PROP_LINK = "link"
MAX_AWAITED = 4096
"""Default ``max_awaited`` (``seqrepair gateway --max-waiting-requests``): client requests
waiting at most, in all, for the component's outcome."""
MAX_AWAITED_PER_CONNECTION = 256
"""Client requests waiting at most from one client connection: four requests links' credit."""
MAX_AWAITED_PER_PRINCIPAL = 1024
"""Default ``max_awaited_per_principal`` (``seqrepair gateway
--max-waiting-requests-per-principal``): client requests waiting at most from the connections
of one principal, a quarter of :data:`MAX_AWAITED`."""


class UpstreamLostError(AmqpAdapterError):
    """A request the gateway could not hand to the component, or whose outcome it will never
    get (the component's connection or the requests link lost): the client asks again."""

    condition = "amqp:internal-error"


class Requests:
    """The requests a :class:`~seqrepair.amqp.gateway.gateway.Gateway` forwards upstream on
    its control link, and the answers it routes back to its subscribers.

    The gateway sets :attr:`control` when it connects and calls :meth:`control_opened`,
    :meth:`responses_attached` as the component answers, :meth:`forward` for each request,
    :meth:`from_upstream` for each message from the component, :meth:`repay` when a subscriber
    took messages (and :meth:`repay_gone` on its tick), :meth:`upstream_lost` when the
    component's connection ends. ``max_awaited`` and ``max_awaited_per_principal`` bound the
    client requests waiting for the component's outcome, in all and per proven principal
    (None: :data:`MAX_AWAITED`, :data:`MAX_AWAITED_PER_PRINCIPAL`).
    """

    def __init__(self, gateway: Any, capacity: int, annotations: bool, *,
                 max_awaited: int | None = None,
                 max_awaited_per_principal: int | None = None) -> None:
        self.gateway = gateway
        self.stats: dict[str, int] = gateway.stats
        self.replies = ReplyTable(capacity)
        self.annotations = annotations
        self.control: Any = None  # the requests link to the component
        self.annotating = False  # the component takes response annotations on this connection
        self._responses: Any = None  # the link it sends their answers on
        self._owed: dict[str, int] = {}  # responses credit held back per subscriber behind
        self._ids = itertools.count(1)
        self.max_awaited = _bound(MAX_AWAITED if max_awaited is None else max_awaited,
                                  "max_waiting_requests")
        self.max_awaited_per_principal = _bound(
            MAX_AWAITED_PER_PRINCIPAL if max_awaited_per_principal is None
            else max_awaited_per_principal, "max_waiting_requests_per_principal")
        # upstream delivery tag -> the client's delivery and the principal it counts for
        self._awaited: dict[bytes, tuple[Any, str]] = {}
        self._per_connection: dict[Any, int] = {}  # client connection -> its requests waiting
        self._per_principal: dict[str, int] = {}  # proven principal -> its requests waiting
        for counter in ("request_outcomes", "requests_failed_upstream_lost",
                        "requests_refused_per_connection", "requests_refused_per_principal",
                        "requests_refused_in_all"):
            self.stats.setdefault(counter, 0)

    def upstream_lost(self) -> None:
        """The component's connection ended: its links with it."""
        self.control = self._responses = None
        self.annotating = False
        self._owed.clear()
        self._fail_awaited("the component's connection was lost")

    def control_closed(self, link: Any) -> bool:
        """Whether ``link`` is the requests link upstream, which the component detached: what
        waited for its outcome never gets one."""
        if not getattr(link, "seqrepair_requests", False):
            return False
        if link == self.control:
            self.control = None
        self._fail_awaited("the requests link upstream was detached")
        return True

    def _fail_awaited(self, why: str) -> None:
        """Reject every client request waiting for an outcome that will not come."""
        awaited, self._awaited = self._awaited, {}
        self._per_connection.clear()
        self._per_principal.clear()
        for client, _principal in awaited.values():
            settle_with(client, UpstreamLostError(f"upstream lost before its outcome: {why}"))
            _give_credit(client.link)
        self.stats["requests_failed_upstream_lost"] += len(awaited)

    @property
    def awaited(self) -> int:
        """Client requests waiting for the component's outcome."""
        return len(self._awaited)

    def outcome(self, delivery: Any) -> bool:
        """Whether ``delivery`` is a request's on the requests link upstream; when the
        component gave its outcome, the client's delivery is settled with it and its link
        given back the credit."""
        if not getattr(delivery.link, "seqrepair_requests", False):
            return False
        if has_outcome(delivery):
            waiting = self._awaited.pop(delivery.tag, None)
            if waiting is not None:
                client, principal = waiting
                self._count(client, principal, -1)
                if not client.settled:
                    copy_outcome(delivery, client)
                    self.stats["request_outcomes"] += 1
                _give_credit(client.link)
        return True

    def control_opened(self, link: Any) -> bool:
        """Whether ``link`` is the control link the component answered; then learn whether
        requests go annotated."""
        if link is None or link != self.control:
            return False
        offered = _symbols(link.connection.remote_offered_capabilities)
        supported = _symbols(link.remote_target.capabilities)
        self.annotating = (
            self.annotations
            and str(RESPONSE_ANNOTATIONS) in offered
            and str(RESPONSE_ADDRESS_SUPPORTED) in supported
        )
        self.gateway.log.info("control link attached",
                              requests="annotated" if self.annotating else "rewritten")
        return True

    def responses_attached(self, link: Any) -> None:
        """The component attaches the responses link to answer annotated requests."""
        link.seqrepair_responses = True
        self._responses = link
        self._owed.clear()
        link.flow(RESPONSE_WINDOW)

    def owes(self, name: str) -> bool:
        """Whether responses credit is held back for subscriber ``name``."""
        return name in self._owed

    def repay(self, relay: Relay | None, name: str) -> None:
        """Give back the responses credit held while subscriber ``name`` was behind, once it
        has fewer than :data:`RESPONSE_WINDOW` waiting (or is gone). The link's credit is
        shared; held per subscriber, answers waiting for one are at most twice the window."""
        if relay is not None and relay.state is RelayState.OPEN and (
            relay.downstream.queued >= RESPONSE_WINDOW
        ):
            return
        owed = self._owed.pop(name, 0)
        if owed and self._responses is not None:
            self._responses.flow(owed)

    def repay_gone(self) -> None:
        """A subscriber gone while behind owes nothing."""
        relays = self.gateway.relays
        for name in list(self._owed):
            relay = relays.get(name)
            if relay is None or not relays.is_current(relay):
                self.repay(None, name)

    def foreign_link(self, message: Message, connection: Any) -> UnknownAddressError | None:
        """Why a request (or ACK) arriving on ``connection`` is refused because the
        downstream link it names is another connection's (None: it names its own, or none
        this gateway holds). Upstream every client of a gateway is on its one connection, and
        without forwarding principals one principal: this is the only place a client's
        request about another's link (moving its position, answers pushed on it) is told
        apart."""
        name = downstream_link(_addressing(message))
        relay = None if name is None else self.gateway.relays.get(name)
        if relay is None or getattr(relay.downstream, "connection", None) == connection:
            return None
        self.stats["foreign_requests"] = self.stats.get("foreign_requests", 0) + 1
        return UnknownAddressError(f"no link {name!r} on this connection", got=name)

    def forward(self, message: Message, on_behalf_of: str | None = None,
                client: Any = None) -> bool:
        """Send a subscriber's request (or ACK) to the component, in its scope (on behalf of
        ``on_behalf_of``, the principal the subscriber proved, when the gateway forwards
        principals), with its ``seqrepair-hops`` one more;
        :class:`~seqrepair.amqp.wire.hops.HopLimitError` (or a malformed count's error)
        refuses it, nothing sent, and so do :class:`UpstreamLostError` (the component out of
        reach) and :class:`~seqrepair.amqp.wire.errors.RequestFloodError` (too many waiting).
        True when ``client``, the request's delivery, now waits for the component's outcome
        (settled, its credit given back, by :meth:`outcome`); False when the gateway settles
        it (pre-settled, or nothing sent: an ACK naming no link)."""
        gateway = self.gateway
        if not gateway.relays.upstream_ready or self.control is None:
            # the component is out of reach: rejected, the subscriber's stub asks again
            self.stats["dropped_requests"] += 1
            raise UpstreamLostError("upstream out of reach: the gateway is not connected to "
                                    "the component")
        waits = client is not None and not client.settled
        if waits:
            self._check_room(client)
        # a hop more; past the limit refused (HopLimitError): requests do not loop for ever
        count = gateway.hops.forward_count(message.properties)
        counted = {**(message.properties or {}), HOPS_PROPERTY: ulong(count)}
        message.properties = counted  # type: ignore[assignment]  # proton types it lazily
        addressing = _addressing(message)
        if is_ack(message):  # no answer comes: renamed like a request, nothing remembered
            link = downstream_link(addressing)
            if not link:
                return False
            return self._send(_upstream_message(
                message, attrs.evolve(addressing, link=upstream_name(gateway.name, link)),
                on_behalf_of=on_behalf_of), client)
        # an image answer must come on the data link, in order with its live frames (WIRE.md
        # "Image requests"): a SNAPSHOT is rewritten, never routed by annotations
        if self.annotating and not says_type(message, MessageType.SNAPSHOT):
            annotated = annotate_request(_addressing(message), gateway=gateway.name)
            if annotated is not None:
                self.stats["annotated"] += 1
                return self._send(_upstream_message(message, *annotated,
                                                    on_behalf_of=on_behalf_of), client)
        new_id = f"{gateway.name}:{next(self._ids)}"
        rewritten, pending = rewrite_request(_addressing(message), new_id=new_id,
                                             gateway=gateway.name)
        self.replies.remember(new_id, pending)
        self.stats["rewritten"] += 1
        return self._send(_upstream_message(message, rewritten, on_behalf_of=on_behalf_of),
                          client)

    def _send(self, message: Message, client: Any) -> bool:
        """Send ``message`` on the requests link upstream: unsettled, its outcome awaited for
        the client's unsettled delivery ``client``; pre-settled for a pre-settled one. Past
        the ``max-message-size`` the component advertises on that link it is refused
        (:class:`~seqrepair.amqp.wire.errors.OversizedMessageError`), not sent: the component
        would detach the link every client shares (WIRE.md "Message size")."""
        limit = getattr(self.control, "remote_max_message_size", 0) or 0
        if limit:
            size = len(message.encode())
            if size > limit:
                self.stats["oversized_requests"] = self.stats.get("oversized_requests", 0) + 1
                raise OversizedMessageError(
                    f"the request is {size} bytes upstream, more than the {limit} the "
                    "component takes", expected=limit, got=size)
        out = self.control.send(message)
        if client is None or client.settled:
            out.settle()
            return False
        principal = principal_of(_connection(client))
        self._awaited[out.tag] = (client, principal)
        self._count(client, principal, 1)
        return True

    def _check_room(self, client: Any) -> None:
        """Refuse (:class:`RequestFloodError`) the client's delivery ``client`` a place among
        those waiting for an outcome when its connection, its connection's proven principal or
        the gateway has no room left; a refusal changes no count."""
        connection = _connection(client)
        if self._per_connection.get(connection, 0) >= MAX_AWAITED_PER_CONNECTION:
            self.stats["requests_refused_per_connection"] += 1
            raise RequestFloodError(f"more than {MAX_AWAITED_PER_CONNECTION} requests of this "
                                    "connection wait for the component's outcome",
                                    expected=MAX_AWAITED_PER_CONNECTION)
        principal = principal_of(connection)
        if self._per_principal.get(principal, 0) >= self.max_awaited_per_principal:
            self.stats["requests_refused_per_principal"] += 1
            raise RequestFloodError(
                f"more than {self.max_awaited_per_principal} requests of principal "
                f"{principal[:100]!r} wait for the component's outcome at the gateway "
                "(--max-waiting-requests-per-principal)",
                expected=self.max_awaited_per_principal, got=principal[:100])
        if len(self._awaited) >= self.max_awaited:
            self.stats["requests_refused_in_all"] += 1
            raise RequestFloodError(f"more than {self.max_awaited} requests wait for the "
                                    "component's outcome at the gateway "
                                    "(--max-waiting-requests)", expected=self.max_awaited)

    def _count(self, client: Any, principal: str, change: int) -> None:
        """One more (or fewer) of the requests of ``client``'s connection and of
        ``principal`` waiting."""
        _add(self._per_connection, _connection(client), change)
        _add(self._per_principal, principal, change)

    def from_upstream(self, receiver: Any, message: Message) -> None:
        """A message from the component: a relayed link's frame, or an answer (on the
        subscriber's upstream link, or on the responses link by its cookie)."""
        relays = self.gateway.relays
        relay: Relay | None = getattr(receiver, "seqrepair_relay", None)
        answers = getattr(receiver, "seqrepair_responses", False)
        if answers:
            name = answer_route(message.instructions)
            relay = None if name is None else relays.get(name)
            if relay is not None:
                self.stats["routed"] += 1
        else:
            restored = restore_response(_addressing(message), self.replies)
            if restored is not None:
                addressing, reply_to = restored
                message.correlation_id = addressing.correlation_id
                if reply_to and reply_to.startswith(LINK_PREFIX):
                    relay = relays.get(reply_to[len(LINK_PREFIX) :])
                self.stats["restored"] += 1
        message.instructions = None
        if relay is None or not relays.is_current(relay) or relay.state is not RelayState.OPEN:
            self.stats["unroutable"] += 1  # its subscriber went away: the context repairs it
            self.gateway.log.info("message unroutable",
                                  link=None if relay is None else relay.name,
                                  via="responses" if answers else receiver.name,
                                  state=None if relay is None else relay.state.name)
            if answers:
                receiver.flow(1)
            return
        message.properties = count_hop(message.properties)  # type: ignore[assignment]
        relay.downstream.send(message)
        self.stats["relayed"] += 1
        if answers:
            if relay.downstream.queued < RESPONSE_WINDOW:
                receiver.flow(1)
            else:  # given back once that subscriber takes what waits for it
                self._owed[relay.name] = self._owed.get(relay.name, 0) + 1
                self.stats["answers_held"] += 1


def _bound(value: object, option: str) -> int:
    """``value`` if it is a bound an operator may set (an integer >= 1)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidConfigError(f"{option} must be an integer >= 1, got {value!r}",
                                 expected=">= 1", got=value)
    return value


def _add(counts: dict[Any, int], key: Any, change: int) -> None:
    """``counts[key] += change``, the key dropped at zero."""
    left = counts.get(key, 0) + change
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _connection(client: Any) -> Any:
    """The connection of a client's delivery (kept alive by it while it waits, so the key
    names that connection, never one made later at the same address)."""
    return getattr(client.link, "connection", None)


def _give_credit(link: Any) -> None:
    """A request of a client's requests link is settled: the link may send one more."""
    if link.state & Endpoint.LOCAL_ACTIVE and not link.state & Endpoint.REMOTE_CLOSED:
        link.flow(1)


def _addressing(message: Message) -> Addressing:
    props: Mapping[Any, Any] = message.properties or {}
    link = props.get(PROP_LINK)
    return Addressing(message.id, message.reply_to, message.correlation_id,
                      None if link is None else str(link))


def _upstream_message(
    message: Message, addressing: Addressing, annotations: dict[symbol, Any] | None = None,
    *, on_behalf_of: str | None = None,
) -> Message:
    """``message``'s bare content with ``addressing`` (and ``annotations``) in place of its own;
    ``seqrepair-on-behalf-of`` is the gateway's to set (``on_behalf_of``), never the client's."""
    given: dict[Any, Any] = dict(message.properties or {})
    properties = {k: v for k, v in given.items() if str(k) != str(PROP_ON_BEHALF_OF)}
    if on_behalf_of is not None:  # anonymous too: it must not act as the gateway
        properties[str(PROP_ON_BEHALF_OF)] = on_behalf_of
    out = Message(body=message.body, properties=properties,
                  id=addressing.message_id, reply_to=addressing.reply_to,
                  correlation_id=addressing.correlation_id)
    if addressing.link is not None:
        out.properties[PROP_LINK] = addressing.link  # type: ignore[index]
    if annotations:
        out.instructions = annotations  # type: ignore[assignment]  # symbol keys, as AMQP wants
    return out


def _symbols(capabilities: Any) -> set[str]:
    """The symbols of a capabilities field: one symbol or an array of them, as proton gives it
    (a ``Data`` for a terminus, an object for a connection; None when absent)."""
    found = capabilities
    if hasattr(capabilities, "rewind"):
        capabilities.rewind()
        found = capabilities.get_object() if capabilities.next() is not None else None
    if found is None:
        return set()
    items = getattr(found, "elements", None)
    if items is None:
        items = found if isinstance(found, list | tuple) else [found]
    return {str(item) for item in items}
