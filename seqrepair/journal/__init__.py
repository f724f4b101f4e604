"""The Redis journal adapter: journal, publisher, gap-fill service, embedded redis-server.

::

    from seqrepair.journal import EmbeddedRedis, Journal, Publisher, GapFillService

    with EmbeddedRedis(data_dir=".seqrepair/redis") as srv, Journal.from_url(srv.url) as journal:
        pub = Publisher("feed.a", journal, bits=16, transport=send, batch_size=100)
        ...
"""

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
from seqrepair.journal.retention import RetentionPolicy, TrimReport, apply_retention, export_range
from seqrepair.journal.server import EmbeddedRedis
from seqrepair.journal.session import open_journal

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
