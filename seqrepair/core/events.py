"""Events the subscriber stub returns. Adapters perform them; the core never does I/O.

``Delivered`` and ``DeliveredRun`` go to the application; ``RequestGap`` and
``RequestSourceGap`` are requests the adapter sends to the component (all ``RequestGap`` events
from one call may travel in one message); the rest are notices for the application and its
operators.
"""

from __future__ import annotations

import attrs

from seqrepair.core.messages import GapRequest, Publication, SourceGapRequest
from seqrepair.core.snapshot import (
    ImageDelivered,
    ImageOutdated,
    ImageRefused,
    ImageResynced,
    RequestImage,
)


@attrs.frozen
class Delivered:
    """Hand ``publication`` to the application: in order, exactly once."""

    publication: Publication


@attrs.frozen
class DeliveredRun:
    """Hand ``publications`` to the application, in this order, each exactly once.

    What :meth:`~seqrepair.core.stub.SubscriberStub.receive_many` reports for a run of frames
    that arrived in order: one event instead of one :class:`Delivered` per publication.
    """

    publications: tuple[Publication, ...]


@attrs.frozen
class RequestGap:
    """Ask the component to resend a link range."""

    request: GapRequest


@attrs.frozen
class RequestSourceGap:
    """Ask the component to replay by source ("last-ditch" repair, XEP-0040 §2.4)."""

    request: SourceGapRequest


@attrs.frozen
class HeartbeatOverdue:
    """No frame for ``missed`` heartbeat intervals; the last one arrived at ``since``."""

    missed: int
    since: float


@attrs.frozen
class Disconnect:
    """The overdue policy is "disconnect": the adapter should drop and re-attach the link."""

    reason: str


@attrs.frozen
class LinkReset:
    """The link restarted at 0: the old link context is void.

    ``abandoned`` link numbers were still missing or buffered when it happened; they are
    recovered by the source-level request that follows.
    """

    previous_expected: int | None = None
    abandoned: int = 0


@attrs.frozen
class Unrecoverable:
    """Data that will not be repaired: the application may ask for an image (snapshot).

    ``source``/``after`` name the source and its last delivered number when known; for a link
    gap they are None and ``link_from``/``link_to`` name the wire range skipped. All four None:
    a source-level repair was given up, and sources the subscriber has delivered nothing of
    (which the replay would have brought from the link's or subscription's start) may have
    lost publications.

    ``items``: the topics of the publications lost, when the component could say (it names
    those of entries its journal holds but cannot deliver); None when they are unknown (a
    range retention trimmed, a repair refused or given up): then every item of ``source``
    (every item, when ``source`` is None) may be affected. A resync asks for the images of
    ``items``, else of the subscription's items of ``source`` (:mod:`seqrepair.core.snapshot`).
    """

    source: str | None
    after: int | None
    reason: str
    link_from: int | None = None
    link_to: int | None = None
    items: tuple[str, ...] | None = None


@attrs.frozen
class BufferOverflow:
    """The reorder buffer reached ``max_buffer``: ``dropped`` frames were not kept.

    Their link numbers stay missing, so the stub requests them again once the buffer drains:
    nothing is lost silently.
    """

    limit: int
    dropped: int


Event = (
    Delivered
    | DeliveredRun
    | RequestGap
    | RequestSourceGap
    | HeartbeatOverdue
    | Disconnect
    | LinkReset
    | Unrecoverable
    | BufferOverflow
    | RequestImage
    | ImageDelivered
    | ImageResynced
    | ImageOutdated
    | ImageRefused
)
