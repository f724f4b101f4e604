"""The relay event loop's own passes over a usual batch (perf38, relay-bound.md): what
``RelayComponent.on_seqrepair_relayed`` and ``on_seqrepair_journaled`` do per batch around
fan-out (fan-out itself replaced by a no-op), 256 publications of one source a batch, us per
publication, best of 7. Runs main's way (``bare``, ``relayed_unsent``, ``_rising`` again,
the acknowledgement's dict of every publication) or, where ``Ingest.relayed_rising`` exists,
this branch's (one check when submitted, carried to the fan-out and the acknowledgement).
Run it with each tree first on ``PYTHONPATH``, interleaved.

    .venv/bin/python benchmarks/notes/perf38_relay_batch.py
"""

from __future__ import annotations

import time
from typing import Any

from seqrepair.amqp.component.ingest import Ingest
from seqrepair.amqp.relay.journaler import bare
from seqrepair.amqp.wire.codec import Decoder
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.messages import Publication

BATCH = 256
BATCHES = 400


class Port:
    def __init__(self) -> None:
        self.lost_journaled: set[str] = set()

    def high_waters(self) -> dict[str, int]:
        return {}


def main() -> None:
    pubs = [Publication(("/load/a", "/load/b")[i % 2], "bench", i + 1, "update",
                        {"n": i, "t": 1.5}, timestamp=1.0) for i in range(BATCH * BATCHES)]
    items = [encode_entry(p, lambda _s: 32) for p in pubs]
    batches = [(pubs[i:i + BATCH], items[i:i + BATCH]) for i in range(0, len(pubs), BATCH)]
    new = hasattr(Ingest, "relayed_rising")
    best = 9.0
    for _ in range(7):
        ingest = Ingest(Port(), Decoder(), lambda _p, _e: None, {"duplicates": 0, "ingested": 0})
        held: dict[str, int] = {}
        start = time.process_time()
        for batch, entries in batches:
            if new:
                rising = ingest.relayed_rising(batch)
                got: Any = list(batch)
                ingest.relayed_journaled(got, entries, rising)
                held = {got[-1].source: got[-1].source_seq} if rising else {
                    p.source: p.source_seq for p in got}
            else:
                got = bare(batch)
                if ingest.relayed_unsent(got) is not None:
                    raise AssertionError("a fresh batch")
                ingest.relayed_journaled(got, entries)
                held = {p.source: p.source_seq for p in got}
        best = min(best, time.process_time() - start)
    assert held == {"bench": BATCH * BATCHES}
    print(f"{'rising' if new else 'main'} {best / len(pubs) * 1e6:.3f} us/pub")


if __name__ == "__main__":
    main()
