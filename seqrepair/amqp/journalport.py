"""What the component needs from a journal, and an in-memory one for tests without Redis.

The component journals every publication before fan-out and answers source-level gap
requests (XEP-0040 §2.4) by reading the journal after a source number. :class:`JournalPort` is
that narrow interface; :func:`open_journal` adapts the Redis journal of ``seqrepair.journal``
to it, and :class:`MemoryJournal` implements it in memory.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol

import attrs

from seqrepair.core.messages import Publication


class JournalPort(Protocol):
    """The journal as the component sees it. Absolute source numbers throughout."""

    def append(self, publications: Sequence[Publication]) -> None:
        """Store ``publications`` durably; ones already held (same source and number) are
        skipped, so a publisher that journaled first and the component never duplicate."""

    def high_waters(self) -> dict[str, int]:
        """The last number held per source."""

    def first_held(self, source: str) -> int:
        """The oldest number still held for ``source`` (1 if nothing was trimmed)."""

    def read_after(self, source: str, after: int, limit: int) -> list[Publication]:
        """Up to ``limit`` publications of ``source`` numbered after ``after``, in order."""


@attrs.define
class MemoryJournal:
    """A :class:`JournalPort` in a dict of lists (tests, single-process demos)."""

    _seqs: dict[str, list[int]] = attrs.field(factory=dict)
    _pubs: dict[str, list[Publication]] = attrs.field(factory=dict)
    trimmed: dict[str, int] = attrs.field(factory=dict)

    def append(self, publications: Sequence[Publication]) -> None:
        """Store publications, skipping numbers already held."""
        for pub in publications:
            seqs = self._seqs.setdefault(pub.source, [])
            if seqs and pub.source_seq <= seqs[-1]:
                index = bisect.bisect_left(seqs, pub.source_seq)
                if index < len(seqs) and seqs[index] == pub.source_seq:
                    continue
                seqs.insert(index, pub.source_seq)
                self._pubs[pub.source].insert(index, _bare(pub))
                continue
            seqs.append(pub.source_seq)
            self._pubs.setdefault(pub.source, []).append(_bare(pub))

    def high_waters(self) -> dict[str, int]:
        """The last number held per source."""
        return {source: seqs[-1] for source, seqs in self._seqs.items() if seqs}

    def first_held(self, source: str) -> int:
        """Numbers up to ``trimmed[source]`` are gone."""
        return self.trimmed.get(source, 0) + 1

    def read_after(self, source: str, after: int, limit: int) -> list[Publication]:
        """Up to ``limit`` publications after ``after``."""
        seqs = self._seqs.get(source, [])
        start = bisect.bisect_right(seqs, max(after, self.trimmed.get(source, 0)))
        return self._pubs.get(source, [])[start : start + limit]


def _bare(pub: Publication) -> Publication:
    """A publication as journaled: no link number, not a retransmission."""
    if pub.link_seq is None and not pub.retransmit:
        return pub
    return attrs.evolve(pub, link_seq=None, retransmit=False)


class TrimmedError(Exception):
    """Raised by :meth:`JournalPort.read_after` when the requested numbers were trimmed."""


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
            else:  # pragma: no cover - a publisher racing us three times in a row
                raise TrimmedError(f"could not journal {source!r} after three conflicts")

    def high_waters(self) -> dict[str, int]:
        """The last number held per journaled source."""
        sources = self.journal.sources()  # type: ignore[attr-defined]
        waters = self.journal.high_waters(sources)  # type: ignore[attr-defined]
        return {source: hw for source, (hw, _trimmed) in waters.items()}

    def first_held(self, source: str) -> int:
        """One after the source's trim point."""
        info = self.journal.info(source)  # type: ignore[attr-defined]
        if info.bits is not None:
            self.bits_of.setdefault(source, info.bits)
        return int(info.trimmed_through) + 1

    def read_after(self, source: str, after: int, limit: int) -> list[Publication]:
        """Up to ``limit`` publications after ``after``; :class:`TrimmedError` when trimmed."""
        from seqrepair.journal.errors import TrimmedRangeError

        try:
            return list(self.journal.read_after(source, after, limit))  # type: ignore[attr-defined]
        except TrimmedRangeError as exc:
            raise TrimmedError(str(exc)) from exc
