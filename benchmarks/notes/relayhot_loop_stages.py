"""Throwaway microbenchmark (relay-bound.md, relayhot): the relay event loop's Python per
publication, stage by stage, on 256-publication batches of one source (two topics, fields
``{"n", "t"}``) fanned out to one batch link: the passes ``on_seqrepair_relayed`` and
``relayed_journaled`` made over a batch before ``relayed_rising`` (bare, the unsent check,
``_rising``, the regular-entry check), the topics, fan-out's keys and offer, the replay
cache, the acknowledgement's dict and the pump (send and record). us per publication, the
best of 7 per stage. Single-threaded: proton, the GIL and the other threads left out."""

from __future__ import annotations

import gc
import sys
import time
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from relay_bound_pump import make

from seqrepair.amqp.component.ingest import _regular_entry, _rising
from seqrepair.amqp.relay.journaler import bare
from seqrepair.amqp.wire.framing import encode_entry
from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal.recent import RecentEntries

N = 256
BATCHES = 400
STAGES = ("bare", "unsent", "rising", "regular", "topics", "keys", "offer", "recent", "ack",
          "pump")
_TOPIC = attrgetter("topic")
_PERMTOKEN = attrgetter("permtoken")


def batches() -> list[tuple[list[Publication], list[bytes]]]:
    out = []
    for k in range(BATCHES):
        pubs = [Publication("/load/a" if i % 2 else "/load/b", "bench", k * N + i + 1,
                            PublishType.UPDATE, {"n": k * N + i, "t": 1.5}, timestamp=1.0)
                for i in range(N)]
        out.append((pubs, [encode_entry(p, lambda _s: 64) for p in pubs]))
    return out


def stages(data: list[tuple[list[Publication], list[bytes]]]) -> dict[str, float]:
    ingested = {"bench": 0}
    link = make()
    recent = RecentEntries(64 << 20, lambda _e, _p: True, {})
    spent = dict.fromkeys(STAGES, 0.0)
    clock = time.perf_counter
    for pubs, items in data:
        t = [clock()]
        pubs = bare(pubs)
        t.append(clock())
        any(p.source_seq <= ingested.get(p.source, 0) for p in pubs)
        t.append(clock())
        _rising(pubs, ingested.get(pubs[0].source, 0))
        t.append(clock())
        all(map(_regular_entry, items))
        listed = list(items)
        t.append(clock())
        ingested["bench"] = pubs[-1].source_seq
        dict.fromkeys(p.topic for p in pubs)
        t.append(clock())
        keys = list(zip(map(_TOPIC, pubs), map(_PERMTOKEN, pubs), strict=True))
        verdicts = link.allows_keyed(dict(zip(keys, pubs, strict=True)))
        all((verdicts or {}).values())
        t.append(clock())
        link.offer_many(list(zip(pubs, listed, strict=True)), 1.0)
        t.append(clock())
        recent.add_many(pubs, listed)
        t.append(clock())
        {pub.source: pub.source_seq for pub in pubs}
        t.append(clock())
        link.sender.credit = 10
        link.pump(1.0)
        t.append(clock())
        for i, stage in enumerate(STAGES):
            spent[stage] += t[i + 1] - t[i]
    return {k: v / (BATCHES * N) * 1e6 for k, v in spent.items()}


def main() -> None:
    data = batches()
    gc.disable()
    best = stages(data)
    for _ in range(6):
        best = {k: min(v, w) for (k, v), w in zip(best.items(), stages(data).values(),
                                                  strict=True)}
    print(" ".join(f"{k} {v:.3f}" for k, v in best.items()),
          f"total {sum(best.values()):.3f} us/pub")


if __name__ == "__main__":
    main()
