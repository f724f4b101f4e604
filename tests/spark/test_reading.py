"""The Redis journal data source, the Parquet archive reader and their union."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow.parquet as pq
import pytest

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal import EmbeddedRedis, Journal
from seqrepair.journal.format import archive_path, encode_archive_row, encode_archive_table
from seqrepair.spark.reading import read_archive, read_journal, read_journals
from seqrepair.spark.rebuild import rebuild_images
from seqrepair.spark.schema import JOURNAL_COLUMNS, JOURNAL_SCHEMA

from .journals import actual_images, expected_images

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


def collected(frame) -> set[tuple]:
    out = set()
    for r in frame.collect():
        d = r.asDict()
        d["fields"] = tuple(sorted(d["fields"].items()))
        out.add(tuple(d[c] for c in JOURNAL_COLUMNS))
    return out


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with EmbeddedRedis() as server:
        yield server.url


@pytest.fixture
def journal(redis_url: str) -> Iterator[Journal]:
    with Journal.from_url(redis_url) as j:
        j.client.flushdb()
        yield j


def test_reads_every_entry_in_parallel_partitions(spark, journal, redis_url):
    a, b = make_pubs("feed.a", 40), make_pubs("feed/b", 9)
    journal.append(a, 4)  # 4 bits: wire numbers wrap at 15
    journal.append(b, 16)
    frame = read_journal(spark, redis_url, partition_size=7, page_size=3)
    assert frame.schema == JOURNAL_SCHEMA
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
