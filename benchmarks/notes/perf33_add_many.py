"""RecentEntries.add_many per publication with the garbage collector on (perf33, relay-bound.md):
300,000 publications of 2 topics in batches of 256, real entries, 64 MiB (no eviction) unless
a budget is given. Run it in two trees (``PYTHONPATH``), interleaved, for a before/after.

    .venv/bin/python benchmarks/notes/perf33_add_many.py [BUDGET_BYTES]
"""

from __future__ import annotations

import sys
import time

from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.messages import Publication
from seqrepair.journal.recent import RecentEntries

BATCH = 256
N = 300_000


def main() -> None:
    pubs = [Publication(("/load/a", "/load/b")[i % 2], "bench", i + 1, fields={"n": i, "t": 1.5})
            for i in range(N)]
    entries: list[bytes | None] = [encode_entry(p, lambda _s: 32) for p in pubs]
    budget = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
    best = 9.0
    recent = RecentEntries(budget, lambda _e, _p: True)
    for _ in range(5):
        recent = RecentEntries(budget, lambda _e, _p: True)
        start = time.process_time()
        for i in range(0, N, BATCH):
            recent.add_many(pubs[i : i + BATCH], entries[i : i + BATCH])
        best = min(best, time.process_time() - start)
    print(f"budget {budget} add_many {best / N * 1e6:.3f} us/pub "
          f"evicted {recent.stats['evicted']}")


if __name__ == "__main__":
    main()
