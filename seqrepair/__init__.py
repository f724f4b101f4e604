"""seqrepair: reliable-delivery sequencing and gap repair for publish/subscribe.

The public API is re-exported here; see DESIGN.md for the contract.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from seqrepair.core.context import LinkContext
from seqrepair.core.errors import (
    InvalidConfigError,
    InvalidMessageError,
    InvalidSequenceError,
    InvalidTopicPatternError,
    OversizedPublicationError,
    SeqRepairError,
    UndeliverableError,
    UnknownPublishTypeError,
)
from seqrepair.core.events import (
    BufferOverflow,
    Delivered,
    DeliveredRun,
    Disconnect,
    HeartbeatOverdue,
    LinkReset,
    RequestGap,
    RequestSourceGap,
    Unrecoverable,
)
from seqrepair.core.image import ImageCache, ItemImage
from seqrepair.core.messages import (
    GapError,
    GapRequest,
    Heartbeat,
    Publication,
    PublishType,
    ReplayComplete,
    SourceGapRequest,
)
from seqrepair.core.overdue import OverduePolicy
from seqrepair.core.sequence import SequenceSpace
from seqrepair.core.sequencers import LinkSequencer, SourceSequencer
from seqrepair.core.snapshot import (
    ImageComplete,
    ImageDelivered,
    ImageFrame,
    ImageOutdated,
    ImageRefused,
    ImageRequest,
    ImageResynced,
    RequestImage,
)
from seqrepair.core.stub import SubscriberStub
from seqrepair.core.stubstats import StubStats
from seqrepair.core.topics import TopicPattern

try:
    __version__ = _version("seqrepair")
    """The installed distribution's version (``seqrepair --version``)."""
except PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = [
    "BufferOverflow",
    "Delivered",
    "DeliveredRun",
    "Disconnect",
    "GapError",
    "GapRequest",
    "Heartbeat",
    "HeartbeatOverdue",
    "ImageCache",
    "ImageComplete",
    "ImageDelivered",
    "ImageFrame",
    "ImageOutdated",
    "ImageRefused",
    "ImageRequest",
    "ImageResynced",
    "InvalidConfigError",
    "InvalidMessageError",
    "InvalidSequenceError",
    "InvalidTopicPatternError",
    "ItemImage",
    "LinkContext",
    "LinkReset",
    "LinkSequencer",
    "OverduePolicy",
    "OversizedPublicationError",
    "Publication",
    "PublishType",
    "ReplayComplete",
    "RequestGap",
    "RequestImage",
    "RequestSourceGap",
    "SeqRepairError",
    "SequenceSpace",
    "SourceGapRequest",
    "SourceSequencer",
    "StubStats",
    "SubscriberStub",
    "TopicPattern",
    "UndeliverableError",
    "UnknownPublishTypeError",
    "Unrecoverable",
]
