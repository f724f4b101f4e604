"""The journal audit: gaps, trimmed ranges, duplicates, out-of-order arrivals, item counts."""

from __future__ import annotations

import json

import pytest

from seqrepair.core.messages import Publication, PublishType
from seqrepair.spark.audit import audit

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
