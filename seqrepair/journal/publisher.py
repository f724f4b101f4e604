"""The embedded sequencer for publishers: stamp, journal, and only then hand to the transport.

``Publisher(source, journal, bits=32, transport=send, batch_size=1, window=None)``

* On start it reads the source's high-water from the journal and stamps after it, so a
  restarted publisher never reuses a number, even if it crashed between append and send.
* ``publish()`` stamps a publication and queues it. Every ``batch_size`` publications (1 =
  synchronous) the queue is journaled in one atomic append; :meth:`Publisher.flush` journals
  what is queued now. Only after the journal holds a publication is it handed to ``transport``,
  in source order. A publication counts as published exactly then (``published_through``).
* ``window`` bounds the publications stamped but not yet journaled: the in-memory backlog
  while Redis is unreachable. With a window of several batches, up to ``window // batch_size``
  batches are in flight at once (:class:`~seqrepair.journal.pipelined.AppendPipeline`): the
  publisher stamps and encodes the next batch while Redis writes the last. ``publish()`` on
  a full window flushes first; if the journal is still unreachable it raises
  :class:`~seqrepair.journal.errors.BacklogFullError` and stamps nothing (no number is
  consumed). Queued publications are never dropped and never reported
  as published before the journal holds them.
* When an append fails with an unknown outcome (timeout, dropped connection) the next flush
  first re-reads the high-water: what the journal already holds is handed on, the rest is
  appended. An outcome is never guessed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from seqrepair.core.config import check_positive_int
from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.messages import Publication, PublishType
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal.errors import (
    BacklogFullError,
    JournalError,
    JournalResponseError,
    JournalTimeoutError,
    JournalUnavailableError,
    PublicationQueuedError,
    SequenceConflictError,
)
from seqrepair.journal.format import journal_form, plainly_journaled
from seqrepair.journal.pipelined import AppendPipeline, Batch
from seqrepair.logs import get_logger

if TYPE_CHECKING:
    from seqrepair.journal.journal import Journal

Transport = Callable[[Publication], object]


class Publisher:
    """Stamps, journals and hands on the publications of one source.

    ``transport`` is called with each publication, in order, once the journal holds it.
    ``clock`` stamps a timestamp on publications given none (None: leave them without one);
    retention by age reads it.
    """

    def __init__(
        self,
        source: str,
        journal: Journal,
        *,
        bits: int = 32,
        transport: Transport | None = None,
        batch_size: int = 1,
        window: int | None = None,
        clock: Callable[[], float] | None = time.time,
    ) -> None:
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.window = check_positive_int("window", window if window is not None else batch_size)
        if self.window < self.batch_size:
            raise InvalidConfigError(
                "window must be at least batch_size", expected=f">= {batch_size}", got=window
            )
        self.journal = journal
        self.bits = bits
        self.transport = transport
        self.clock = clock
        self.log = get_logger(__name__).bind(source=source)
        info = journal.register_source(source, bits)
        self.sequencer = SourceSequencer(source=source, bits=bits, start_after=info.high_water)
        self.published_through = info.high_water
        """Highest number the journal holds and the transport was given (or started after)."""
        self._unheld: deque[Publication] = deque()  # stamped, not known held; oldest first
        self._sent = 0  # how many of _unheld (from the front) are in flight
        self._pipe = AppendPipeline(journal, bits, depth=max(1, self.window // self.batch_size))
        self._uncertain = False
        self.log.info("publisher.started", high_water=info.high_water, bits=bits)

    @property
    def source(self) -> str:
        """The source this publisher numbers."""
        return self.sequencer.source

    @property
    def pending(self) -> int:
        """Publications stamped but not yet held by the journal (queued or in flight)."""
        return len(self._unheld)

    def publish(
        self,
        topic: str,
        fields: Mapping[str, Any],
        ptype: PublishType | str = PublishType.UPDATE,
        *,
        permtoken: str | None = None,
        timestamp: float | None = None,
    ) -> Publication:
        """Stamp a publication and queue it; journal and hand on a full batch.

        Returns the stamped publication: it is published once ``published_through`` reaches
        its ``source_seq`` (at once when ``batch_size`` is 1 and this returns normally).
        Raises :class:`PublicationQueuedError` (a JournalUnavailableError carrying the stamped
        ``publication``, which stays queued) when the append of a full batch fails (Redis
        unreachable, or answering an error such as out of memory),
        :class:`BacklogFullError` when the window is full and the journal unreachable (nothing
        stamped), and InvalidMessageError for bad input (no number consumed), among it
        :class:`~seqrepair.core.errors.UndeliverableError` for what could be journaled but
        never delivered (:mod:`seqrepair.core.limits`).
        """
        if len(self._unheld) >= self.window:
            try:
                self.flush()
            except JournalUnavailableError as exc:
                raise BacklogFullError(
                    f"journal unreachable and {len(self._unheld)} publications are waiting "
                    f"(window {self.window}): {exc.message}",
                    source=self.source,
                    operation="publish",
                    expected=f"< {self.window} pending",
                    got=len(self._unheld),
                ) from exc
        if not plainly_journaled(topic, fields, permtoken):
            fields = journal_form(topic, fields, permtoken)
        if timestamp is None and self.clock is not None:
            timestamp = self.clock()
        pub = self.sequencer.stamp(topic, fields, ptype, permtoken=permtoken, timestamp=timestamp)
        self._unheld.append(pub)
        if len(self._unheld) - self._sent >= self.batch_size:
            try:
                self._send(wait=False)
            except (JournalUnavailableError, JournalResponseError) as exc:
                raise PublicationQueuedError(
                    f"publication {pub.source_seq} is queued, not published: {exc.message}",
                    publication=pub,
                    pending=len(self._unheld),
                    source=self.source,
                ) from exc
        return pub

    def flush(self) -> int:
        """Journal everything queued and wait until the journal holds it, handing it on.

        Returns how many publications were published by this call. Raises
        JournalUnavailableError (what is not held stays queued) and the journal's other errors.
        """
        return self._send(wait=True)

    def _send(self, *, wait: bool) -> int:
        """Submit full batches (every queued one when ``wait``), then hand on what is held.

        A dropped connection (a restarted Redis, say) is retried once at once on a new one,
        after re-reading the high-water, as redis-py retries its own commands; a timeout is not.
        """
        before = self.published_through
        try:
            self._send_once(wait=wait)
        except JournalTimeoutError:
            raise
        except JournalUnavailableError:
            self._send_once(wait=wait)
        return self.published_through - before

    def _send_once(self, *, wait: bool) -> None:
        try:
            if self._uncertain:
                self._resolve_uncertain()
            while len(self._unheld) - self._sent >= (1 if wait else self.batch_size):
                end = min(self._sent + self.batch_size, len(self._unheld))
                batch = [self._unheld[i] for i in range(self._sent, end)]
                self._sent = end
                self._hand_on_all(self._pipe.submit(batch))
            if wait:
                self._hand_on_all(self._pipe.drain())
        except JournalError as exc:
            self._pipe.abandon()
            self._sent = 0
            self._uncertain = True
            self.log.warning(
                "publisher.append_failed", error=type(exc).__name__, pending=len(self._unheld)
            )
            raise

    def _resolve_uncertain(self) -> int:
        """After a failed append: hand on what the journal turned out to hold.

        The journal is compared by content, not only by number: when another writer of this
        source took the numbers (a stale instance next to a restarted one), what it wrote is
        not ours. Our publications from there on can never be journaled under their numbers:
        they are dropped unpublished, numbering resumes after the journal's high-water and
        :class:`SequenceConflictError` says so.
        """
        high_water, trimmed = self.journal.high_waters([self.source])[self.source]
        self._uncertain = False
        numbered = 0
        while numbered < len(self._unheld) and self._unheld[numbered].source_seq <= high_water:
            numbered += 1
        # numbers retention trimmed meanwhile were held (it trims only what the journal held,
        # archiving it first); only what is still readable can be compared
        held = 0
        while held < numbered and self._unheld[held].source_seq <= trimmed:
            held += 1
        if held < numbered:
            first, last = self._unheld[held].source_seq, self._unheld[numbered - 1].source_seq
            journaled = iter(self.journal.read_range(self.source, first, last))
            for mine, theirs in zip(list(self._unheld)[held:numbered], journaled, strict=False):
                if mine != theirs:
                    break
                held += 1
        if numbered:
            self.log.info("publisher.append_was_held", through=high_water, count=held)
        handed = self._hand_on(held)
        if held < numbered:
            lost, conflict = len(self._unheld), self._unheld[0].source_seq
            self._unheld.clear()
            self._sent = 0
            self.sequencer = SourceSequencer(
                source=self.source, bits=self.bits, start_after=high_water
            )
            self.log.error("publisher.sequence_conflict", through=high_water, dropped=lost)
            raise SequenceConflictError(
                f"another writer of {self.source!r} journaled numbers through {high_water}; "
                f"{lost} publications of this publisher were not published",
                source=self.source,
                expected=high_water + 1,
                got=conflict,
            )
        return handed

    def _hand_on_all(self, results: Iterable[tuple[Batch, int]]) -> None:
        """Hand on every batch the pipeline reports held, even after the transport raised for
        one: each is published all the same (the journal holds it), and the first transport
        error is raised once all are counted."""
        failure: Exception | None = None
        for held, _ in results:
            try:
                self._hand_on(len(held), send=failure is None)
            except Exception as exc:  # the transport's own: what it raises is not ours to judge
                failure = exc
        if failure is not None:
            raise failure

    def _hand_on(self, count: int, *, send: bool = True) -> int:
        """Mark the first ``count`` unheld publications published, then give them to the
        transport (unless not ``send``). If the transport raises, the rest of them are not sent
        live; the journal holds them and subscribers repair the gap from it."""
        if not count:
            return 0
        batch = [self._unheld.popleft() for _ in range(count)]
        self._sent = max(0, self._sent - count)
        self.published_through = batch[-1].source_seq
        if self.transport is not None and send:
            for pub in batch:
                self.transport(pub)
        return count

    def close(self) -> None:
        """Flush what is queued (raises if the journal is unreachable), free the connection."""
        try:
            self.flush()
        finally:
            self._pipe.abandon()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:  # do not journal after a failure in the block; what is queued stays unpublished
            self._pipe.abandon()
