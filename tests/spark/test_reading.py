"""The Redis journal data source, the Parquet archive reader and their union."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from clusters import cluster_url, redis_cluster

from seqrepair.cli import main
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import Journal, RetentionPolicy, apply_retention, export_range
from seqrepair.journal.format import archive_path, encode_archive_row, encode_archive_table
from seqrepair.spark.audit import audit
from seqrepair.spark.reading import read_archive, read_journal, read_journals
from seqrepair.spark.rebuild import rebuild_images
from seqrepair.spark.schema import JOURNAL_COLUMNS, JOURNAL_SCHEMA, trim_record

from .journals import actual_images, entries_of, entry_record, expected_images, fold_in_seq_order

pytestmark = [pytest.mark.spark, pytest.mark.redis]


def make_pubs(source: str, count: int, start: int = 1) -> list[Publication]:
    kinds = [PublishType.IMAGE, PublishType.UPDATE, PublishType.CORRECTION, PublishType.UPDATE]
    return [
        Publication(
            topic=f"/item/{n % 3}",
            source=source,
            source_seq=n,
            ptype=kinds[n % 4],
            fields={"n": n, "gust": None} if n % 2 else {"n": n, "name": f"é{n}"},
            permtoken="tok" if n % 5 == 0 else None,
            timestamp=float(n) if source == "feed.a" else None,
        )
        for n in range(start, start + count)
    ]


def as_rows(pubs: list[Publication], bits: int) -> set[tuple]:
    out = set()
    for p in pubs:
        row = encode_archive_row(p, bits)
        row["fields"] = tuple(sorted(row["fields"]))
        out.add(tuple(row[c] for c in JOURNAL_COLUMNS))
    return out


def plain(schema) -> list[tuple]:
    """A schema without column metadata."""
    return [(f.name, f.dataType, f.nullable) for f in schema.fields]


def collected(frame) -> set[tuple]:
    out = set()
    for r in frame.collect():
        d = r.asDict()
        d["fields"] = tuple(sorted(d["fields"].items()))
        out.add(tuple(d[c] for c in JOURNAL_COLUMNS))
    return out


def test_reads_every_entry_in_parallel_partitions(spark, journal, redis_url):
    a, b = make_pubs("feed.a", 40), make_pubs("feed/b", 9)
    journal.append(a, 4)  # 4 bits: wire numbers wrap at 15
    journal.append(b, 16)
    frame = read_journal(spark, redis_url, partition_size=7, page_size=3)
    assert plain(frame.schema) == plain(JOURNAL_SCHEMA)  # the seq column carries metadata
    assert trim_record(frame) == {"feed.a": 0, "feed/b": 0}
    assert frame.rdd.getNumPartitions() == 6 + 2
    assert collected(frame) == as_rows(a, 4) | as_rows(b, 16)
    only_b = read_journal(spark, redis_url, sources=["feed/b"])
    assert collected(only_b) == as_rows(b, 16)


def test_rebuild_from_redis_matches_image_cache(spark, journal, redis_url):
    a, b = make_pubs("feed.a", 25), make_pubs("feed.b", 12)
    journal.append(a, 3)
    journal.append(b, 3)
    images = rebuild_images(read_journal(spark, redis_url, partition_size=5))
    assert actual_images(images) == expected_images(a + b)


def test_empty_journal_reads_nothing(spark, journal, redis_url):
    assert read_journal(spark, redis_url).count() == 0


def test_trimmed_journal_plus_archive_is_whole_without_duplicates(
    spark, journal, redis_url, tmp_path
):
    pubs = make_pubs("feed.a", 30)
    journal.append(pubs, 16)
    # archive 1..20, then trim 1..12: numbers 13..20 are in both
    path = archive_path(tmp_path, "feed.a", 1, 20)
    path.parent.mkdir(parents=True)
    pq.write_table(encode_archive_table(pubs[:20], 16), path)
    journal.trim_through("feed.a", 12, now=100.0)

    live = read_journal(spark, redis_url, partition_size=4)
    assert sorted(r["seq"] for r in live.select("seq").collect()) == list(range(13, 31))
    archived = read_archive(spark, str(tmp_path))
    assert archived.count() == 20
    both = read_journals(spark, url=redis_url, archive=str(tmp_path))
    seqs = sorted(r["seq"] for r in both.select("seq").collect())
    assert seqs == list(range(1, 31))
    assert collected(both) == as_rows(pubs, 16)


def test_missing_archive_is_empty(spark, tmp_path):
    frame = read_archive(spark, str(tmp_path / "nothing"))
    assert frame.count() == 0
    assert frame.schema == JOURNAL_SCHEMA


def seqs(frame) -> list[int]:
    return sorted(r["seq"] for r in frame.select("seq").collect())


def test_overlapping_archive_files_give_each_number_once(spark, journal, redis_url, tmp_path):
    pubs = make_pubs("feed.a", 45)
    journal.append(pubs, 16)
    root = tmp_path / "archive"
    export_range(journal, "feed.a", 1, 30, root)  # by hand first, then a retention pass
    report = apply_retention(
        journal, "feed.a", RetentionPolicy(max_count=5, archive_root=root), now=100.0
    )
    assert report.trimmed_through == 40
    assert len(list(root.glob("*/seq-*.parquet"))) == 2  # 1..30 and 1..40
    archived = read_archive(spark, str(root))
    assert seqs(archived) == list(range(1, 41))
    assert collected(archived) == as_rows(pubs[:40], 16)
    both = read_journals(spark, url=redis_url, archive=str(root))
    assert seqs(both) == list(range(1, 46))
    assert collected(both) == as_rows(pubs, 16)


def test_retention_after_the_union_is_built_loses_nothing(spark, journal, redis_url, tmp_path):
    pubs = make_pubs("feed.a", 30)
    journal.append(pubs, 16)
    root = tmp_path / "archive"
    policy = RetentionPolicy(max_count=20, archive_root=root)
    assert apply_retention(journal, "feed.a", policy, now=100.0).trimmed_through == 10
    both = read_journals(spark, url=redis_url, archive=str(root), partition_size=4)
    # after building: a retention pass archives and trims 11..20, and more is published
    policy = RetentionPolicy(max_count=10, archive_root=root)
    assert apply_retention(journal, "feed.a", policy, now=200.0).trimmed_through == 20
    journal.append(make_pubs("feed.a", 5, start=31), 16)
    assert seqs(both) == list(range(1, 31))  # a snapshot: 31..35 came later
    assert collected(both) == as_rows(pubs, 16)


def test_retention_after_the_journal_frame_is_built_reads_the_archive(
    spark, journal, redis_url, tmp_path
):
    pubs = make_pubs("feed.a", 30)
    journal.append(pubs, 16)
    root = tmp_path / "archive"
    alone = read_journal(spark, redis_url, partition_size=4, archive=str(root))
    assert seqs(alone) == list(range(1, 31))
    policy = RetentionPolicy(max_count=10, archive_root=root)
    assert apply_retention(journal, "feed.a", policy, now=200.0).trimmed_through == 20
    assert seqs(alone) == list(range(1, 31))
    assert collected(alone) == as_rows(pubs, 16)


def test_numbers_trimmed_after_the_frame_is_built_and_archived_nowhere_fail_loudly(
    spark, journal, redis_url, tmp_path
):
    journal.append(make_pubs("feed.a", 30), 16)
    alone = read_journal(spark, redis_url, partition_size=8)
    both = read_journals(spark, url=redis_url, archive=str(tmp_path / "empty"))
    journal.trim_through("feed.a", 12, now=100.0)  # no archive
    for frame in (alone, both):
        with pytest.raises(Exception, match="SnapshotTrimmedError") as info:
            frame.collect()
        assert "'feed.a'" in str(info.value)
        assert "trimmed through 12" in str(info.value)
    assert seqs(read_journal(spark, redis_url)) == list(range(13, 31))  # a new frame is fine


def test_audit_of_a_trimmed_journal_reports_trimmed_not_gaps(spark, journal, redis_url, tmp_path):
    journal.append(make_pubs("feed.a", 20), 16)
    journal.append(make_pubs("feed/b", 5), 16)
    root = tmp_path / "archive"
    export_range(journal, "feed.a", 5, 8, root)  # 1..4 and 9..12 archived nowhere
    journal.trim_through("feed.a", 12, now=100.0)
    frame = read_journal(spark, redis_url)
    assert trim_record(frame) == {"feed.a": 12, "feed/b": 0}
    report = audit(spark, frame)
    assert sorted(tuple(r) for r in report.gaps.collect()) == [("feed.a", 1, 12, 12, "trimmed")]
    rows = {r["source"]: r for r in report.sources.collect()}
    assert (rows["feed.a"]["trimmed_through"], rows["feed.a"]["gap_count"]) == (12, 0)
    assert rows["feed.a"]["trimmed_numbers"] == 12
    union = read_journals(spark, url=redis_url, archive=str(root))
    assert trim_record(union) == {"feed.a": 12, "feed/b": 0}
    gaps = sorted(tuple(r) for r in audit(spark, union).gaps.collect())
    assert gaps == [("feed.a", 1, 4, 4, "trimmed"), ("feed.a", 9, 12, 4, "trimmed")]
    # an explicit trim record still wins
    gaps = sorted(tuple(r) for r in audit(spark, frame, trimmed_through={}).gaps.collect())
    assert gaps == [("feed.a", 1, 12, 12, "gap")]


def test_rebuild_agrees_with_latest_image_when_timestamps_go_backwards(spark, journal, redis_url):
    U, IMG = PublishType.UPDATE, PublishType.IMAGE
    pubs = [
        Publication(topic=t, source="feed.a", source_seq=n, ptype=k, fields=f, timestamp=ts)
        for n, (t, k, f, ts) in enumerate(
            [
                ("/x", IMG, {"a": 1}, 10.0),
                ("/x", U, {"a": 2}, 5.0),
                ("/y", U, {"b": 1}, None),
                ("/y", IMG, {"b": 2, "c": None}, 7.0),
                ("/y", U, {"b": 3}, None),
                ("/x", U, {"d": 4}, 1.0),
            ],
            1,
        )
    ]
    journal.append(pubs, 16)
    got = actual_images(rebuild_images(read_journal(spark, redis_url)))
    assert got["/x"]["fields"] == {"a": 2, "d": 4}
    assert got["/y"]["fields"] == {"b": 3, "c": None}
    assert got == entries_of_latest(journal, "feed.a", ["/x", "/y"])
    assert got == entries_of(fold_in_seq_order(pubs))


def entries_of_latest(journal, source, topics):
    return {topic: entry_record(journal.latest_image(source, topic)) for topic in topics}


def test_cli_reads_the_journal_once_and_keeps_its_trim_record(
    spark, journal, redis_url, tmp_path, capsys
):
    pubs = make_pubs("feed.a", 20)
    journal.append(pubs, 16)
    journal.trim_through("feed.a", 12, now=100.0)
    out = tmp_path / "audit"
    args = ["--master", "local[2]", "--journal", redis_url, "--no-progress"]
    assert main(["audit", *args, "--output", str(out)]) == 0
    digest = json.loads((out / "summary.json").read_text())
    gaps = [(g["source"], g["first"], g["last"], g["kind"]) for g in digest["gaps"]]
    assert gaps == [("feed.a", 1, 12, "trimmed")]
    capsys.readouterr()
    assert main(["rebuild", *args, "--show", "0"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["items"] == len(expected_images(pubs[12:]))


@pytest.mark.redis
def test_reads_a_journal_spread_over_a_three_node_cluster(spark):
    with redis_cluster(3) as client:
        journal = Journal(client)
        a, b, c = make_pubs("feed.a", 20), make_pubs("feed.b", 11), make_pubs("feed.c", 7)
        journal.append(a, 4)
        journal.append(b, 16)
        journal.append(c, 3)
        url = cluster_url(client)
        frame = read_journal(spark, url, partition_size=6, page_size=4)
        assert collected(frame) == as_rows(a, 4) | as_rows(b, 16) | as_rows(c, 3)
        images = rebuild_images(read_journal(spark, url))
        assert actual_images(images) == expected_images(a + b + c)
