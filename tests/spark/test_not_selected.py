"""A relay's journal in Spark: the numbers its not-selected markers cover (selection.py) are
read, rebuilt over and audited as *not selected*, never as publications, gaps or loss."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import RetentionPolicy, apply_retention
from seqrepair.spark.audit import audit
from seqrepair.spark.reading import read_journal, read_journals
from seqrepair.spark.rebuild import collect_images, rebuild_images
from seqrepair.spark.schema import NOT_SELECTED_PTYPE

pytestmark = [pytest.mark.spark, pytest.mark.redis]

SEL = "/weather/#"


def pub(seq: int, topic: str = "/weather/x", ptype: PublishType = PublishType.UPDATE):
    return Publication(topic=topic, source="feed.a", source_seq=seq, ptype=ptype,
                       fields={"n": seq}, timestamp=float(seq))


def relay_journal(journal) -> None:
    """feed.a as a relay journals it: 1..2, 5..8 and 10..11 not selected, 3, 4, 9, 12 held."""
    journal.append([pub(3, ptype=PublishType.IMAGE), pub(4), pub(9)], 16, not_selected=SEL)
    journal.append([pub(12)], 16, not_selected=SEL)


def test_markers_are_rows_of_their_own_kind_once_each(spark, journal, redis_url):
    relay_journal(journal)
    for size in (1, 3, 50):  # partitions starting inside markers
        frame = read_journal(spark, redis_url, partition_size=size, page_size=2)
        rows = sorted((r["seq"], r["ptype"]) for r in frame.collect())
        assert rows == [(1, NOT_SELECTED_PTYPE), (3, "image"), (4, "update"),
                        (5, NOT_SELECTED_PTYPE), (9, "update"), (10, NOT_SELECTED_PTYPE),
                        (12, "update")], size
    marker = frame.where(F.col("seq") == 5).first()
    assert marker["fields"] == {"through": "8", "selection": '"/weather/#"'}
    assert marker["topic"] == ""


def test_rebuild_ignores_markers(spark, journal, redis_url):
    relay_journal(journal)
    images = collect_images(rebuild_images(read_journal(spark, redis_url)))
    assert list(images) == ["/weather/x"]
    assert images["/weather/x"] == {"n": 12}


def test_audit_reports_not_selected_apart_from_gaps(spark, journal, redis_url):
    relay_journal(journal)
    # the reader yields every number or fails, so a real gap in a relay's journal (9, neither
    # journaled nor covered) is made by cutting it from what was read
    frame = read_journal(spark, redis_url).where(F.col("seq") != 9)
    report = audit(spark, frame)
    gaps = sorted(tuple(r) for r in report.gaps.collect())
    assert gaps == [("feed.a", 1, 2, 2, "not-selected"), ("feed.a", 5, 8, 4, "not-selected"),
                    ("feed.a", 9, 9, 1, "gap"), ("feed.a", 10, 11, 2, "not-selected")]
    (row,) = report.sources.collect()
    assert row["publications"] == 3
    assert (row["gap_count"], row["gap_numbers"]) == (1, 1)
    assert row["not_selected_numbers"] == 8
    assert (row["first_seq"], row["last_seq"]) == (3, 12)
    assert row["duplicates"] == 0
    items = {r["topic"]: r for r in report.items.collect()}
    assert list(items) == ["/weather/x"]
    assert items["/weather/x"]["publications"] == 3
    digest = report.to_dict()
    assert [(g["first"], g["kind"]) for g in digest["gaps"]] == [(9, "gap")]
    assert [g["first"] for g in digest["not_selected"]] == [1, 5, 10]
    text = report.summary()
    assert "feed.a: 9..9 (1, gap)" in text
    assert "feed.a: 5..8 (4, not-selected)" in text.split("Not selected by a relay")[1]


def test_archived_markers_read_back_and_audit(spark, journal, redis_url, tmp_path):
    relay_journal(journal)
    root = tmp_path / "archive"
    apply_retention(journal, "feed.a", RetentionPolicy(max_count=3, archive_root=root),
                    now=100.0)  # archives and trims 1..9
    assert journal.info("feed.a").trimmed_through == 9
    frame = read_journals(spark, url=redis_url, archive=str(root))
    rows = sorted((r["seq"], r["ptype"]) for r in frame.collect())
    assert rows == [(1, NOT_SELECTED_PTYPE), (3, "image"), (4, "update"),
                    (5, NOT_SELECTED_PTYPE), (9, "update"), (10, NOT_SELECTED_PTYPE),
                    (12, "update")]
    report = audit(spark, frame)
    kinds = {(r["first"], r["kind"]) for r in report.gaps.collect()}
    assert kinds == {(1, "not-selected"), (5, "not-selected"), (10, "not-selected")}


@pytest.mark.parametrize("archived", [False, True])
def test_a_trim_inside_a_marker_leaves_it_covering_once(
    spark, journal, redis_url, tmp_path, archived
):
    relay_journal(journal)
    root = tmp_path / "archive"
    policy = RetentionPolicy(max_count=6, archive_root=root if archived else None)
    assert apply_retention(journal, "feed.a", policy, now=100.0).trimmed_through == 6
    frame = (read_journals(spark, url=redis_url, archive=str(root)) if archived
             else read_journal(spark, redis_url, partition_size=2))
    rows = sorted((r["seq"], r["ptype"], r["fields"].get("through")) for r in frame.collect()
                  if r["ptype"] == NOT_SELECTED_PTYPE)
    if archived:  # 5..8: 5..6 from the archive, 7..8 from Redis (trimmed through 6)
        assert rows == [(1, NOT_SELECTED_PTYPE, "2"), (5, NOT_SELECTED_PTYPE, "6"),
                        (7, NOT_SELECTED_PTYPE, "8"), (10, NOT_SELECTED_PTYPE, "11")]
    else:
        assert rows == [(7, NOT_SELECTED_PTYPE, "8"), (10, NOT_SELECTED_PTYPE, "11")]
    report = audit(spark, frame)
    (row,) = report.sources.collect()
    assert (row["gap_count"], row["duplicates"]) == (0, 0)
    assert row["not_selected_numbers"] == (8 if archived else 4)
    assert row["trimmed_numbers"] == (0 if archived else 6)
    assert row["publications"] == (4 if archived else 2)
