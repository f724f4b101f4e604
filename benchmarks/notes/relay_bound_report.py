"""Throwaway analysis of a bench_relay.py --trace DIR (stages per batch, spans, latencies); see
notes/relay-bound.md. A head start, not a finished tool."""

import collections
import statistics
import sys
from pathlib import Path

from relay_bound_trace import Row, relay_trace, subscriber_trace

STAGES = ["received", "offered", "taken", "append0", "append1", "fanout0", "fanout1", "pumped"]
LATER = ["offered", "taken", "append0", "append1", "fanout0", "fanout1"]


def subscriber(name: str, path: Path) -> dict[int, float]:
    """Print one subscriber's span, rate and largest gaps; its delivery time per number."""
    t, nums = subscriber_trace(path)
    span = t[-1] - t[0]
    print(name, f"span {span:.3f} s, rate {(len(t) - 1) / span:.0f}/s, first {t[0] % 100:.3f}")
    gaps = sorted(((t[i + 1] - t[i], i) for i in range(len(t) - 1)), reverse=True)[:5]
    print("   biggest gaps ms:", [(round(g * 1e3, 1), nums[i]) for g, i in gaps])
    return dict(zip(nums, t, strict=False))


def relay(path: Path) -> dict[str, list[Row]]:
    """Print the relay's thread CPU and each stage's rows; the rows by stage."""
    rows, threads = relay_trace(path)
    print("  thread CPU s", threads)
    by_stage: dict[str, list[Row]] = collections.defaultdict(list)
    for r in rows:
        by_stage[r[2]].append(r)
    for stage in STAGES:
        rs = [r for r in by_stage[stage] if stage == "pumped" or r[3]]
        if not rs:
            continue
        counts = [r[3] for r in rs]
        print(
            f"  {stage:<9} n={len(rs):5d} span {rs[-1][0] - rs[0][0]:.3f} "
            f"first {rs[0][0] % 100:.3f}  count med {statistics.median(counts)} "
            f"max {max(counts)}  thread {rs[0][1]}"
        )
    return by_stage


def latencies(by_stage: dict[str, list[Row]], delivered: dict[int, float]) -> None:
    """Per batch, from its first number offered to the later stages and to the subscriber;
    the journal appends and the fan-outs."""
    first_at: dict[str, dict[int, float]] = {}
    for stage in LATER:
        for r in by_stage[stage]:
            if r[3]:
                first_at.setdefault(stage, {})[r[4]] = r[0]
    lat: dict[str, list[float]] = collections.defaultdict(list)
    for seq, t0 in first_at["offered"].items():
        for stage in ["taken", "fanout1"]:
            if seq in first_at.get(stage, {}):
                lat[stage].append(first_at[stage][seq] - t0)
        if seq in delivered:
            lat["sub"].append(delivered[seq] - t0)
    for stage, v in lat.items():
        print(
            f"   offered->{stage} ms: med {statistics.median(v) * 1e3:.2f} "
            f"p90 {sorted(v)[int(len(v) * 0.9)] * 1e3:.2f} max {max(v) * 1e3:.2f}"
        )
    appends = list(zip(by_stage["append0"], by_stage["append1"], strict=False))
    durations = [end[0] - begin[0] for begin, end in appends]
    print(
        f"   appends: {len(appends)}, sizes med {statistics.median([b[3] for b, _ in appends])}, "
        f"dur med {statistics.median(durations) * 1e3:.2f} ms sum {sum(durations):.3f} s; "
    )
    fanouts = list(zip(by_stage["fanout0"], by_stage["fanout1"], strict=False))
    print(
        f"   fanouts: {len(fanouts)}, sizes med {statistics.median([b[3] for b, _ in fanouts])}, "
        f"dur sum {sum(end[0] - begin[0] for begin, end in fanouts):.3f} s"
    )


def main(trace_dir: str) -> None:
    by_stage: dict[str, list[Row]] = {}
    for path in sorted(Path(trace_dir).glob("*.json")):
        name = path.name
        if "sub-" in name:
            delivered = subscriber(name, path)
            if "sub-relayed" in name:
                latencies(by_stage, delivered)
        else:
            by_stage = relay(path)


if __name__ == "__main__":
    main(sys.argv[1])
