"""Spark image-rebuild benchmark (see benchmarks/results/spark.md).

Generates one Parquet archive per size, then rebuilds it with Spark on 1 and 2 local cores and
with a plain Python fold streaming the same Parquet, in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SOURCES = ("feed.a", "feed.b", "feed.c", "feed.d")
FIELD_NAMES = tuple(f"f{i}" for i in range(8))
BITS = 16
ROWS_PER_FILE = 1_000_000
ARROW_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("wire_seq", pa.int64(), nullable=False),
        pa.field("bits", pa.int32(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("ptype", pa.string(), nullable=False),
        pa.field("fields", pa.map_(pa.string(), pa.string())),
        pa.field("permtoken", pa.string()),
        pa.field("timestamp", pa.float64()),
    ]
)
PTYPES = np.array(["update", "correction", "image", "drop", "snapshot"])
PTYPE_WEIGHTS = np.array([0.84, 0.05, 0.08, 0.01, 0.02])


def _chunk(
    rng: np.random.Generator, source: str, first: int, count: int, topics: int
) -> pa.Table:
    seq = np.arange(first, first + count, dtype=np.int64)
    wire = (seq - 1) % ((1 << BITS) - 1) + 1
    kind = rng.choice(len(PTYPES), size=count, p=PTYPE_WEIGHTS)
    nfields = np.select(
        [kind == 0, kind == 1, kind == 2],
        [rng.integers(1, 4, count), np.ones(count, np.int64), rng.integers(4, 9, count)],
        0,
    ).astype(np.int64)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(nfields, out=offsets[1:])
    total = int(offsets[-1])
    start = rng.integers(0, len(FIELD_NAMES), count)
    within = np.arange(total) - np.repeat(offsets[:-1], nfields)
    key_idx = (np.repeat(start, nfields) + within) % len(FIELD_NAMES)
    keys = pa.DictionaryArray.from_arrays(
        pa.array(key_idx.astype(np.int32)), pa.array(FIELD_NAMES)
    ).cast(pa.string())
    raw = pc.cast(pa.array(rng.integers(0, 100_000, total)), pa.string())
    values = pc.if_else(pa.array(rng.random(total) < 0.05), pa.scalar("null"), raw)
    fields = pa.MapArray.from_arrays(pa.array(offsets), keys, values)
    topic_idx = rng.integers(0, topics, count)
    topic = pc.binary_join_element_wise(
        pa.scalar("/bench/item/"), pc.cast(pa.array(topic_idx), pa.string()), ""
    )
    ts = 1_700_000_000.0 + seq.astype(np.float64) * 0.001 + SOURCES.index(source) * 1e-4
    return pa.table(
        {
            "source": pa.array([source] * count, pa.string()),
            "seq": pa.array(seq),
            "wire_seq": pa.array(wire),
            "bits": pa.array(np.full(count, BITS, np.int32)),
            "topic": topic,
            "ptype": pa.array(PTYPES[kind]),
            "fields": fields,
            "permtoken": pa.nulls(count, pa.string()),
            "timestamp": pa.array(ts),
        },
        schema=ARROW_SCHEMA,
    )


def generate_archive(root: Path, events: int, *, topics: int = 10_000, seed: int = 7) -> Path:
    """Write ``events`` synthetic publications as a journal archive under ``root``."""
    from seqrepair.spark.schema import archive_dir_name, archive_file_name

    rng = np.random.default_rng(seed)
    per_source = events // len(SOURCES)
    for n, source in enumerate(SOURCES):
        count = per_source if n < len(SOURCES) - 1 else events - per_source * n
        folder = root / archive_dir_name(source)
        folder.mkdir(parents=True, exist_ok=True)
        first = 1
        while count > 0:
            size = min(ROWS_PER_FILE, count)
            table = _chunk(rng, source, first, size, topics)
            pq.write_table(table, folder / archive_file_name(first, first + size - 1))
            first += size
            count -= size
    return root


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("events", type=int)
    a = parser.parse_args()
    t = time.perf_counter()
    generate_archive(a.root, a.events)
    print(f"generated {a.events} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    os.sys.exit(0)
