"""The ``message-type`` vocabulary of the wire format and its technical messages.

Link frames are the core's :class:`~seqrepair.core.messages.Publication` and
:class:`~seqrepair.core.messages.Heartbeat`; what only the wire knows lives here: the names in
the ``message-type`` application property, the source query and its answer (XEP-0040 §4) and
the SWIM SUBSCRIPTION technical message.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    ReplayComplete,
    ReplayStarted,
    SourceGapRequest,
)
from seqrepair.core.snapshot import ImageComplete, ImageFrame, ImageRequest

MESSAGE_TYPE = "message-type"
DEFAULT_SOURCE_BITS = 32
ABSOLUTE_SOURCE_BITS = 64
"""The width of source numbers a component sends to subscribers: the absolute number."""
DEFAULT_LINK_BITS = 16


class MessageType(enum.StrEnum):
    """Values of the ``message-type`` application property."""

    PUBLICATION = "PUBLICATION"
    PUBLICATIONS = "PUBLICATIONS"
    HEARTBEAT = "HEARTBEAT"
    SUBSCRIPTION = "SUBSCRIPTION"
    GAP_REQUEST = "GAP-REQUEST"
    SOURCE_GAP_REQUEST = "SOURCE-GAP-REQUEST"
    GAP_ERROR = "GAP-ERROR"
    REPLAY_COMPLETE = "REPLAY-COMPLETE"
    REPLAY_STARTED = "REPLAY-STARTED"
    CAPABILITIES = "CAPABILITIES"
    ACK = "ACK"
    SNAPSHOT = "SNAPSHOT"
    IMAGE = "IMAGE"
    IMAGE_COMPLETE = "IMAGE-COMPLETE"


@attrs.frozen
class CapabilitiesRequest:
    """A source query (XEP-0040 §4): what does the component offer?"""


@attrs.frozen(hash=False)
class Capabilities:
    """The answer to a source query (XEP-0040 §4).

    ``retention``: the age (s) past which the journal trims, ``retention_count``: how many
    publications per source it keeps; None when it does not trim that way.
    ``max_publish_batch``: most publications one incoming ``PUBLICATIONS`` message may carry.
    ``limits``: the component's resource limits by name (WIRE.md "Resource model"): what one
    connection, link or principal may cost it at most.
    """

    link_bits: int
    source_bits: Mapping[str, int]
    default_source_bits: int
    heartbeat_interval: float
    max_gap_range: int
    retention: float | None
    publish_types: tuple[str, ...]
    max_batch: int
    response_annotations: bool = True
    retention_count: int | None = None
    max_publish_batch: int | None = None
    limits: Mapping[str, float] = attrs.field(factory=dict)


@attrs.frozen
class SubscriptionState:
    """The SWIM SUBSCRIPTION technical message: the component changed a subscription's state."""

    status: str
    topic: str
    subscription_id: str
    queue: str
    qos: str = "EXACTLY_ONCE"
    durable: bool = False
    reason: str = ""
    epoch: str = ""
    """The link context the subscription continues in (see ``seqrepair-epoch`` in WIRE.md);
    a new one means the link numbering restarted at 0."""


@attrs.frozen
class Ack:
    """ACK: how far a subscriber has got on its data link ``link`` (pre-settled, no answer).

    ``link_epoch`` names the link context the numbers belong to (as the component named it);
    ``link_through`` is the wire link number through which the stub has consumed every number
    of that context (delivered, filled by a heartbeat, covered by a replay or given up as
    Unrecoverable), None when it has nothing to say. ``taken``: per source, the absolute
    source number the application has taken (only sources that advanced since the last ACK);
    empty when there is nothing new.
    """

    link: str
    link_epoch: str
    link_through: int | None = None
    taken: Mapping[str, int] = attrs.field(factory=dict)


Decoded = (
    Publication
    | Heartbeat
    | GapRequest
    | SourceGapRequest
    | GapError
    | ReplayComplete
    | ReplayStarted
    | CapabilitiesRequest
    | Capabilities
    | SubscriptionState
    | Ack
    | ImageRequest
    | ImageFrame
    | ImageComplete
)
"""Everything :meth:`Decoder.decode` can return."""

LinkFrame = Publication | Heartbeat
