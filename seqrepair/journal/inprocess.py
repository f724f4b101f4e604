"""A journal-backed component for in-process runs (the demo's journal stage).

It plugs into :class:`seqrepair.simulation.Simulation` as its component: publications are
stamped and journaled in Redis by one :class:`Publisher` per source before they count as
published, and gap requests are answered by the :class:`GapFillService` from link context or,
by source, from the journal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seqrepair.core.budget import RefusalPolicy
from seqrepair.core.messages import (
    GapRequest,
    Heartbeat,
    Publication,
    PublishType,
    SourceGapRequest,
)
from seqrepair.core.permissions import Entitlement
from seqrepair.journal.gapfill import GapFillService
from seqrepair.journal.publisher import Publisher
from seqrepair.simulation import ToSubscriber

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal

LINK_ID = "in-process"


class JournalComponent:
    """Publishers journaling to ``journal`` and a gap-fill service for one subscriber link."""

    def __init__(
        self,
        journal: Journal,
        *,
        link_bits: int,
        context_capacity: int = 65_536,
        batch_size: int = 256,
        entitlement: Entitlement | None = None,
        policy: RefusalPolicy | None = None,
    ) -> None:
        self.journal = journal
        self.batch_size = batch_size
        self._publishers: dict[str, Publisher] = {}
        self._outbox: list[Publication] = []
        self.service = GapFillService(
            journal, link_bits=link_bits, context_capacity=context_capacity, policy=policy
        )
        # Sources the subscriber never named are replayed from the journal's start: the
        # subscription began before the first publication.
        self.service.attach(LINK_ID, entitlement or Entitlement.everything(), start_after={})

    def publish(self, source: str, topic: str, fields: dict[str, Any], ptype: PublishType) -> None:
        publisher = self._publishers.get(source)
        if publisher is None:
            publisher = Publisher(
                source,
                self.journal,
                bits=32,
                transport=self._outbox.append,
                batch_size=self.batch_size,
                window=self.batch_size * 4,
                clock=None,
            )
            self._publishers[source] = publisher
        publisher.publish(topic, fields, ptype)

    def flush(self) -> list[Publication]:
        for publisher in self._publishers.values():
            publisher.flush()
        published = self._outbox[:]
        self._outbox.clear()  # the publishers' transport appends to this very list
        return published

    def record(self, frame: Publication | Heartbeat) -> None:
        self.service.record(LINK_ID, frame)

    def answer(self, request: GapRequest | SourceGapRequest, now: float) -> list[ToSubscriber]:
        return list(self.service.answer(LINK_ID, request, now))

    def close(self) -> None:
        for publisher in self._publishers.values():
            publisher.close()
