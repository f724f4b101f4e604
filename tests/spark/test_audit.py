"""The journal audit: gaps, trimmed ranges, duplicates, out-of-order arrivals, item counts."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from seqrepair.cli import main
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import RetentionPolicy, apply_retention
from seqrepair.spark.audit import audit
from seqrepair.spark.reading import read_journal, read_journals
from seqrepair.spark.schema import PUBLISH_TYPES, with_trim_record

from .journals import to_frame

pytestmark = pytest.mark.spark


def pub(source, seq, ptype=PublishType.UPDATE, topic="/t", ts=None):
    return Publication(
        topic=topic, source=source, source_seq=seq, ptype=ptype, fields={"x": seq}, timestamp=ts
    )


@pytest.fixture(scope="module")
def report(spark):
    held_a = [1, 2, 3, 7, 8, 12]  # gaps 4..6 and 9..11
    entries = [(pub("feed.a", n, ts=float(n)), 16) for n in held_a]
    entries.append((pub("feed.a", 8, ts=8.0), 16))  # a duplicate
    entries.append((pub("feed.a", 13, ts=2.5), 16))  # stamped before 7, 8 and 12
    # feed.b: 1..5 trimmed, 6..9 missing -> trimmed 1..5 and a gap 6..9
    entries += [
        (pub("feed.b", 10, PublishType.IMAGE, topic="/u"), 3),
        (pub("feed.b", 11, PublishType.CORRECTION, topic="/u"), 3),
        (pub("feed.b", 12, PublishType.DROP, topic="/u"), 3),
        (pub("feed.b", 13, PublishType.SNAPSHOT, topic="/v"), 3),
    ]
    return audit(spark, to_frame(spark, entries), trimmed_through={"feed.b": 5})


def test_gaps_and_trimmed_ranges(report):
    gaps = sorted(tuple(r) for r in report.gaps.collect())
    assert gaps == [
        ("feed.a", 4, 6, 3, "gap"),
        ("feed.a", 9, 11, 3, "gap"),
        ("feed.b", 1, 5, 5, "trimmed"),
        ("feed.b", 6, 9, 4, "gap"),
    ]


def test_duplicates_and_out_of_order(report):
    assert [tuple(r) for r in report.duplicates.collect()] == [("feed.a", 8, 2)]
    ooo = [tuple(r) for r in report.out_of_order.collect()]
    assert ooo == [("feed.a", 13, 2.5, 12.0)]


def test_per_source_counts(report):
    rows = {r["source"]: r.asDict() for r in report.sources.collect()}
    a, b = rows["feed.a"], rows["feed.b"]
    assert (a["publications"], a["distinct_seqs"], a["first_seq"], a["last_seq"]) == (8, 7, 1, 13)
    assert (a["gap_count"], a["gap_numbers"], a["duplicates"], a["out_of_order"]) == (2, 6, 1, 1)
    assert a["update"] == 8
    assert (b["bits"], b["trimmed_through"], b["trimmed_numbers"], b["gap_numbers"]) == (3, 5, 5, 4)
    assert (b["image"], b["correction"], b["drop"], b["snapshot"], b["update"]) == (1, 1, 1, 1, 0)


def test_per_item_counts(report):
    items = {r["topic"]: r.asDict() for r in report.items.collect()}
    assert items["/t"]["never_imaged"] is True
    assert items["/t"]["publications"] == 8
    u = items["/u"]
    assert (u["images"], u["corrections"], u["drops"], u["never_imaged"]) == (1, 1, 1, False)
    assert items["/v"]["snapshots"] == 1


def test_summary_and_machine_output(report, tmp_path, spark):
    text = report.summary()
    assert "feed.a" in text
    assert "4..6" in text
    assert "1..5 (5, trimmed)" in text
    assert "2 never imaged" in text
    digest = report.write(str(tmp_path / "audit"))
    on_disk = json.loads((tmp_path / "audit" / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(digest))
    assert on_disk["items"]["drops"] == 1
    gaps = spark.read.parquet(str(tmp_path / "audit" / "gaps"))
    assert gaps.count() == 4


# --- sources retention emptied or trimmed beyond their last row ----------------------------


def test_every_source_of_the_trim_record_is_audited_rows_or_not(spark):
    frame = to_frame(spark, [(pub("feed.a", n, ts=float(n)), 16) for n in (1, 2, 3)])
    # feed.gone: every entry trimmed; feed.a: trimmed beyond its last row; feed.new: no
    # entries and nothing trimmed (registered, never published)
    trimmed = {"feed.a": 6, "feed.gone": 7, "feed.new": 0}
    for report in (
        audit(spark, frame, trimmed_through=trimmed),
        audit(spark, with_trim_record(frame, trimmed)),
    ):
        assert sorted(tuple(r) for r in report.gaps.collect()) == [
            ("feed.a", 4, 6, 3, "trimmed"),
            ("feed.gone", 1, 7, 7, "trimmed"),
        ]
        rows = {r["source"]: r.asDict() for r in report.sources.collect()}
        assert sorted(rows) == ["feed.a", "feed.gone", "feed.new"]
        a, gone, new = rows["feed.a"], rows["feed.gone"], rows["feed.new"]
        assert (a["publications"], a["last_seq"], a["trimmed_numbers"], a["gap_numbers"]) == (
            3,
            3,
            3,
            0,
        )
        assert gone == {
            "source": "feed.gone",
            "bits": None,
            "publications": 0,
            "distinct_seqs": 0,
            "first_seq": None,
            "last_seq": None,
            "trimmed_through": 7,
            "gap_count": 0,
            "gap_numbers": 0,
            "trimmed_numbers": 7,
            "not_selected_numbers": 0,
            "duplicates": 0,
            "out_of_order": 0,
            **{p: 0 for p in PUBLISH_TYPES},
        }
        assert (new["publications"], new["trimmed_numbers"], new["gap_numbers"]) == (0, 0, 0)


@pytest.mark.redis
def test_a_source_retention_emptied_is_in_every_audit_output(
    spark, journal, redis_url, tmp_path, capsys
):
    journal.append([pub("feed.a", n, ts=float(n)) for n in range(1, 6)], 16)
    journal.append([pub("feed.gone", n, ts=float(n)) for n in range(1, 8)], 3)
    trim = apply_retention(journal, "feed.gone", RetentionPolicy(max_age=10.0), now=100.0)
    assert (trim.trimmed_through, trim.removed) == (7, 7)
    info = journal.info("feed.gone")
    assert (info.high_water, info.trimmed_through) == (7, 7)
    frame = read_journal(spark, redis_url)
    assert frame.where(F.col("source") == "feed.gone").count() == 0
    report = audit(spark, frame)
    rows = {r["source"]: r.asDict() for r in report.sources.collect()}
    assert sorted(rows) == ["feed.a", "feed.gone"]
    gone = rows["feed.gone"]
    assert (gone["publications"], gone["trimmed_through"], gone["trimmed_numbers"]) == (0, 7, 7)
    assert (gone["gap_count"], gone["gap_numbers"]) == (0, 0)
    assert rows["feed.a"]["publications"] == 5
    assert sorted(tuple(r) for r in report.gaps.collect()) == [("feed.gone", 1, 7, 7, "trimmed")]
    text = report.summary()
    assert any(line.startswith("feed.gone ") for line in text.splitlines())
    assert "feed.gone: 1..7 (7, trimmed)" in text
    out = tmp_path / "audit"
    report.write(str(out))
    digest = json.loads((out / "summary.json").read_text())
    by_source = {s["source"]: s for s in digest["sources"]}
    assert (by_source["feed.gone"]["publications"], by_source["feed.gone"]["trimmed_numbers"]) == (
        0,
        7,
    )
    assert {"source": "feed.gone", "first": 1, "last": 7, "count": 7, "kind": "trimmed"} in digest[
        "gaps"
    ]
    parquet = spark.read.parquet(str(out / "sources")).where(F.col("source") == "feed.gone")
    assert [(r["publications"], r["trimmed_numbers"]) for r in parquet.collect()] == [(0, 7)]
    gaps = spark.read.parquet(str(out / "gaps")).where(F.col("source") == "feed.gone")
    assert [(r["first"], r["last"], r["kind"]) for r in gaps.collect()] == [(1, 7, "trimmed")]
    # the audit command prints and writes it as well
    capsys.readouterr()
    cli_out = tmp_path / "cli"
    args = ["--master", "local[2]", "--journal", redis_url, "--no-progress"]
    assert main(["audit", *args, "--output", str(cli_out)]) == 0
    printed = capsys.readouterr().out
    assert any(line.startswith("feed.gone ") for line in printed.splitlines())
    assert "feed.gone: 1..7 (7, trimmed)" in printed
    cli_digest = json.loads((cli_out / "summary.json").read_text())
    assert "feed.gone" in [s["source"] for s in cli_digest["sources"]]


@pytest.mark.redis
def test_numbers_trimmed_after_the_last_archived_row_are_reported_trimmed(
    spark, journal, redis_url, tmp_path
):
    journal.append([pub("feed.a", n, ts=float(n)) for n in range(1, 11)], 16)
    root = tmp_path / "archive"
    # archives and trims 1..4, then trims everything left (5..10) with no archive
    apply_retention(journal, "feed.a", RetentionPolicy(max_count=6, archive_root=root), now=100.0)
    assert apply_retention(journal, "feed.a", RetentionPolicy(max_age=10.0), now=100.0).removed == 6
    frame = read_journals(spark, url=redis_url, archive=str(root))
    assert sorted(r["seq"] for r in frame.collect()) == [1, 2, 3, 4]
    report = audit(spark, frame)
    assert sorted(tuple(r) for r in report.gaps.collect()) == [("feed.a", 5, 10, 6, "trimmed")]
    (row,) = report.sources.collect()
    assert (row["publications"], row["last_seq"], row["trimmed_through"]) == (4, 4, 10)
    assert (row["trimmed_numbers"], row["gap_count"]) == (6, 0)
