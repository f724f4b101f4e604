"""The Redis journal adapter: journal, publisher, gap-fill service, embedded redis-server.

::

    from seqrepair.journal import EmbeddedRedis, Journal, Publisher, GapFillService

    with EmbeddedRedis(data_dir=".seqrepair/redis") as srv, Journal.from_url(srv.url) as journal:
        pub = Publisher("feed.a", journal, bits=16, transport=send, batch_size=100)
        ...

The names are imported on first use (PEP 562): importing the package (as the ``seqrepair``
parser does for :mod:`seqrepair.journal.commands`) imports no redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqrepair.lazy import lazy_exports

if TYPE_CHECKING:
    from seqrepair.journal.errors import (
        ArchiveWriteError,
        BacklogFullError,
        BitsMismatchError,
        EmbeddedRedisError,
        JournalCorruptError,
        JournalError,
        JournalResponseError,
        JournalTimeoutError,
        JournalUnavailableError,
        PublicationQueuedError,
        SequenceConflictError,
        TrimmedRangeError,
        UnknownLinkError,
    )
    from seqrepair.journal.gapfill import GapFillService, Replay, SubscriberLink
    from seqrepair.journal.journal import Journal, SourceInfo
    from seqrepair.journal.publisher import Publisher
    from seqrepair.journal.retention import (
        RetentionPolicy,
        TrimReport,
        apply_retention,
        export_range,
    )
    from seqrepair.journal.server import EmbeddedRedis
    from seqrepair.journal.session import open_journal

_LAZY = {
    "ArchiveWriteError": "seqrepair.journal.errors",
    "BacklogFullError": "seqrepair.journal.errors",
    "BitsMismatchError": "seqrepair.journal.errors",
    "EmbeddedRedis": "seqrepair.journal.server",
    "EmbeddedRedisError": "seqrepair.journal.errors",
    "GapFillService": "seqrepair.journal.gapfill",
    "Journal": "seqrepair.journal.journal",
    "JournalCorruptError": "seqrepair.journal.errors",
    "JournalError": "seqrepair.journal.errors",
    "JournalResponseError": "seqrepair.journal.errors",
    "JournalTimeoutError": "seqrepair.journal.errors",
    "JournalUnavailableError": "seqrepair.journal.errors",
    "PublicationQueuedError": "seqrepair.journal.errors",
    "Publisher": "seqrepair.journal.publisher",
    "Replay": "seqrepair.journal.gapfill",
    "RetentionPolicy": "seqrepair.journal.retention",
    "SequenceConflictError": "seqrepair.journal.errors",
    "SourceInfo": "seqrepair.journal.journal",
    "SubscriberLink": "seqrepair.journal.gapfill",
    "TrimReport": "seqrepair.journal.retention",
    "TrimmedRangeError": "seqrepair.journal.errors",
    "UnknownLinkError": "seqrepair.journal.errors",
    "apply_retention": "seqrepair.journal.retention",
    "export_range": "seqrepair.journal.retention",
    "open_journal": "seqrepair.journal.session",
}
"""Each public name and the module that defines it."""

__all__ = [
    "ArchiveWriteError",
    "BacklogFullError",
    "BitsMismatchError",
    "EmbeddedRedis",
    "EmbeddedRedisError",
    "GapFillService",
    "Journal",
    "JournalCorruptError",
    "JournalError",
    "JournalResponseError",
    "JournalTimeoutError",
    "JournalUnavailableError",
    "PublicationQueuedError",
    "Publisher",
    "Replay",
    "RetentionPolicy",
    "SequenceConflictError",
    "SourceInfo",
    "SubscriberLink",
    "TrimReport",
    "TrimmedRangeError",
    "UnknownLinkError",
    "apply_retention",
    "export_range",
    "open_journal",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
