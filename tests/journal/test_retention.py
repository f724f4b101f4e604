"""Retention by count and age, with the Parquet export running before the trim."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from seqrepair.core.errors import InvalidConfigError
from seqrepair.core.sequencers import SourceSequencer
from seqrepair.journal import (
    ArchiveWriteError,
    Journal,
    RetentionPolicy,
    apply_retention,
    export_range,
)
from seqrepair.journal.format import archive_dir, decode_archive_table

pytestmark = pytest.mark.redis


def fill(journal: Journal, n: int, source: str = "feed/a") -> list:
    seq = SourceSequencer(source=source, bits=8)
    pubs = [seq.stamp("/a", {"i": i, "g": None}, timestamp=1000.0 + i) for i in range(n)]
    journal.append(pubs, 8)
    return pubs


def test_trim_by_count_archives_first(journal: Journal, tmp_path: Path) -> None:
    pubs = fill(journal, 300)
    policy = RetentionPolicy(max_count=100, archive_root=tmp_path, chunk=120)
    report = apply_retention(journal, "feed/a", policy, now=5000.0)
    assert (report.trimmed_through, report.removed) == (200, 200)
    assert [p.name for p in report.archived] == [
        "seq-00000000000000000001-00000000000000000120.parquet",
        "seq-00000000000000000121-00000000000000000200.parquet",
    ]
    assert report.archived[0].parent == archive_dir(tmp_path, "feed/a")
    assert report.archived[0].parent.name == "feed%2Fa"
    archived = [p for path in report.archived for p in decode_archive_table(pq.read_table(path))]
    assert archived == pubs[:200]
    assert journal.read_after("feed/a", 200, limit=1000) == pubs[200:]
    again = apply_retention(journal, "feed/a", policy, now=5001.0)
    assert again.removed == 0
    assert again.archived == ()


def test_trim_by_age(journal: Journal) -> None:
    fill(journal, 50)  # timestamps 1000..1049
    report = apply_retention(journal, "feed/a", RetentionPolicy(max_age=10.0), now=1045.0)
    assert report.trimmed_through == 35  # ts 1000..1034 are older than 1035
    assert journal.info("feed/a").trimmed_at == 1045.0


def test_failed_export_trims_nothing(journal: Journal, tmp_path: Path) -> None:
    fill(journal, 20)
    blocker = tmp_path / "root"
    blocker.write_text("a file where the archive folder should go")
    with pytest.raises(ArchiveWriteError, match=r"Not a directory"):
        apply_retention(
            journal, "feed/a", RetentionPolicy(max_count=5, archive_root=blocker), now=0.0
        )
    assert journal.info("feed/a").trimmed_through == 0


def test_export_range_only(journal: Journal, tmp_path: Path) -> None:
    pubs = fill(journal, 30)
    [path] = export_range(journal, "feed/a", 11, 20, tmp_path)
    assert decode_archive_table(pq.read_table(path)) == pubs[10:20]
    assert journal.info("feed/a").trimmed_through == 0


@pytest.mark.parametrize(
    "bad",
    [{"max_count": 0}, {"max_count": 0.5}, {"max_count": True}, {"max_age": -1.0},
     {"max_age": float("nan")}, {"chunk": 0}, {"chunk": 0.5}, {"chunk": 2.5}],
)
def test_bad_policy(bad: dict) -> None:
    with pytest.raises(InvalidConfigError):
        RetentionPolicy(**bad)


@pytest.mark.parametrize("chunk", [0, -1, 0.5])
def test_an_export_in_chunks_of_no_whole_number_is_refused(
    journal: Journal, tmp_path: Path, chunk: object
) -> None:
    fill(journal, 3)
    with pytest.raises(InvalidConfigError):
        export_range(journal, "feed/a", 1, 3, tmp_path, chunk=chunk)  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())
