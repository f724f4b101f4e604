"""What a :class:`~seqrepair.amqp.client.Subscriber` reports: its stub's counters and its own."""

from __future__ import annotations

import attrs

from seqrepair.core.stubstats import StubStats


@attrs.define
class SubscriberReport:
    """What a subscriber saw: the stub's counters plus the adapter's own."""

    delivered: int = 0
    duplicates: int = 0
    gaps_detected: int = 0
    repaired: int = 0
    requests_sent: int = 0
    source_requests_sent: int = 0
    source_continued: int = 0
    resets: int = 0
    unrecoverable: int = 0
    sources_abandoned: int = 0  # source repairs refused or given up (see Unrecoverable events)
    link_view_lost: int = 0  # frames the link called old and their source proved new
    images_requested: int = 0  # image requests made (SNAPSHOT)
    images_delivered: int = 0  # item images handed to the application
    image_covered: int = 0  # publications an image held: consumed, not delivered
    images_abandoned: int = 0  # image requests given up without an answer
    images_refused: int = 0  # image requests rejected for good, or until retries ran out
    connections: int = 0
    disconnections: int = 0
    paused: int = 0
    rejected: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return attrs.asdict(self)

    def update(self, stats: StubStats) -> SubscriberReport:
        """The stub's counters ``stats`` merged in; returns self."""
        self.delivered = stats.delivered
        self.duplicates = stats.duplicates
        self.gaps_detected = stats.gaps_detected
        self.repaired = stats.link_repaired + stats.source_repaired
        self.requests_sent = stats.requests_sent
        self.source_requests_sent = stats.source_requests_sent
        self.source_continued = stats.source_continued
        self.resets = stats.resets
        self.unrecoverable = stats.unrecoverable
        self.sources_abandoned = stats.sources_abandoned
        self.link_view_lost = stats.link_view_lost
        self.images_requested = stats.images_requested
        self.images_delivered = stats.images_delivered
        self.image_covered = stats.image_covered
        self.images_abandoned = stats.images_abandoned
        self.images_refused = stats.images_refused
        return self
