"""Retention: trim each source's journal by count and by age, archiving to Parquet first.

``RetentionPolicy(max_count=1_000_000, max_age=86_400.0, archive_root="archive")``. For a
source, the numbers to trim are those beyond the newest ``max_count`` and those whose
publication timestamp is older than ``now - max_age`` (entries without a timestamp are trimmed
only together with a later, timestamped one that is too old). With ``archive_root`` set, the
range is first written to Parquet (see :mod:`seqrepair.journal.format`); if that fails nothing
is trimmed. The trim record (``trimmed_through``, ``trimmed_at``) is what turns later requests
for those numbers into ``GapError("trimmed")``; a bounded summary of the items the range held
(:mod:`seqrepair.journal.trimsummary`) lets that error name them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from seqrepair.core.config import optional, positive_int
from seqrepair.core.errors import InvalidConfigError
from seqrepair.journal.errors import ArchiveWriteError, JournalError
from seqrepair.journal.format import archive_path, encode_archive_table
from seqrepair.journal.selection import NotSelected
from seqrepair.journal.trimsummary import record_trim
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal

log = get_logger(__name__)


def _optional_positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidConfigError(
            f"{type(instance).__name__}.{attribute.name} must be a positive number or None",
            expected="> 0",
            got=value,
        )


@attrs.frozen
class RetentionPolicy:
    """How much of each source's journal to keep, and where to archive what goes."""

    max_count: int | None = attrs.field(default=None, validator=optional(positive_int))
    max_age: float | None = attrs.field(default=None, validator=_optional_positive)
    archive_root: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    chunk: int = attrs.field(default=100_000, validator=positive_int)
    """Most publications per archive file."""


@attrs.frozen
class TrimReport:
    """What one retention pass did to one source."""

    source: str
    trimmed_through: int
    removed: int
    archived: tuple[Path, ...]


def _span(entry: Any) -> tuple[int, int]:
    """The first and last number a journal entry (a publication or a marker) covers."""
    if isinstance(entry, NotSelected):
        return entry.first, entry.last
    return entry.source_seq, entry.source_seq


def export_range(
    journal: Journal, source: str, first: int, last: int, root: str | Path, *, chunk: int = 100_000
) -> list[Path]:
    """Write ``source``'s publications ``first``..``last`` to Parquet files under ``root``
    (and a relay's not-selected markers there: :mod:`seqrepair.journal.format`).

    One file per ``chunk`` numbers, written to a temporary name and renamed, so a reader never
    sees half a file. Returns the files written. Raises :class:`ArchiveWriteError` when a file
    cannot be written (the files written before it stay).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InvalidConfigError("chunk must be a positive integer", expected=">= 1", got=chunk)
    bits = journal.info(source).bits
    if bits is None:
        raise JournalError(f"source {source!r} is not journaled", source=source, operation="export")
    written: list[Path] = []
    start = first
    while start <= last:
        end = min(last, start + chunk - 1)
        # a relay's not-selected markers too (one reaching back before start included), or
        # the archive would show the numbers they cover as lost; the file is named by the
        # numbers its entries cover
        pubs = list(journal.iter_entries(source, start, end))
        if pubs:
            path = archive_path(root, source, _span(pubs[0])[0], _span(pubs[-1])[1])
            partial = path.with_name(path.name + ".partial")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(encode_archive_table(pubs, bits), partial)
                partial.replace(path)
            except (OSError, pa.ArrowException) as exc:
                with contextlib.suppress(OSError):  # no half-written file is left behind
                    partial.unlink(missing_ok=True)
                raise ArchiveWriteError(
                    f"cannot write the archive file {path}: {exc}",
                    source=source,
                    operation="export",
                ) from exc
            written.append(path)
            log.info("journal.archived", source=source, first=start, last=end, path=str(path))
        start = end + 1
    return written


def _age_cutoff(journal: Journal, source: str, first: int, last: int, cutoff: float) -> int:
    """The last number <= ``last`` whose timestamp is older than ``cutoff`` (scans forward)."""
    through = first - 1
    for pub in journal.iter_range(source, first, last):
        if pub.timestamp is None:
            continue
        if pub.timestamp >= cutoff:
            break
        through = pub.source_seq
    return through


def apply_retention(
    journal: Journal, source: str, policy: RetentionPolicy, *, now: float
) -> TrimReport:
    """Trim ``source`` by ``policy`` at time ``now`` (archiving first when configured)."""
    info = journal.info(source)
    first = info.trimmed_through + 1
    through = info.trimmed_through
    if policy.max_count is not None:
        through = max(through, info.high_water - policy.max_count)
    if policy.max_age is not None and first <= info.high_water:
        through = max(
            through, _age_cutoff(journal, source, first, info.high_water, now - policy.max_age)
        )
    if through <= info.trimmed_through:
        return TrimReport(source, info.trimmed_through, 0, ())
    archived: list[Path] = []
    if policy.archive_root is not None:
        archived = export_range(
            journal, source, first, through, policy.archive_root, chunk=policy.chunk
        )
    # the items the range held, so a later GAP-ERROR trimmed can name them (trimsummary.py)
    record_trim(journal, source, first, through)
    done, removed = journal.trim_through(source, through, now=now)
    return TrimReport(source, done, removed, tuple(archived))
