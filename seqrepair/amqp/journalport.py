"""Journaling "before fan-out" on top of the Redis journal of :mod:`seqrepair.journal`.

The journal accepts only contiguous continuations of a source; publications reach the component
after their publisher may already have journaled them (and again after a reconnect).
:class:`RedisJournalPort` appends what the journal does not hold yet and skips the rest, so
journaling twice never duplicates and never fails. Source-level repair reads go through the
journal's own gap-fill service.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from seqrepair.amqp.errors import AmqpAdapterError
from seqrepair.core.messages import Publication


class JournalPort(Protocol):
    """The journal as the component sees it. Absolute source numbers throughout."""

    def append(self, publications: Sequence[Publication]) -> None:
        """Store ``publications`` durably; ones already held (same source and number) are
        skipped, so a publisher that journaled first and the component never duplicate."""

    def high_waters(self) -> dict[str, int]:
        """The last number held per source."""


def _bare(pub: Publication) -> Publication:
    """A publication as journaled: no link number, not a retransmission."""
    if pub.link_seq is None and not pub.retransmit:
        return pub
    return pub.with_link(None, retransmit=False)


class JournalGapError(AmqpAdapterError):
    """A publisher skipped numbers: the journal only takes contiguous continuations."""

    condition = "amqp:precondition-failed"


@attrs.define
class RedisJournalPort:
    """:class:`JournalPort` over the Redis :class:`seqrepair.journal.journal.Journal`.

    The journal accepts only contiguous continuations; this adapter skips what it already
    holds (a publisher that journaled first) and appends the rest per source, so a component
    journaling "before fan-out" never duplicates and never fails on a publisher's own append.
    """

    journal: object
    bits_of: dict[str, int] = attrs.field(factory=dict)
    default_bits: int = 32
    _hw: dict[str, int] = attrs.field(factory=dict)
    _ahead: set[str] = attrs.field(factory=set)
    """Sources whose publisher journals first (our last append found it already held): for
    those the high-water is read before appending, not learnt from a refused append, which
    would cost the encoding of the whole batch and a script run in Redis for nothing."""

    @classmethod
    def from_url(cls, url: str) -> RedisJournalPort:
        """Connect to the Redis journal at ``url``."""
        from seqrepair.journal.journal import Journal

        return cls(Journal.from_url(url))

    def append(self, publications: Sequence[Publication]) -> None:
        """Append, per source, the part of ``publications`` the journal does not hold yet."""
        from seqrepair.journal.errors import SequenceConflictError

        runs: dict[str, list[Publication]] = {}
        for pub in publications:
            runs.setdefault(pub.source, []).append(_bare(pub))
        for source, pubs in runs.items():
            if source not in self._hw:
                self._hw[source] = self.journal.high_water(source)  # type: ignore[attr-defined]
            bits = self.bits_of.get(source, self.default_bits)
            held = self._hw[source]
            fresh = [p for p in pubs if p.source_seq > held]
            if fresh and source in self._ahead:
                held = self._hw[source] = self.journal.high_water(source)  # type: ignore[attr-defined]
                fresh = [p for p in pubs if p.source_seq > held]
            for _attempt in range(3):
                if not fresh:
                    break
                try:
                    self._hw[source] = self.journal.append(fresh, bits)  # type: ignore[attr-defined]
                    self._ahead.discard(source)
                    break
                except SequenceConflictError:
                    held = self._hw[source] = self.journal.high_water(source)  # type: ignore[attr-defined]
                    if fresh[0].source_seq > held + 1:
                        raise JournalGapError(
                            f"{source!r}: the journal holds through {held}, "
                            f"this starts at {fresh[0].source_seq}",
                            expected=held + 1, got=fresh[0].source_seq,
                        ) from None
                    self._ahead.add(source)
                    fresh = [p for p in pubs if p.source_seq > held]
            else:
                if fresh:  # never fan out what the journal may not hold
                    raise JournalGapError(
                        f"{source!r}: the journal moved under three appends; not journaled",
                        expected=held + 1, got=fresh[0].source_seq,
                    )

    def high_waters(self) -> dict[str, int]:
        """The last number held per journaled source."""
        sources = self.journal.sources()  # type: ignore[attr-defined]
        waters = self.journal.high_waters(sources)  # type: ignore[attr-defined]
        return {source: hw for source, (hw, _trimmed) in waters.items()}
