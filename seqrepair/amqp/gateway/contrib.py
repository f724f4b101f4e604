"""Contributions through a gateway (XEP-0040 §5.2; WIRE.md "Contributions").

A contributor's sending link to ``$contribute/<source>`` crosses the gateway as any publishing
link does (:mod:`.publish`: its own upstream connection, the bytes as they came, each delivery
settled with the component's outcome: accepted, or rejected with the component's condition,
``amqp:resource-limit-exceeded`` over the contributor's rate among them). Two things are
added here:

* **answers** (:class:`Contributions.contributed`): a contribution whose ``reply-to`` is
  ``$link/<name>`` asks for a ``CONTRIBUTION-ACCEPTED`` on its connection's link ``<name>``.
  The component answers on the connection the contribution came on, the contributor's upstream
  connection, so the gateway attaches there a receiving link named ``<name>`` (that
  connection is the contributor connection's alone: no other client's name can clash) and
  hands each answer to the client's own ``$link/<name>`` link, relayed as subscribers' links
  are (:mod:`.relays`);
* **owners** (:class:`Contributions.attach_owner`): a receiving link from
  ``$contributions/<source>`` is relayed link to link on the owner connection's upstream
  connection, unsettled both ways: each contribution the component hands the gateway is handed
  to the owner, and the owner's outcome (accepted: it takes it in; rejected with its reason)
  settles the component's delivery, so a refusal reaches the contributor with the owner's
  reason. Credit crosses: the component gets the credit the owner gives.

Whose contribution it is, and who owns: with ``--forward-principals`` the upstream links carry
``seqrepair-on-behalf-of`` (the client's principal, honoured when the gateway has ``act-for``
on it; an anonymous client's is ``anonymous``, never the gateway), so the contributor is the
client, its rate its own, and the owner is the client;
without it, the component sees the gateway's principal: every client's contribution is the
gateway's (one rate for them all), and an owner behind it is the gateway.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from proton import Delivery, Endpoint, Link, Message, ulong

from seqrepair.amqp.gateway.publish import copy_outcome, has_outcome
from seqrepair.amqp.gateway.relaylinks import LinkProperties
from seqrepair.amqp.gateway.relays import upstream_name, upstream_properties
from seqrepair.amqp.wire.errors import AmqpAdapterError
from seqrepair.amqp.wire.hops import count_hop, read_path
from seqrepair.amqp.wire.refusal import attach_refused, refuse_link
from seqrepair.amqp.wire.security import principal_of
from seqrepair.amqp.wire.vocabulary import (
    CONTRIBUTE_PREFIX,
    CONTRIBUTIONS_PREFIX,
    LINK_PREFIX,
    PROP_PATH,
    PROP_PATH_HOPS,
)
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.amqp.gateway.gateway import Gateway

log = get_logger("seqrepair.amqp.gateway")

ANSWER_CREDIT = 16
"""Answers a contributor's answer link takes at once upstream (more wait at the component)."""
MAX_ANSWER_LINKS = 16
"""Answer links the gateway attaches at most on one contributor connection's upstream."""


def is_owner_address(address: str | None) -> bool:
    """Whether a subscriber-side attach is an owner's ``$contributions/<source>`` link."""
    return bool(address) and str(address).startswith(CONTRIBUTIONS_PREFIX)


