"""A relay's journal appends, in a thread of their own (XEP-0040 §1: the relay journals what
it receives before it serves it).

The relay's event loop used to append each batch it took from its upstream subscriber and
wait for Redis's answer before fanning it out: measured in ``benchmarks/bench_relay.py`` on
a loaded machine, the loop spent 3 to 12 times its own CPU inside that wait (scheduling
delays of redis-server and of the loop's thread, not work), and nothing else moved
meanwhile: Redis idle while the loop fanned out, the loop idle while Redis wrote. Here the
:class:`Journaler`'s thread appends while the event loop fans out what was journaled before:

* the event loop :meth:`~Journaler.submit`\\ s each batch it takes, with the selection its
  skipped numbers are journaled under (the relay's at that moment: a switch of the upstream
  selection changes it for what comes after, never for what is queued) and where its
  upstream subscription started; the thread appends, in order, everything queued under the
  same selection as **one** append (one script call per source: large appends);
* a batch comes back (:meth:`~Journaler.take_done`, the event loop woken) only once the
  journal holds all of it: only then is it fanned out and acknowledged upstream (nothing is
  acknowledged that no journal holds);
* an append whose outcome is unknown (:class:`~seqrepair.amqp.component.journalport.
  NotJournaledError`: Redis away) is tried again, the same batch, every :data:`RETRY`
  seconds, until it goes: the port skips what the journal took of it (it re-reads the
  high-water), and nothing queued after it is tried before it, so a batch's skipped numbers
  are never journaled as not selected past a batch that did not land;
* any other refusal (the journal holds other publications under these numbers) comes back
  as :attr:`Job.error` and the thread stops: the relay stops and says why.

What the journaler holds is bounded by the event loop, which takes no more from its
handover while :attr:`Journaler.pending` publications are queued or in flight (the handover
then fills and the upstream subscriber waits: the upstream pauses the link and repairs it
later, as before).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from seqrepair.amqp.component.journalport import NotJournaledError
from seqrepair.core.errors import SeqRepairError
from seqrepair.core.messages import Publication
from seqrepair.logs import get_logger

log = get_logger("seqrepair.amqp.relay.journaler")

RETRY = 0.2
"""Seconds before an append whose outcome was unknown is tried again."""

MAX_APPEND = 20_000
"""Publications one append takes at most (queued batches are joined up to it)."""


_STOPPED = NotJournaledError("the relay stopped", untouched=True)


class Job:
    """Publications to journal (``pubs``, without link numbers; ``entries`` by index, the
    bytes they came in), the selection their skipped numbers are journaled under
    (``marker``) and where the upstream subscription started (``after``); ``rising``: they
    are one source's, in increasing order, bare (the event loop checked it when it submitted
    them). Once done: :attr:`error` (None: the journal holds them all)."""

    __slots__ = ("after", "entries", "error", "marker", "pubs", "rising")

    def __init__(self, pubs: list[Publication], entries: list[bytes], marker: str | None,
                 after: Mapping[str, int], rising: bool = False) -> None:
        self.pubs = pubs
        self.entries = entries
        self.marker = marker
        self.after = after
        self.rising = rising
        self.error: SeqRepairError | None = None


def bare(pubs: list[Publication]) -> list[Publication]:
    """``pubs`` as journaled and fanned out: no upstream link number, not retransmissions."""
    return [p if p.link_seq is None and not p.retransmit
            else p.with_link(None, retransmit=False) for p in pubs]


class Journaler:
    """Appends ``port``'s batches in a thread (see the module); ``wake()`` (from that thread)
    tells the event loop a batch is done."""

    def __init__(self, port: Any, wake: Callable[[], None], *, retry: float = RETRY) -> None:
        self.port = port
        self._wake = wake
        self.retry = retry
        self._queue: deque[Job] = deque()
        self._done: deque[Job] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.closed = False
        self.pending = 0
        """Publications submitted and not taken back done (the event loop's count)."""
        self.appends = 0
        self.retries = 0

    def submit(self, pubs: list[Publication], entries: list[bytes], marker: str | None,
               after: Mapping[str, int], rising: bool = False) -> None:
        """Queue ``pubs`` (``entries`` by index) to be journaled under ``marker``, after
        everything submitted before (the event loop); ``rising``: see :class:`Job`."""
        job = Job(pubs, entries, marker, dict(after), rising)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="relay-journal",
                                                daemon=True)
                self._thread.start()
            self._queue.append(job)
            self._cond.notify()
        self.pending += len(pubs)

    def take_done(self) -> list[Job]:
        """The batches done since the last call, in the order submitted (the event loop)."""
        with self._cond:
            done = list(self._done)
            self._done.clear()
        self.pending -= sum(len(job.pubs) for job in done)
        return done

    def stop(self) -> None:
        """Stop the thread (what is queued is not journaled; the relay stops)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    # --- the thread ---------------------------------------------------------------------

    def _next(self) -> list[Job] | None:
        """The queued jobs of the next append (one selection), or None once closed."""
        with self._cond:
            while not self._queue and not self.closed:
                self._cond.wait()
            if self.closed:
                return None
            jobs = [self._queue.popleft()]
            count = len(jobs[0].pubs)
            first = jobs[0]
            while (self._queue and self._queue[0].marker == first.marker
                   and self._queue[0].after == first.after
                   and count + len(self._queue[0].pubs) <= MAX_APPEND):
                job = self._queue.popleft()
                jobs.append(job)
                count += len(job.pubs)
            return jobs

    def _run(self) -> None:
        while True:
            jobs = self._next()
            if jobs is None:
                return
            pubs = jobs[0].pubs if len(jobs) == 1 else [p for job in jobs for p in job.pubs]
            failed = self._append(jobs[0], pubs)
            if failed is _STOPPED:
                return
            with self._cond:
                if failed is not None:
                    jobs[0].error = failed
                    jobs = jobs[:1]  # the rest is not journaled either: the relay stops
                    self.closed = True
                self._done.extend(jobs)
            self._wake()
            if failed is not None:
                return

    def _append(self, job: Job, pubs: list[Publication]) -> SeqRepairError | None:
        """Journal ``pubs`` under ``job``'s selection, trying again while the outcome is
        unknown; the refusal that stops the relay, else None."""
        port = self.port
        waited = False
        while True:
            port.not_selected = job.marker
            port.subscribed_after = job.after
            self.appends += 1
            try:
                port.append(pubs, ())
            except NotJournaledError as exc:
                self.retries += 1
                if not waited:
                    log.warning("relayed publications not journaled yet: tried again",
                                count=len(pubs), error=exc.message, every=self.retry)
                waited = True
                with self._cond:
                    if self._cond.wait_for(lambda: self.closed, self.retry):
                        return _STOPPED  # not journaled, never acknowledged
                continue
            except SeqRepairError as exc:
                return exc
            if waited:
                log.info("relayed publications journaled after all", count=len(pubs))
            return None
