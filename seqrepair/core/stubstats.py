"""The subscriber stub's counters, what :attr:`SubscriberStub.stats` returns."""

from __future__ import annotations

import attrs


@attrs.define(on_setattr=attrs.setters.NO_OP)
class StubStats:
    """Counters of what the stub has done. Numbers count link numbers unless named otherwise."""

    delivered: int = 0
    duplicates: int = 0
    heartbeats: int = 0
    gaps_detected: int = 0
    link_repaired: int = 0
    source_repaired: int = 0
    source_covered: int = 0
    requests_sent: int = 0
    source_requests_sent: int = 0
    unrecoverable: int = 0
    resets: int = 0
    overflow_dropped: int = 0
    stray_dropped: int = 0
    max_buffered: int = 0
    sources_trimmed: int = 0  # replays that found part of a source's journal trimmed
    source_continued: int = 0  # replays that stopped at the component's limit and went on
    sources_abandoned: int = 0  # source repairs refused or given up: what they owed is lost
    link_view_lost: int = 0  # frames the link called old and their source proved new
    slots_reopened: int = 0  # originals their source had delivered, in a slot asked for again
    stale_dropped: int = 0  # publications of an older link context (see stub._hold), dropped
    images_requested: int = 0  # image requests made (stubimages)
    images_delivered: int = 0  # item images delivered
    images_outdated: int = 0  # images older than what their source had delivered, not taken
    image_covered: int = 0  # publications an image delivered held: consumed, not delivered
    images_abandoned: int = 0  # image requests given up unanswered (IMAGE_TRIES, or replaced)
    images_refused: int = 0  # image requests rejected for good, or for now until retries ran out
    requests_rejected: int = 0  # request deliveries the component rejected (request_rejected)
    tail_probes: int = 0  # frames the component marked as its tail probe (receive_tail_probe)

    @property
    def repaired(self) -> int:
        """Link numbers repaired, by link range or by source replay."""
        return self.link_repaired + self.source_repaired
