"""Retention on a timer: ``RetentionWorker`` holds every source's journal to its policy."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from polling import wait_for

from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal import EmbeddedRedis, Journal, RetentionPolicy
from seqrepair.journal.errors import ArchiveWriteError, JournalError
from seqrepair.journal.retainer import RetentionWorker

pytestmark = pytest.mark.redis


def stamper(journal: Journal, source: str, bits: int = 8) -> Callable[[int], None]:
    seq = SourceSequencer(source=source, bits=bits)

    def append(n: int) -> None:
        journal.append([seq.stamp("/a", {"i": i}, timestamp=1000.0 + i) for i in range(n)], bits)

    return append


def test_one_pass_trims_every_source_by_its_count(journal: Journal) -> None:
    stamper(journal, "feed.a")(30)
    stamper(journal, "feed.b", bits=4)(12)
    worker = RetentionWorker(journal, RetentionPolicy(max_count=10))
    reports = {r.source: (r.trimmed_through, r.removed) for r in worker.run_once()}
    assert reports == {"feed.a": (20, 20), "feed.b": (2, 2)}
    kept = journal.read_after("feed.a", 20, limit=100)
    assert [p.source_seq for p in kept] == list(range(21, 31))


def test_the_worker_keeps_trimming_as_publications_arrive(journal: Journal) -> None:
    append = stamper(journal, "feed.a")
    append(15)
    with RetentionWorker(journal, RetentionPolicy(max_count=5), interval=0.05) as worker:
        assert wait_for(lambda: journal.info("feed.a").trimmed_through == 10)
        append(20)
        assert wait_for(lambda: journal.info("feed.a").trimmed_through == 30)
    passes = worker.passes
    time.sleep(0.2)
    assert worker.passes == passes  # stopped: no pass after the context ends
    assert journal.info("feed.a").length == 5


def test_a_failing_archive_trims_nothing_and_is_retried(journal: Journal, tmp_path: Path) -> None:
    stamper(journal, "feed.a")(20)
    root = tmp_path / "archive"
    root.write_text("a file where the archive folder should go")
    policy = RetentionPolicy(max_count=5, archive_root=root)
    with RetentionWorker(journal, policy, interval=0.05) as worker:
        assert wait_for(lambda: worker.failures >= 2)
        assert journal.info("feed.a").trimmed_through == 0
        root.unlink()
        assert wait_for(lambda: journal.info("feed.a").trimmed_through == 15)
    assert sorted(p.name for p in root.rglob("*.parquet")) == [
        "seq-00000000000000000001-00000000000000000015.parquet"
    ]


def test_redis_going_away_does_not_end_retention(private_server: EmbeddedRedis) -> None:
    journal = Journal.from_url(private_server.url)
    stamper(journal, "feed.a")(10)
    worker = RetentionWorker(journal, RetentionPolicy(max_count=4), interval=0.05)
    private_server.stop()
    with pytest.raises(JournalError):
        worker.run_once()
    with worker:
        assert wait_for(lambda: worker.failures >= 2)
        private_server.start()
        assert wait_for(lambda: journal.info("feed.a").trimmed_through == 6)
    journal.close()


def test_bad_interval_is_a_typed_error(journal: Journal) -> None:
    with pytest.raises(InvalidConfigError):
        RetentionWorker(journal, RetentionPolicy(max_count=1), interval=0)


def test_a_source_whose_archive_cannot_be_written_does_not_stop_the_others(
    journal: Journal, tmp_path: Path
) -> None:
    stamper(journal, "feed.a")(5)
    stamper(journal, "feed.b")(5)
    root = tmp_path / "archive"
    root.mkdir()
    (root / "feed.a").write_text("a file where feed.a's archive folder should go")
    worker = RetentionWorker(journal, RetentionPolicy(max_count=1, archive_root=root))
    with pytest.raises(ArchiveWriteError, match=r"feed\.a"):
        worker.run_once()
    assert journal.info("feed.a").trimmed_through == 0  # not archived, so not trimmed
    assert journal.info("feed.b").trimmed_through == 4
    assert not list(root.rglob("*.partial"))
