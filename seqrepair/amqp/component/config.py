"""What ``seqrepair serve`` can set (:class:`ComponentConfig`), checked when it is made, and
the per-connection request bucket it sizes."""

from __future__ import annotations

from typing import Any

import attrs

from seqrepair.amqp.component import sourcelimits
from seqrepair.amqp.component.grants import GrantTable
from seqrepair.amqp.wire import admission, hops
from seqrepair.amqp.wire.admission import CountLimits
from seqrepair.amqp.wire.security import ServerSecurity
from seqrepair.amqp.wire.sizelimit import DEFAULT_MAX_MESSAGE_SIZE
from seqrepair.core.config import (
    non_negative_int,
    non_negative_number,
    optional,
    positive_int,
    positive_number,
)
from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.subscriptions import Subscription


def _link_bits(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 64:
        raise InvalidConfigError(
            f"{attribute.name} must be an integer in 2..64, got {value!r}", expected=(2, 64),
            got=value,
        )


def _rate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise InvalidConfigError(
            f"{attribute.name} must be a fraction in [0, 1), got {value!r}", got=value
        )


def _hop_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    hops.check_hop_id(value, option=attribute.name)


def _max_hops(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    hops.check_max_hops(value, option=attribute.name)


def _positive(default: float) -> Any:
    """A field that must be > 0 (an integer when its default is one)."""
    check = positive_int if isinstance(default, int) else positive_number
    return attrs.field(default=default, validator=check)


@attrs.define
class ComponentConfig:
    """Everything ``seqrepair serve`` can set (checked: InvalidConfigError when out of range)."""

    url: str = "127.0.0.1:5672"
    link_bits: int = attrs.field(default=16, validator=_link_bits)
    heartbeat_interval: float = _positive(1.0)
    idle_timeout: float = attrs.field(default=10.0, validator=non_negative_number)
    max_batch: int = _positive(256)
    """Most publications per transfer to a subscriber (and per gap-fill answer): past a few
    hundred, proton's per-transfer work is a small part of the cost of each publication. A
    source replay's transfers take up to 4 times as many while small
    (:data:`~seqrepair.amqp.component.responses.REPLAY_CHUNK_BYTES`)."""
    max_pending: int = _positive(20_000)
    max_publish_batch: int = _positive(4_096)
    """Most publications one incoming PUBLICATIONS message may carry: its journaling and
    fan-out run in one turn of the event loop that serves every link."""
    max_message_size: int = _positive(DEFAULT_MAX_MESSAGE_SIZE)
    """Most bytes of one incoming message (publisher's or request), advertised as the
    ``max-message-size`` of the links the component receives on and enforced as the bytes
    arrive (:mod:`seqrepair.amqp.wire.sizelimit`)."""
    context_capacity: int = _positive(65_536)
    link_context_bytes: int = _positive(16 << 20)
    """Most bytes (estimated, :func:`~seqrepair.core.context.frame_size`) one link's context
    keeps for gap fill; less when a connection's, principal's or the component's share is
    smaller (:mod:`.memory`)."""
    link_unsent_bytes: int = _positive(4 << 20)
    """Most bytes of transfers one link has sent that its peer has not yet taken: past it the
    link is paused (:mod:`.memory`)."""
    connection_bytes: int = _positive(64 << 20)
    """Most bytes the links of one connection hold (unsent transfers and contexts)."""
    principal_bytes: int = _positive(256 << 20)
    """Most bytes the links of one principal hold, all its connections together."""
    component_bytes: int = _positive(512 << 20)
    """Most bytes every link together holds (detached links' kept contexts too)."""
    memory_grace: float = _positive(10.0)
    """Seconds a link may stay over its unsent bound before it is detached (and its
    connection, whose peer does not read, closed) with ``amqp:resource-limit-exceeded``."""
    max_gap_range: int = _positive(10_000)
    max_request_sources: int = _positive(1_000)
    context_retention: float = attrs.field(default=30.0, validator=non_negative_number)
    journal_retention: float | None = attrs.field(
        default=None, validator=optional(positive_number)
    )
    journal_retention_count: int | None = attrs.field(
        default=None, validator=optional(positive_int)
    )
    publish_window: int = _positive(500)
    request_window: int = _positive(32)
    request_rate: float = _positive(500.0)
    request_burst: float = _positive(1_000.0)
    repair_turn: float = _positive(0.01)
    """Seconds of event-loop time one repair turn may take (:mod:`.fairness`)."""
    replay_page: int = _positive(1_000)
    """Journal entries a source replay reads per step (per page), sent or skipped."""
    replay_cache_bytes: int = attrs.field(default=64 << 20, validator=non_negative_int)
    """Most bytes (estimated) of recently fanned-out publications kept encoded for source
    replays (:mod:`seqrepair.journal.recent`); 0 keeps none (replays read the journal)."""
    max_replays_per_connection: int = _positive(16)
    """Source replays one connection may have in progress; past it requests are rejected."""
    max_replays_per_principal: int = _positive(64)
    """Source replays one principal's connections may have in progress together."""
    contribution_rate: float = _positive(10.0)
    """Contributions per second one principal may send (a token bucket, :mod:`.contributions`)."""
    contribution_burst: float = _positive(20.0)
    """Contributions one principal may send at once before its rate holds it."""
    contribution_timeout: float = _positive(10.0)
    """Seconds an owner has to take or refuse a contribution before it is refused for it."""
    max_pending_contributions: int = _positive(256)
    """Contributions one source's owner may have unanswered; past it, refused at once."""
    drop_rate: float = attrs.field(default=0.0, validator=_rate)
    drop_seed: int | None = None
    drop_reset_frames: bool = False
    subscriptions: dict[str, Subscription] = attrs.field(factory=dict)
    """The operator's subscription queues, by id (``configured``; see :mod:`.subqueues`)."""
    grants: GrantTable = attrs.field(factory=GrantTable)
    security: ServerSecurity = attrs.field(factory=ServerSecurity)
    """How connections authenticate: by default nobody can (the component refuses to start);
    ``ServerSecurity(allow_anonymous=True)`` lets everyone in as ``anonymous``."""
    max_connections: int = _positive(admission.MAX_CONNECTIONS)
    """Connections held at once, opened or not (:mod:`~seqrepair.amqp.wire.admission`)."""
    max_connections_per_principal: int = _positive(admission.MAX_CONNECTIONS_PER_PRINCIPAL)
    max_links_per_connection: int = _positive(admission.MAX_LINKS_PER_CONNECTION)
    max_links_per_principal: int = _positive(admission.MAX_LINKS_PER_PRINCIPAL)
    open_timeout: float = _positive(admission.OPEN_TIMEOUT)
    """Seconds a connection has from its accept to complete the AMQP open (SASL included)."""
    max_sources: int = _positive(sourcelimits.MAX_SOURCES)
    """Sources the component keeps; a publication of a new one past it is refused
    (:mod:`.sourcelimits`)."""
    max_sources_per_principal: int = _positive(sourcelimits.MAX_SOURCES_PER_PRINCIPAL)
    """New sources one principal may bring; a publication of another is refused."""
    hop_id: str | None = attrs.field(default=None, validator=optional(_hop_id))
    """The component's identity on attach paths (:mod:`seqrepair.amqp.wire.hops`); None: its
    listen address and a random tag."""
    max_hops: int = attrs.field(default=hops.DEFAULT_MAX_HOPS, validator=_max_hops)
    """Most gateways and relays an attach may have crossed (its ``seqrepair-path``)."""

    def count_limits(self) -> CountLimits:
        """The count limits (:mod:`~seqrepair.amqp.wire.admission`) of this configuration."""
        return CountLimits(
            max_connections=self.max_connections,
            max_connections_per_principal=self.max_connections_per_principal,
            max_links_per_connection=self.max_links_per_connection,
            max_links_per_principal=self.max_links_per_principal,
            open_timeout=self.open_timeout,
        )

    def limits(self) -> dict[str, float]:
        """The resource limits CAPABILITIES reports (WIRE.md "Resource model"), by name."""
        return {
            "max-message-size": self.max_message_size,
            "max-pending": self.max_pending,
            "request-rate": self.request_rate,
            "request-burst": self.request_burst,
            "context-capacity": self.context_capacity,
            "max-connections": self.max_connections,
            "max-connections-per-principal": self.max_connections_per_principal,
            "max-links-per-connection": self.max_links_per_connection,
            "max-links-per-principal": self.max_links_per_principal,
            "open-timeout": self.open_timeout,
            "repair-turn": self.repair_turn,
            "replay-page": self.replay_page,
            "replay-cache-bytes": self.replay_cache_bytes,
            "max-replays-per-connection": self.max_replays_per_connection,
            "max-replays-per-principal": self.max_replays_per_principal,
            "link-context-bytes": self.link_context_bytes,
            "link-unsent-bytes": self.link_unsent_bytes,
            "connection-bytes": self.connection_bytes,
            "principal-bytes": self.principal_bytes,
            "component-bytes": self.component_bytes,
            "memory-grace": self.memory_grace,
            "max-hops": self.max_hops,
            "max-sources": self.max_sources,
            "max-sources-per-principal": self.max_sources_per_principal,
        }


@attrs.define
class Bucket:
    """A token bucket bounding one connection's requests."""

    rate: float
    burst: float
    tokens: float
    at: float

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
