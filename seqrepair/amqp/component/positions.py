"""Where the component puts what subscribers say their application has taken (``ACK`` bodies).

This is the extension point for durable subscriber positions: the component calls
``positions.record(link, taken)`` for every ACK of a link its connection attached (whatever its
epoch: source numbers do not depend on the link context), with ``taken`` the map source ->
absolute source number the ACK names (never empty). :class:`NoPositions`, the default, keeps
nothing. An implementation must be cheap (it runs in the event loop, once per ACK, at most
about 50 per second per link) and must not raise for a well-formed ACK: batch the writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from seqrepair.amqp.component.links import SubscriberLink


class Positions(Protocol):
    """What the component does with the ``taken`` part of an ACK."""

    def record(self, link: SubscriberLink, taken: Mapping[str, int]) -> None:
        """The application behind ``link`` has taken, per source, every publication through
        the absolute number given (the ``link`` names the subscription: ``link.name``,
        ``link.address``)."""


class NoPositions:
    """Keeps no positions (the default: no durable subscriptions)."""

    def record(self, link: SubscriberLink, taken: Mapping[str, int]) -> None:
        """Nothing is kept."""
        return None
