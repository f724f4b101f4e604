# ruff: noqa
"""Throwaway microbenchmark: RecentEntries.add_many per publication (bench shape: 2 topics, batches of 256, 64 MiB, no eviction)."""
import time, sys
from seqrepair.core.messages import Publication
from seqrepair.journal.recent import RecentEntries
from seqrepair.amqp.component.config import ComponentConfig
mb = ComponentConfig().replay_cache_bytes
pubs = [Publication(("/load/a", "/load/b")[i % 2], "bench", i + 1, fields={"n": i, "x": "y" * 20}) for i in range(200000)]
entries = [bytes(80) for _ in pubs]
best = 9
for _ in range(5):
    r = RecentEntries(mb, lambda e, p: True)
    t = time.perf_counter()
    for i in range(0, len(pubs), 256):
        r.add_many(pubs[i:i+256], entries[i:i+256])
    best = min(best, time.perf_counter() - t)
print("max_bytes", mb, "add_many us/pub %.3f" % (best / len(pubs) * 1e6), "evicted", r.stats["evicted"])
