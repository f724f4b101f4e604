"""The component's side of ``ACK`` (WIRE.md "Window discipline"): a subscriber says how far it
has got; its link's window opens and what its application took goes to the positions. Also
the attach reply's numbering properties, which a subscriber configures itself from.

An ACK is pre-settled and never answered. It is not charged to the connection's request
allowance (a subscriber sends at most ~50 per second per link, and each costs a dict lookup).
One that names a link this connection did not attach, or a link without a window, or an epoch
that is not the link's current context, moves no window: it is counted (``acks_ignored``) and
touches nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proton import symbol, ubyte, ulong

from seqrepair.amqp.component.config import ComponentConfig
from seqrepair.amqp.component.links import SubscriberLink
from seqrepair.amqp.component.positions import Positions
from seqrepair.amqp.wire.technical import Ack
from seqrepair.amqp.wire.vocabulary import (
    PROP_HEARTBEAT,
    PROP_LINK_BITS,
    PROP_MAX_GAP_RANGE,
    PROP_WINDOW,
)
from seqrepair.core.window import LinkWindow


def receive_ack(
    ack: Ack,
    connection: Any,
    links: Mapping[str, SubscriberLink],
    positions: Positions,
    stats: dict[str, int],
) -> SubscriberLink | None:
    """Act on ``ack``, received on ``connection``: the link whose window it opened (to pump
    now), or None."""
    stats["acks"] = stats.get("acks", 0) + 1
    link = links.get(ack.link)
    if (
        link is None
        or link.window is None
        or link.sender is None
        or link.sender.connection != connection
    ):
        stats["acks_ignored"] = stats.get("acks_ignored", 0) + 1
        return None
    if ack.taken:
        positions.record(link, ack.taken)
    if ack.link_epoch != link.epoch:
        stats["acks_ignored"] = stats.get("acks_ignored", 0) + 1
        return None
    if ack.link_through is None or not link.window.ack(ack.link_through):
        return None
    return link


def attach_reply(config: ComponentConfig, window: LinkWindow | None) -> dict[symbol, Any]:
    """What a subscriber's attach reply tells it of the component's numbering, beyond its
    context (``seqrepair-epoch``, ``seqrepair-start-after``): it configures its stub from
    these, and a value it was given by hand that disagrees stops it."""
    reply: dict[symbol, Any] = {
        PROP_LINK_BITS: ubyte(config.link_bits),
        PROP_HEARTBEAT: float(config.heartbeat_interval),
        PROP_MAX_GAP_RANGE: ulong(config.max_gap_range),
    }
    if window is not None:
        reply[PROP_WINDOW] = ulong(window.size)
    return reply
