"""The Redis journal adapter: journal, publisher, gap-fill service, embedded redis-server.

::

    from seqrepair.journal import EmbeddedRedis, Journal, Publisher, GapFillService

    with EmbeddedRedis(data_dir=".seqrepair/redis") as srv, Journal.from_url(srv.url) as journal:
        pub = Publisher("feed.a", journal, bits=16, transport=send, batch_size=100)
        ...

Importing this package imports nothing else: each name below loads its module on first use, so
the Redis-free parts (errors, the record format, the gap-fill service and the publisher, which
take a journal built elsewhere) work without redis-py installed; only building a
:class:`Journal` (or a position, subscription or topic store) needs it (``seqrepair[redis]``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

_HOMES = {
    "ArchiveWriteError": "seqrepair.journal.errors",
    "BacklogFullError": "seqrepair.journal.errors",
    "BitsMismatchError": "seqrepair.journal.errors",
    "EmbeddedRedisError": "seqrepair.journal.errors",
    "JournalCorruptError": "seqrepair.journal.errors",
    "JournalError": "seqrepair.journal.errors",
    "JournalResponseError": "seqrepair.journal.errors",
    "JournalTimeoutError": "seqrepair.journal.errors",
    "JournalUnavailableError": "seqrepair.journal.errors",
    "PublicationQueuedError": "seqrepair.journal.errors",
    "SequenceConflictError": "seqrepair.journal.errors",
    "TrimmedRangeError": "seqrepair.journal.errors",
    "UnknownLinkError": "seqrepair.journal.errors",
    "GapFillService": "seqrepair.journal.gapfill",
    "Replay": "seqrepair.journal.gapfill",
    "SubscriberLink": "seqrepair.journal.gapfill",
    "Journal": "seqrepair.journal.journal",
    "SourceInfo": "seqrepair.journal.journal",
    "Publisher": "seqrepair.journal.publisher",
    "RetentionPolicy": "seqrepair.journal.retention",
    "TrimReport": "seqrepair.journal.retention",
    "apply_retention": "seqrepair.journal.retention",
    "export_range": "seqrepair.journal.retention",
    "EmbeddedRedis": "seqrepair.journal.server",
    "open_journal": "seqrepair.journal.session",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


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