class Contributions:
    """The gateway's contribution links (see the module)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.stats = gateway.stats
        for key in ("owner_links", "contributions_relayed", "contribution_answers"):
            self.stats.setdefault(key, 0)

    # --- owners ---------------------------------------------------------------------------

    def attach_owner(self, link: Any) -> None:
        """An owner's ``$contributions/<source>`` link: held until the component answers the
        one attached for it on the owner connection's upstream connection."""
        gw = self.gateway
        link.seqrepair_held = True
        address = link.remote_source.address
        link.source.address = address
        on_behalf_of = gw._on_behalf_of(principal_of(link.connection))
        try:
            path, hops = gw.hops.extend_route(link.remote_properties)
            barred = gw.relays.refusal(read_path(link.remote_properties), time.monotonic())
            if barred is not None:  # it would go round a loop (or too deep) again
                raise type(barred)(barred.message, path=barred.path,
                                   expected=barred.expected, got=barred.got)
        except AmqpAdapterError as exc:
            gw.hop_refused(link, exc)
            refuse_link(link, exc.amqp_condition())
            return
        properties = {**upstream_properties(None, on_behalf_of), PROP_PATH: list(path),
                      PROP_PATH_HOPS: ulong(hops)}
        up = gw._container.create_receiver(
            gw.publishing.upstream_for(link.connection), address,
            name=upstream_name(gw.name, link.name), options=LinkProperties(properties))
        up.seqrepair_route = (path, hops)  # what a refusal for it bars (RelayTable.learn)
        up.seqrepair_owner_down = link
        link.seqrepair_owner_up = up
        gw.publishing.hold(link)
        self.stats["owner_links"] += 1
        self.stats["upstream_attaches"] += 1
        gw.log.info("attaching upstream", link=link.name, upstream=up.name,
                    path=properties.get(PROP_PATH), kind="contributions")

    def upstream_opened(self, link: Any) -> bool:
        """The component answered an owner's upstream link: answer the owner's (or an answer
        link of a contributor: nothing to answer)."""
        if getattr(link, "seqrepair_answers_of", None) is not None:
            return True
        down = getattr(link, "seqrepair_owner_down", None)
        if down is None:
            return False
        if link.state & Endpoint.REMOTE_CLOSED:  # refused: the owner is told why
            self._learn(link)
            refuse_link(down, link.remote_condition)  # proton copies it at the close
            return True
        if attach_refused(link):  # a null source: its detach (link_closed) says why
            return True
        if down.state & Endpoint.LOCAL_UNINIT:
            down.snd_settle_mode = Link.SND_UNSETTLED
            down.seqrepair_held = False
            down.open()
            log.info("contributions link relayed", link=down.name, address=down.source.address)
        self.sendable(down)
        return True

    def sendable(self, down: Any) -> bool:
        """The owner's credit: the component gets as much on the upstream link."""
        up = getattr(down, "seqrepair_owner_up", None)
        if up is None:
            return False
        if up.state & Endpoint.LOCAL_ACTIVE and not up.state & Endpoint.REMOTE_CLOSED:
            missing = down.credit - down.queued - up.credit
            if missing > 0:
                up.flow(missing)
        return True

    def message(self, event: Any) -> bool:
        """A message on one of these upstream links: a contribution, handed to its owner
        unsettled; an answer, handed to the contributor's link. False: not one of these."""
        receiver = event.receiver
        answers_of = getattr(receiver, "seqrepair_answers_of", None)
        if answers_of is not None:
            self._answer(receiver, answers_of, event.message, event.delivery)
            return True
        down = getattr(receiver, "seqrepair_owner_down", None)
        if down is None:
            return False
        upstream_delivery = event.delivery
        if not down.state & Endpoint.LOCAL_ACTIVE or down.state & Endpoint.REMOTE_CLOSED:
            upstream_delivery.update(Delivery.RELEASED)  # the owner went: not handed
            upstream_delivery.settle()
            return True
        message = event.message
        message.properties = count_hop(message.properties)
        handed = down.send(message)
        handed.seqrepair_contribution = upstream_delivery
        self.stats["contributions_relayed"] += 1
        return True

    def outcome(self, event: Any) -> bool:
        """The owner settled a contribution: the component's delivery gets its outcome."""
        dlv = event.delivery
        up_dlv = getattr(dlv, "seqrepair_contribution", None)
        if up_dlv is None:
            return getattr(dlv.link, "seqrepair_owner_up", None) is not None
        if has_outcome(dlv) or dlv.settled:
            dlv.seqrepair_contribution = None
            if not up_dlv.settled:
                copy_outcome(dlv, up_dlv)
            self.sendable(dlv.link)
        return True

    def link_closed(self, link: Any) -> bool:
        """One side of an owner's pair (or an answer link) ended: end the other side too."""
        if getattr(link, "seqrepair_answers_of", None) is not None:
            return True
        down = getattr(link, "seqrepair_owner_down", None)
        if down is not None:
            self._learn(link)
            refuse_link(down, link.remote_condition)  # proton copies it at the close
            return True
        up = getattr(link, "seqrepair_owner_up", None)
        if up is not None:
            if not up.state & Endpoint.LOCAL_CLOSED:
                up.close()
            return True
        return False

    def _learn(self, up: Any) -> None:
        """The component (or a hop upstream) refused or ended an owner's upstream link: when
        for its path, what would go round again is barred (as for subscribers' links)."""
        cond = up.remote_condition
        if cond is not None and getattr(up, "seqrepair_route", None) is not None:
            self.gateway._learn(up.seqrepair_route, (str(cond.name), str(cond.description or "")))
            up.seqrepair_route = None  # learnt once: the detach that follows says it again

    # --- contributors' answers --------------------------------------------------------------

    def contributed(self, down_link: Any, raw: bytes, upstream_conn: Any) -> None:
        """A contribution is about to cross on ``upstream_conn``: when it asks for an answer
        on ``$link/<name>``, the link answers come on is attached there first (once)."""
        if not str(down_link.remote_target.address or "").startswith(CONTRIBUTE_PREFIX):
            return
        message = Message()
        try:
            message.decode(raw)
        except Exception:  # the component refuses what it cannot read, with its reason
            return
        reply_to = message.reply_to
        if not isinstance(reply_to, str) or not reply_to.startswith(LINK_PREFIX):
            return
        name = reply_to[len(LINK_PREFIX):]
        attached: dict[str, Any] = getattr(upstream_conn, "seqrepair_answer_links", None) or {}
        upstream_conn.seqrepair_answer_links = attached
        if name in attached or len(attached) >= MAX_ANSWER_LINKS or not name:
            return
        gw = self.gateway
        receiver = gw._container.create_receiver(upstream_conn, reply_to, name=name)
        receiver.seqrepair_answers_of = down_link.connection
        receiver.flow(ANSWER_CREDIT)
        attached[name] = receiver

    def _answer(self, receiver: Any, client: Any, message: Message, delivery: Any) -> None:
        """A ``CONTRIBUTION-ACCEPTED`` for ``client``'s link of the receiver's name."""
        if not delivery.settled:
            delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        receiver.flow(1)
        relay = self.gateway.relays.get(receiver.name)
        down = None if relay is None else relay.downstream
        if down is None or down.connection != client or not down.state & Endpoint.LOCAL_ACTIVE:
            self.stats["unroutable"] = self.stats.get("unroutable", 0) + 1
            return
        message.properties = count_hop(message.properties)  # type: ignore[assignment]
        down.send(message)
        self.stats["contribution_answers"] += 1


__all__ = ["Contributions", "is_owner_address"]
