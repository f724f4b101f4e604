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
            for _attempt in range(3):
                fresh = [p for p in pubs if p.source_seq > self._hw[source]]
                if not fresh:
                    break
                try:
                    self._hw[source] = self.journal.append(fresh, bits)  # type: ignore[attr-defined]
                    break
                except SequenceConflictError:
                    self._hw[source] = self.journal.high_water(source)  # type: ignore[attr-defined]
                    if fresh[0].source_seq > self._hw[source] + 1:
                        raise JournalGapError(
                            f"{source!r}: the journal holds through {self._hw[source]}, "
                            f"this starts at {fresh[0].source_seq}",
                            expected=self._hw[source] + 1, got=fresh[0].source_seq,
                        ) from None

    def high_waters(self) -> dict[str, int]:
        """The last number held per journaled source."""
        sources = self.journal.sources()  # type: ignore[attr-defined]
        waters = self.journal.high_waters(sources)  # type: ignore[attr-defined]
        return {source: hw for source, (hw, _trimmed) in waters.items()}
