"""Throwaway microbenchmark: RecentEntries.add_many per publication (bench shape: 2 topics,
batches of 256, 64 MiB, no eviction)."""

import time

from seqrepair.amqp.component.config import ComponentConfig
from seqrepair.core.messages import Publication
from seqrepair.journal.recent import RecentEntries

BATCH = 256


def main() -> None:
    max_bytes = ComponentConfig().replay_cache_bytes
    pubs = [
        Publication(("/load/a", "/load/b")[i % 2], "bench", i + 1, fields={"n": i, "x": "y" * 20})
        for i in range(200000)
    ]
    entries = [bytes(80) for _ in pubs]
    best = 9.0
    for _ in range(5):
        recent = RecentEntries(max_bytes, lambda _entry, _pub: True)
        start = time.perf_counter()
        for i in range(0, len(pubs), BATCH):
            recent.add_many(pubs[i : i + BATCH], entries[i : i + BATCH])
        best = min(best, time.perf_counter() - start)
    print(
        "max_bytes",
        max_bytes,
        f"add_many us/pub {best / len(pubs) * 1e6:.3f}",
        "evicted",
        recent.stats["evicted"],
    )


if __name__ == "__main__":
    main()
