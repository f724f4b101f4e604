"""The relayed subscriber links on proton's side: what :class:`~.relays.RelayTable` decides,
done (:func:`perform`: attach upstream, answer or detach downstream, close a subscriber's
connection), the credit that crosses (:func:`top_up`) and the attaches held until the component
answers (:class:`HoldingEndpoints`).

Settlement and credit cross as the component gives them: the relayed link sends as the
component does (pre-settled), and the component gets on the upstream link the credit the
subscriber gives the gateway, so the gateway keeps no queue.
"""

from __future__ import annotations

from typing import Any

from proton import Condition, Endpoint
from proton.handlers import EndpointStateHandler
from proton.reactor import LinkOption

from seqrepair.amqp.gateway.relays import (
    Action,
    AnswerDownstream,
    AttachUpstream,
    DetachDownstream,
    DetachUpstream,
    Relay,
)
from seqrepair.amqp.wire.refusal import refuse_link
from seqrepair.amqp.wire.vocabulary import PROP_EPOCH, PROP_PATH


class LinkProperties(LinkOption):
    """Attach a link with these link properties (none when empty) and ``max_message_size``
    advertised (0: any size)."""

    def __init__(self, props: Any, max_message_size: int = 0) -> None:
        self.props = props
        self.max_message_size = max_message_size

    def apply(self, link: Any) -> None:
        if self.props:
            link.properties = self.props
        if self.max_message_size:
            link.max_message_size = self.max_message_size


class HoldingEndpoints(EndpointStateHandler):
    """Proton's endpoint handler, except that a link the gateway marks ``seqrepair_held`` in
    ``on_link_opening`` is not attached at once: the gateway answers it later."""

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if self.is_local_uninitialised(link):
            self.on_link_opening(event)
            # not held, and not refused there already (opening a closed link would undo
            # its close: the detach would never be sent)
            if not getattr(link, "seqrepair_held", False) and link.state & Endpoint.LOCAL_UNINIT:
                link.open()
            return
        super().on_link_remote_open(event)


def perform(gateway: Any, actions: list[Action]) -> None:
    """Do what the relay table decided, on the proton links and connections."""
    for action in actions:
        relay = action.relay
        if isinstance(action, AttachUpstream):
            # what the subscriber takes, not any size: the component sizes what it sends by it
            # (a source replay's larger transfers go only to a receiver of 16 MiB or more),
            # and the gateway passes each transfer on as it came
            taken = relay.downstream.remote_max_message_size if relay.downstream else 0
            receiver = gateway._container.create_receiver(
                gateway._upstream, relay.address, name=action.name,
                options=LinkProperties(action.properties, int(taken or 0)),
            )
            receiver.seqrepair_relay = relay
            relay.upstream = receiver
            gateway.stats["upstream_attaches"] += 1
            gateway.log.info("attaching upstream", link=relay.name, upstream=action.name,
                             path=action.properties.get(PROP_PATH))
            top_up(relay)
        elif isinstance(action, AnswerDownstream):
            link = relay.downstream
            link.properties = action.properties
            if relay.upstream is not None:  # frames go settled as the component sends them
                link.snd_settle_mode = relay.upstream.remote_snd_settle_mode
            link.seqrepair_held = False
            link.open()
            top_up(relay)
            gateway.log.info("link relayed", link=relay.name, address=relay.address,
                          epoch=action.properties.get(PROP_EPOCH))
        elif isinstance(action, DetachUpstream):
            if relay.upstream is not None and not relay.upstream.state & Endpoint.LOCAL_CLOSED:
                relay.upstream.close()
        elif isinstance(action, DetachDownstream):
            refuse_link(relay.downstream, None if action.condition is None
                   else Condition(action.condition, action.description[:500]))
        else:
            conn = relay.downstream.connection
            if not conn.state & Endpoint.LOCAL_CLOSED:
                gateway.log.info("closing a subscriber's connection", link=relay.name,
                              condition=action.condition, reason=action.description)
            close_forced(conn, action.condition, action.description)


def close_forced(conn: Any, condition: str, description: str) -> None:
    """Close client connection ``conn`` with ``condition`` (``amqp:connection:forced``: the
    client connects again) unless it is closed already, and end its transport."""
    if not conn.state & Endpoint.LOCAL_CLOSED:
        conn.condition = Condition(condition, description)
        conn.seqrepair_forced = True
        conn.close()
    # proton's clients take amqp:connection:forced for a lost transport and do not answer
    # the close: end the transport once the close is out, not at their idle timeout
    if conn.transport is not None:
        conn.transport.close_tail()


def top_up(relay: Relay) -> None:
    """Give the component as much credit on the upstream link as the subscriber gives the
    gateway, less what waits to go: the gateway holds no queue of its own, and the
    component's flow control (pausing a slow link) works through it."""
    up, down = relay.upstream, relay.downstream
    if up is None or not up.state & Endpoint.LOCAL_ACTIVE:
        return
    missing = down.credit - down.queued - up.credit
    if missing > 0:
        up.flow(missing)
