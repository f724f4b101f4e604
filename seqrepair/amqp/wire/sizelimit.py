"""The largest message a receiving link takes: AMQP 1.0 ``max-message-size`` (core §2.7.3).

Proton advertises a link's ``max_message_size`` in its attach but does not enforce it: it
keeps appending a delivery's transfer frames to one buffer until the last one comes, so a
peer that sends a message of any size (or a delivery that never ends) fills the receiver's
memory. :class:`SizeLimitedIncoming` checks each delivery's bytes as its frames arrive
(``Delivery.pending``) against the limit its link advertises, and refuses one that passes it
there and then, before the rest comes:

* the delivery is settled ``REJECTED`` with ``amqp:link:message-size-exceeded``, so the
  sender learns which one it was; proton frees what it holds of it and drops the frames of it
  still to come (once the application has settled a delivery, proton ignores its content);
* the link is detached (closed) with the same condition: the *link error* §2.7.3 names for
  "any attempt to deliver a message larger than this". Nothing else on the connection ends.

What is held at any time is the limit plus what one read from the socket can add to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from proton import Condition, Delivery, Endpoint, symbol
from proton.reactor import LinkOption

from seqrepair.amqp.wire.errors import OversizedMessageError, condition_info
from seqrepair.amqp.wire.rawamqp import RawIncomingHandler

__all__ = ["DEFAULT_MAX_MESSAGE_SIZE", "SizeLimitedIncoming", "limit_size"]

DEFAULT_MAX_MESSAGE_SIZE = 1 << 20
"""1 MiB: a full ``PUBLICATIONS`` message of ``max_publish_batch`` (4096) publications of 256
bytes each (a few small fields), or a client ``Publisher``'s default batch of 256 averaging
4 KiB each; a single publication of up to about that size goes on its own."""

OnOversized = Callable[[Any, int, int], None]
"""Told ``(link, size, limit)`` when a delivery on ``link`` was refused: ``size`` is what had
come of it so far (the message is at least that large)."""


class SizeLimitedIncoming(RawIncomingHandler):
    """:class:`~seqrepair.amqp.wire.rawamqp.RawIncomingHandler` that refuses, as their frames
    arrive, deliveries larger than the ``max_message_size`` of the link they come on (0: no
    limit, as in AMQP). See the module docstring for what refusing means."""

    def __init__(self, auto_accept: bool, delegate: Any, on_oversized: OnOversized) -> None:
        super().__init__(auto_accept, delegate)
        self.on_oversized = on_oversized

    def on_delivery(self, event: Any) -> None:
        """Refuse a delivery past its link's limit; anything else is read as before."""
        dlv = event.delivery
        link = dlv.link
        if link.is_receiver and not dlv.aborted:
            limit = link.max_message_size
            size = dlv.pending
            if limit and size > limit:
                refuse(dlv, size, limit)
                self.on_oversized(link, size, limit)
                return
        super().on_delivery(event)


def refuse(delivery: Any, size: int, limit: int) -> None:
    """Reject ``delivery`` (``size`` bytes so far, over ``limit``) and detach its link, both
    with ``amqp:link:message-size-exceeded``. A delivery its sender settled already (sent
    pre-settled) takes no outcome: it is only settled, which frees it."""
    link = delivery.link
    what = "message of at least" if delivery.partial else "message of"
    description = f"{what} {size} bytes: this link takes at most {limit} (max-message-size)"
    condition = OversizedMessageError.condition
    if not delivery.settled:
        info = condition_info(limit, size)
        delivery.local.condition = Condition(condition, description, info)
        delivery.update(Delivery.REJECTED)
    delivery.settle()
    if link.state & Endpoint.LOCAL_ACTIVE:
        link.condition = Condition(condition, description)
        link.close()


def limit_size(handler: Any, on_oversized: OnOversized) -> None:
    """Make a :class:`~proton.handlers.MessagingHandler` that reads with
    :func:`~seqrepair.amqp.wire.rawamqp.read_raw` refuse deliveries past their link's
    ``max_message_size`` (call it after ``read_raw``)."""
    handler.handlers = [
        SizeLimitedIncoming(h.auto_accept, h.delegate, on_oversized)
        if type(h) is RawIncomingHandler else h
        for h in handler.handlers
    ]


DEFAULT_MAX_RECEIVED = 256 * DEFAULT_MAX_MESSAGE_SIZE
"""The largest transfer a :class:`Subscriber` takes by default (256 MiB): the most a component
on its defaults sends in one, ``max_batch`` (256) publications that each came in a message of
at most its ``max_message_size`` (1 MiB). It bounds what a misbehaving or hostile peer can make
a subscriber hold, without refusing anything such a component may send."""


class LinkProperties(LinkOption):
    """Attach option: the link properties ``props`` and the ``max_message_size`` advertised."""

    def __init__(self, props: Mapping[symbol, Any], max_message_size: int = 0) -> None:
        self.props = dict(props)
        self.max_message_size = max_message_size

    def apply(self, link: Any) -> None:
        link.properties = self.props
        link.max_message_size = self.max_message_size
