"""Throwaway microbenchmark (relay-bound.md, relayhot): ``LinkContext.record_numbered`` of
256-publication runs as a relay's pump records them, with the byte bound biting (3 MB) and
with the capacity biting (8192 frames, no byte bound): us per publication, best of 7, and
the state it ends in (the same in any tree). Run it with each tree first on ``PYTHONPATH``."""

from __future__ import annotations

import gc
import time

from seqrepair.core.context import LinkContext
from seqrepair.core.messages import Publication, PublishType

PUBS = [Publication("/load/a", "bench", i + 1, PublishType.UPDATE, {"n": i, "t": 1.5},
                    timestamp=1.0) for i in range(256)]
SIZES = [110] * 256


def run(max_bytes: int | None, capacity: int, batches: int = 2000) -> tuple[float, tuple[int, ...]]:
    context = LinkContext(16, capacity, max_bytes=max_bytes)
    start = time.process_time()
    for _ in range(batches):
        context.record_numbered(PUBS, context.next_number() or 0, 10, SIZES)
    spent = time.process_time() - start
    return spent / batches / len(PUBS) * 1e6, (len(context._frames), context._evicted,
                                               context.bytes, context.recorded)


def main() -> None:
    gc.disable()
    for max_bytes, capacity in ((3_000_000, 65_536), (None, 8192)):
        best = min(run(max_bytes, capacity) for _ in range(7))
        print(f"max_bytes={max_bytes} capacity={capacity}: {best[0]:.3f} us/pub, end {best[1]}")


if __name__ == "__main__":
    main()
