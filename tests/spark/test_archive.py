"""Reading the Parquet archive: overlapping files give each (source, seq) once."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal.format import archive_dir, archive_path, encode_archive_table
from seqrepair.spark.reading import archive_files, plan_archive, read_archive, read_journals

pytestmark = pytest.mark.spark


def pubs_of(source: str, first: int, last: int) -> list[Publication]:
    return [
        Publication(
            topic=f"/i/{n % 3}",
            source=source,
            source_seq=n,
            ptype=PublishType.UPDATE,
            fields={"n": n},
            timestamp=float(n),
        )
        for n in range(first, last + 1)
    ]


def write(root: Path, source: str, first: int, last: int, name: str | None = None) -> None:
    path = archive_path(root, source, first, last)
    if name is not None:
        path = path.with_name(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(encode_archive_table(pubs_of(source, first, last), 16), path)


def keys(frame) -> list[tuple[str, int]]:
    return sorted((r["source"], r["seq"]) for r in frame.select("source", "seq").collect())


SPANS = {
    "feed.a": [(1, 10), (5, 20), (15, 30), (1, 30), (25, 25), (31, 40), (38, 45)],
    "feed/b": [(1, 5), (2, 4), (4, 9), (12, 14)],
}


def test_plan_reads_each_number_from_one_file(tmp_path):
    for source, spans in SPANS.items():
        for first, last in spans:
            write(tmp_path, source, first, last)
    plan = plan_archive(archive_files(str(tmp_path)))
    assert plan is not None
    taken: list[tuple[str, int]] = []
    for paths, keep in plan:
        if keep is None:
            for path in paths:
                table = pq.read_table(path, columns=["source", "seq"])
                taken += zip(table["source"].to_pylist(), table["seq"].to_pylist(), strict=True)
        else:
            taken += [(s, n) for s, a, b in keep for n in range(a, b + 1)]
    expected = [("feed.a", n) for n in range(1, 46)]
    expected += [("feed/b", n) for n in (*range(1, 10), 12, 13, 14)]
    assert sorted(taken) == sorted(expected)  # every number, once
    assert plan[0][1] is None  # files that overlap nothing are read whole, unfiltered
    used = {p for paths, _ in plan for p in paths}
    assert str(archive_path(tmp_path, "feed.a", 1, 10)) not in used  # inside 1..30
    assert str(archive_path(tmp_path, "feed/b", 2, 4)) not in used  # inside 1..5


def test_overlapping_files_read_once(spark, tmp_path):
    for source, spans in SPANS.items():
        for first, last in spans:
            write(tmp_path, source, first, last)
    expected = [("feed.a", n) for n in range(1, 46)]
    expected += [("feed/b", n) for n in (*range(1, 10), 12, 13, 14)]
    assert keys(read_archive(spark, str(tmp_path))) == expected
    assert keys(read_journals(spark, archive=str(tmp_path))) == expected


def test_file_names_without_ranges_are_deduplicated_anyway(spark, tmp_path):
    write(tmp_path, "feed.a", 1, 10)
    write(tmp_path, "feed.a", 5, 12, name="seq-copy.parquet")
    assert (archive_dir(tmp_path, "feed.a") / "seq-copy.parquet").exists()
    assert plan_archive(archive_files(str(tmp_path))) is None
    assert keys(read_archive(spark, str(tmp_path))) == [("feed.a", n) for n in range(1, 13)]


def test_a_source_whose_name_starts_with_a_dot_is_read_too(spark, tmp_path):
    write(tmp_path, ".feed", 1, 7)
    write(tmp_path, "feed.a", 1, 3)
    assert archive_dir(tmp_path, ".feed").name.startswith(".")
    expected = [(".feed", n) for n in range(1, 8)] + [("feed.a", n) for n in range(1, 4)]
    assert keys(read_archive(spark, str(tmp_path))) == expected


def test_no_archive_folder_reads_as_an_empty_archive(spark, tmp_path):
    assert archive_files(str(tmp_path / "none")) == []
    assert read_archive(spark, str(tmp_path / "none")).count() == 0
