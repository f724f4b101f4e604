"""Retention on a timer: a long-running component keeps its journal within its policy.

:func:`~seqrepair.journal.retention.apply_retention` is one pass over one source, for an
operator or a cron job (``seqrepair journal trim``). :class:`RetentionWorker` runs that pass
over every journaled source every ``interval`` seconds in a daemon thread, so ``seqrepair serve
--retain-count/--retain-age`` holds the journal to its policy by itself. A failing pass (Redis
unreachable, archive folder not writable) is logged and retried at the next interval: retention
never stops the component, and since archiving runs before trimming, a failed archive trims
nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import attrs

from seqrepair.core.config import positive_number
from seqrepair.core.errors import SeqRepairError
from seqrepair.journal.journal import Journal
from seqrepair.journal.retention import RetentionPolicy, TrimReport, apply_retention
from seqrepair.logs import get_logger

log = get_logger(__name__)


@attrs.define
class RetentionWorker:
    """Applies ``policy`` to every source of ``journal`` every ``interval`` seconds.

    Use as a context manager (or :meth:`start` / :meth:`stop`). :meth:`run_once` is one pass,
    also callable directly. ``clock`` gives the ``now`` that ages are measured against.
    """

    journal: Journal
    policy: RetentionPolicy
    interval: float = attrs.field(default=60.0, validator=positive_number)
    clock: Callable[[], float] = time.time
    passes: int = attrs.field(init=False, default=0)
    """Passes completed (successful or not), for operators and tests."""
    failures: int = attrs.field(init=False, default=0)
    _stopping: threading.Event = attrs.field(init=False, factory=threading.Event)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)

    def run_once(self) -> list[TrimReport]:
        """One pass over every journaled source; returns what it trimmed.

        A source that fails is logged and skipped, the others are still trimmed; the error of
        the first failure is raised after the pass, so a caller sees that something failed.
        """
        now = self.clock()
        reports: list[TrimReport] = []
        first_error: SeqRepairError | None = None
        for source in self.journal.sources():
            try:
                reports.append(apply_retention(self.journal, source, self.policy, now=now))
            except SeqRepairError as exc:  # the journal logs what it trims; this what it could not
                log.warning("retention.failed", source=source, error=exc.message)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        return reports

    def start(self) -> RetentionWorker:
        """Start the timer thread; the first pass runs at once."""
        if self._thread is None:
            self._stopping.clear()
            self._thread = threading.Thread(
                target=self._run, name="seqrepair-retention", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, letting a pass in progress finish (up to ``timeout``)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> RetentionWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.run_once()
            except SeqRepairError:
                self.failures += 1  # already logged per source; retried at the next interval
            except Exception:  # a bug or an unexpected client error must not end retention
                self.failures += 1
                log.exception("retention.pass_crashed")
            self.passes += 1
            self._stopping.wait(self.interval)
