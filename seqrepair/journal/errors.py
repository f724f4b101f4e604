"""Typed errors of the journal adapter, and the boundary that maps redis-py errors onto them.

Callers never see a ``redis.exceptions`` class: :func:`map_redis_errors` (in the manner of
httpcore's ``map_exceptions``) turns them into :class:`JournalError` subclasses carrying the
source and the operation that failed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from seqrepair.core.errors import SeqRepairError


class JournalError(SeqRepairError):
    """Base of every journal error. ``source`` and ``operation`` say where it happened."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        operation: str = "",
        expected: Any = None,
        got: Any = None,
    ) -> None:
        super().__init__(message, expected=expected, got=got)
        self.source = source
        self.operation = operation


class JournalUnavailableError(JournalError):
    """Redis could not be reached or did not answer in time. Nothing is reported as held."""


class JournalTimeoutError(JournalUnavailableError):
    """Redis did not answer in time: the outcome of a write is unknown until re-read."""


class JournalResponseError(JournalError):
    """Redis answered with an error (out of memory, read-only replica, wrong type, ...)."""


class SequenceConflictError(JournalError):
    """An append that does not continue the journal: ``expected`` is high-water + 1."""


class BitsMismatchError(JournalError):
    """A source journaled with one bit width is appended to with another."""


class JournalCorruptError(JournalError):
    """A journal entry or archive row that does not decode to a publication."""


class ArchiveWriteError(JournalError, OSError):
    """The Parquet archive could not be written (folder not writable, disk full): nothing is
    trimmed that was not archived. Also an OSError, what file errors were before."""


class TrimmedRangeError(JournalError):
    """A read reaching into numbers trimmed by retention (``trimmed_through`` is the last)."""

    def __init__(self, message: str, *, source: str, trimmed_through: int, requested: int) -> None:
        super().__init__(
            message,
            source=source,
            operation="read",
            expected=f"> {trimmed_through}",
            got=requested,
        )
        self.trimmed_through = trimmed_through
        self.requested = requested


class BacklogFullError(JournalUnavailableError):
    """The journal is unreachable and the publisher's bounded window is full."""


class PublicationQueuedError(JournalUnavailableError):
    """``publish()`` stamped and queued ``publication`` but could not journal its batch.

    It is not published: a later ``flush()`` (or publish) journals it and only then hands it to
    the transport. ``pending`` publications are waiting in all. ``stamped``: every publication
    the failed call stamped and queued, in order (a call that publishes several stamped the
    first ``len(stamped)`` of them and nothing after), so publishing them again would duplicate
    them.
    """

    def __init__(
        self,
        message: str,
        *,
        publication: Any,
        pending: int,
        source: str,
        stamped: Sequence[Any] = (),
    ) -> None:
        super().__init__(message, source=source, operation="publish")
        self.publication = publication
        self.pending = pending
        self.stamped = tuple(stamped) or (publication,)


class EmbeddedRedisError(SeqRepairError):
    """The private redis-server could not be started, or died."""


class UnknownLinkError(SeqRepairError):
    """A gap request for a subscriber link the gap-fill service does not know."""


@contextmanager
def map_redis_errors(operation: str, source: str | None = None) -> Iterator[None]:
    """Re-raise redis-py errors raised inside the block as :class:`JournalError` subclasses."""
    # Imported here, not at the top: the errors are needed without redis-py (the AMQP clients
    # without a journal); a block that talks to Redis has it, and a repeat import is a dict read.
    import redis.exceptions as rx

    try:
        yield
    except rx.TimeoutError as exc:
        raise JournalTimeoutError(
            f"redis timed out during {operation}: {exc}", source=source, operation=operation
        ) from exc
    except rx.ConnectionError as exc:  # includes BusyLoadingError and AuthenticationError
        raise JournalUnavailableError(
            f"redis unavailable during {operation}: {exc}", source=source, operation=operation
        ) from exc
    except rx.ResponseError as exc:
        raise JournalResponseError(
            f"redis refused {operation}: {exc}", source=source, operation=operation
        ) from exc
    except (rx.RedisError, rx.RedisClusterException) as exc:  # the second is no RedisError
        raise JournalError(
            f"redis error during {operation}: {exc}", source=source, operation=operation
        ) from exc
