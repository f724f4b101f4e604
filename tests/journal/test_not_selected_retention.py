"""Retention over a relay's journal: not-selected markers are archived (the archive does not
show their numbers as lost) and a trim through the middle of one keeps it, so its numbers
above the trim stay covered."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import Journal, RetentionPolicy, apply_retention, export_range
from seqrepair.journal.format import decode_archive_table
from seqrepair.journal.selection import NotSelected

pytestmark = pytest.mark.redis

SEL = "/weather/#"


def pub(seq: int) -> Publication:
    return Publication(topic="/weather/x", source="feed.a", source_seq=seq,
                       ptype=PublishType.UPDATE, fields={"n": seq}, timestamp=float(seq))


def relay(journal: Journal) -> None:
    journal.append([pub(3), pub(4), pub(9)], 16, not_selected=SEL)  # 1..2, 5..8 not selected
    journal.append([pub(12)], 16, not_selected=SEL)  # 10..11


def test_a_trim_inside_a_marker_keeps_it(journal: Journal) -> None:
    relay(journal)
    done, removed = journal.trim_through("feed.a", 6, now=1.0)
    assert (done, removed) == (6, 6)  # numbers 1..6 (the entries: markers 1..2, publications
    # 3, 4 go; marker 5..8 stays whole)
    assert journal.info("feed.a").trimmed_through == 6
    assert list(journal.iter_entries("feed.a", 7)) == [
        NotSelected("feed.a", 5, 8, SEL), pub(9), NotSelected("feed.a", 10, 11, SEL), pub(12)]
    assert [p.source_seq for p in journal.iter_range("feed.a", 7)] == [9, 12]
    done, removed = journal.trim_through("feed.a", 8, now=2.0)  # its last number: it goes
    assert (done, removed) == (8, 2)  # numbers 7, 8
    assert [p.source_seq for p in journal.iter_range("feed.a", 9)] == [9, 12]


def test_export_archives_markers_and_names_files_by_what_they_cover(
    journal: Journal, tmp_path: Path
) -> None:
    relay(journal)
    paths = export_range(journal, "feed.a", 1, 12, tmp_path, chunk=6)
    assert [p.name for p in paths] == [
        "seq-00000000000000000001-00000000000000000008.parquet",  # 1..6 ends inside 5..8
        "seq-00000000000000000005-00000000000000000012.parquet",  # 7..12 begins inside it
    ]
    rows = pq.read_table(paths[0]).to_pylist()
    assert [(r["seq"], r["ptype"], dict(r["fields"]) if r["ptype"] == "not-selected" else None)
            for r in rows] == [
        (1, "not-selected", {"through": "2", "selection": '"/weather/#"'}),
        (3, "update", None), (4, "update", None),
        (5, "not-selected", {"through": "8", "selection": '"/weather/#"'}),
    ]
    # the publications decoded from an archive are the publications only
    assert decode_archive_table(pq.read_table(paths[1])) == [pub(9), pub(12)]


def test_retention_by_count_over_a_relay_journal(journal: Journal, tmp_path: Path) -> None:
    relay(journal)
    report = apply_retention(journal, "feed.a", RetentionPolicy(max_count=5, archive_root=tmp_path),
                             now=100.0)
    assert report.trimmed_through == 7
    assert [p.source_seq for p in journal.iter_range("feed.a", 8)] == [9, 12]
    assert [p for path in report.archived for p in decode_archive_table(pq.read_table(path))] == [
        pub(3), pub(4)]
