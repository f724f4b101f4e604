"""Hypothesis strategies for random journals, and helpers to turn them into DataFrames."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

from seqrepair.core.image import ImageCache, ItemImage
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal.format import encode_archive_row
from seqrepair.spark.rebuild import event_order
from seqrepair.spark.schema import JOURNAL_COLUMNS, JOURNAL_SCHEMA

FIELD_NAMES = ("a", "b", "c", "speed")
TOPICS = ("/w/1", "/w/2", "/x")
PTYPES = (
    [PublishType.UPDATE] * 4
    + [PublishType.CORRECTION] * 2
    + [PublishType.IMAGE] * 2
    + [PublishType.DROP, PublishType.SNAPSHOT]
)

json_values = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.sampled_from(["x", "", "é", "null"]),
    st.booleans(),
    st.lists(st.integers(0, 3), max_size=2),
)
field_maps = st.dictionaries(st.sampled_from(FIELD_NAMES), json_values, max_size=3)


TIMESTAMPS = ("none", "forward", "messy")
"""How a generated source stamps its publications: never, in sequence order (never going
backwards), or anyhow (going backwards, repeating, sometimes missing)."""


@st.composite
def source_journal(draw: st.DrawFn, source: str, prefix: str) -> tuple[list[Publication], int]:
    """One source's publications (absolute numbers from 1) and its bit width."""
    bits = draw(st.sampled_from([2, 3, 4, 16]))
    count = draw(st.integers(0, 14))
    stamping = draw(st.sampled_from(TIMESTAMPS))
    time = draw(st.integers(0, 3)) * 1.0
    pubs = []
    for seq in range(1, count + 1):
        ptype = draw(st.sampled_from(PTYPES))
        fields = {} if ptype in (PublishType.DROP, PublishType.SNAPSHOT) else draw(field_maps)
        ts: float | None = None
        if stamping == "forward":
            time += draw(st.sampled_from([0.0, 0.5, 1.0]))
            ts = time
        elif stamping == "messy":
            ts = draw(st.none() | st.integers(0, 12).map(lambda n: n / 2))
        pubs.append(
            Publication(
                topic=(f"/{prefix}" if prefix else "") + draw(st.sampled_from(TOPICS)),
                source=source,
                source_seq=seq,
                ptype=ptype,
                fields=fields,
                timestamp=ts,
            )
        )
    return pubs, bits


@st.composite
def journals(draw: st.DrawFn, prefix: str = "") -> list[tuple[Publication, int]]:
    """A journal of 1..3 sources: (publication, bits) in per-source order. Source names start
    with ``prefix`` and topics with ``/prefix``, so journals with different prefixes can share
    a DataFrame."""
    names = draw(
        st.lists(st.sampled_from(["feed.a", "feed.b", "f/c"]), min_size=1, max_size=3, unique=True)
    )
    out: list[tuple[Publication, int]] = []
    for name in names:
        pubs, bits = draw(source_journal(prefix + name, prefix))
        out.extend((p, bits) for p in pubs)
    return out


def to_frame(spark: SparkSession, entries: Iterable[tuple[Publication, int]]) -> DataFrame:
    """A journal DataFrame holding ``entries`` (encoded as the archive encodes them)."""
    rows = []
    for pub, bits in entries:
        row = encode_archive_row(pub, bits)
        row["fields"] = dict(row["fields"])
        rows.append(tuple(row[c] for c in JOURNAL_COLUMNS))
    return spark.createDataFrame(rows, JOURNAL_SCHEMA)


def fold(pubs: Iterable[Publication]) -> ImageCache:
    """The core ImageCache fed in the rebuild's documented event order."""
    cache = ImageCache()
    for pub in event_order(pubs):
        cache.apply(pub)
    return cache


def fold_in_seq_order(pubs: Iterable[Publication]) -> ImageCache:
    """The core ImageCache fed one source after the other, each in plain sequence order."""
    cache = ImageCache()
    for pub in sorted(pubs, key=lambda p: (p.source, p.source_seq)):
        cache.apply(pub)
    return cache


def entry_record(entry: ItemImage) -> dict[str, Any]:
    """One item image in the shape of :func:`actual_images`' values."""
    return {
        "fields": dict(entry.fields),
        "partial": entry.partial,
        "provenance": {
            name: (src, seq, name in entry.corrected)
            for name, (src, seq) in entry.field_seq.items()
        },
    }


def entries_of(cache: ImageCache) -> dict[str, dict[str, Any]]:
    """A cache's items in the shape of :func:`actual_images`."""
    out = {}
    for topic in cache:
        entry = cache.entry(topic)
        assert entry is not None
        out[topic] = entry_record(entry)
    return out


def expected_images(pubs: Sequence[Publication]) -> dict[str, dict[str, Any]]:
    """What the Spark rebuild must produce, from the core ImageCache, keyed by topic."""
    return entries_of(fold(pubs))


def actual_images(images: DataFrame) -> dict[str, dict[str, Any]]:
    """Rebuilt images collected into the shape of :func:`expected_images`."""
    out = {}
    for row in images.collect():
        out[row["topic"]] = {
            "fields": {k: json.loads(v) for k, v in row["fields"].items()},
            "partial": row["partial"],
            "provenance": {
                k: (p["source"], p["seq"], p["correction"]) for k, p in row["provenance"].items()
            },
        }
    return out
