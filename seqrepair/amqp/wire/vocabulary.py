"""The names a peer uses on the wire: the component's special addresses and the ``seqrepair-*``
attach properties (WIRE.md, Attach), shared by the component, the clients and the gateway.

Only names live here; what the component does with them is in :mod:`seqrepair.amqp.component`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proton import Message, symbol

from seqrepair.amqp.wire.technical import MESSAGE_TYPE, MessageType
from seqrepair.core.subscriptions import QUEUE_PREFIX

CONTROL_ADDRESS = "$seqrepair"
"""The component's control node: capabilities, gap requests without a link of their own."""
LINK_PREFIX = "$link/"
"""A reply-only link's address prefix."""
SUBSCRIPTION_PREFIX = QUEUE_PREFIX
"""A subscription queue's address prefix (``/subscriptions/ID``)."""
CONTRIBUTE_PREFIX = "$contribute/"
"""A contributor's target: ``$contribute/<source>`` (WIRE.md, Contributions)."""
CONTRIBUTIONS_PREFIX = "$contributions/"
"""A source owner's source of contributions to take or refuse: ``$contributions/<source>``."""
CONTRIBUTOR_PROPERTY = "contributor"
"""Application property (string) of a contribution handed to its owner: who sent it."""
CONTRIBUTION_PROPERTY = "contribution"
"""Application property (string): the id the component gave a contribution."""
CONTRIBUTION_ACCEPTED = "CONTRIBUTION-ACCEPTED"
"""``message-type`` of the answer to a contributor whose contribution was published."""
CONTRIBUTION_REFUSED = "seqrepair:contribution-refused"
"""The condition of a contribution its owner refused, did not answer, or that has no owner."""

PROP_BATCH = symbol("seqrepair-batch")
PROP_RESUME = symbol("seqrepair-resume")
PROP_EPOCH = symbol("seqrepair-epoch")
PROP_START = symbol("seqrepair-start-after")
PROP_GRANTS = symbol("seqrepair-permtokens")
PROP_DENY = symbol("seqrepair-permdeny")
"""Subscriber attach property (string): permission tokens the link asks to be denied on top of
the server's deny exceptions (only narrows: a relay's fetch link carries the asking link's)."""
PROP_LINK = "link"

PROP_ON_BEHALF_OF = symbol("seqrepair-on-behalf-of")
"""Attach link property, and request application property (string): the principal a
forwarding gateway acts for (honoured only when the connection's principal has ``act-for``
on it, else refused with ``amqp:unauthorized-access``)."""
MAX_PRINCIPAL_LENGTH = 256
"""Longest principal a peer may name on behalf of whom it acts (characters)."""

PROP_ACK = symbol("seqrepair-ack")
"""Attach link property (bool true): this subscriber sends ACKs; its link gets a window."""
PROP_DURABLE = symbol("seqrepair-durable")
"""Attach link property (bool): keep (true) or decline (false) a durable position."""

PROP_PATH = symbol("seqrepair-path")
"""Attach property (list of string) a gateway or relay sets on the attaches it makes upstream:
the identities of the hops the attach crossed, in order (:mod:`seqrepair.amqp.wire.hops`)."""
PROP_PATH_HOPS = symbol("seqrepair-path-hops")
"""Attach property (ulong) set with ``seqrepair-path``: the hops crossed along the longest
route behind the attach (a relay's path is the union of its subscribers' routes, so its length
is not a hop count); absent, the length of ``seqrepair-path``."""

PROP_SELECTION = symbol("seqrepair-selection")
"""Attach link property (string, comma-separated, or list of strings): the subscriber link's
topic patterns, its source address among them (a relay's one upstream link for the union of
its subscribers' selections, APEX §2.6)."""

PROP_LINK_BITS = symbol("seqrepair-link-bits")
"""Attach reply property (ubyte): the link's width in bits (2..64)."""
PROP_HEARTBEAT = symbol("seqrepair-heartbeat")
"""Attach reply property (double, seconds): the component's heartbeat interval."""
PROP_MAX_GAP_RANGE = symbol("seqrepair-max-gap-range")
"""Attach reply property (ulong): the most numbers one gap request may span."""
PROP_WINDOW = symbol("seqrepair-window")
"""Attach reply property (ulong), to a subscriber that set ``seqrepair-ack``: its window W,
the most link numbers the component runs ahead of its ACKs."""


def says_type(message: Message, mtype: MessageType) -> bool:
    """Whether ``message`` says it is of ``mtype`` (it is decoded, and validated, afterwards)."""
    props = message.properties
    # a peer's bytes may hold any value there (a list...): the decoder says what is wrong
    return isinstance(props, Mapping) and props.get(MESSAGE_TYPE) == mtype.value


def is_ack(message: Message) -> bool:
    """Whether ``message`` says it is an ACK."""
    return says_type(message, MessageType.ACK)


def plain_properties(props: Any) -> dict[str, Any]:
    """AMQP link properties as a dict keyed by plain strings (empty when there are none)."""
    if not props:
        return {}
    return {str(k): v for k, v in dict(props).items()}
