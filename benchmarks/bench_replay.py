"""How much a source replay repeats of what the link carries, as ratios in one run.

The simulation's component and stub (the real core: link context, stub, replay cut) over a link
that loses and reorders, with link resets; every run is made twice with the same seed, once by
a component that stops each source's replay where the link took over (``link_through``) and
once by one that replays to the journal's high-water (the baseline). Figures:

* publications replayed, cut / baseline;
* duplicates the stub dropped, cut / baseline (what the replay sent twice, plus the link's own
  duplicates, which both runs share);
* exactly-once and in order in every run (both must hold).

Run: .venv/bin/python benchmarks/bench_replay.py [--runs 10] [--publications 3000]
"""

from __future__ import annotations

import argparse

from seqrepair.core.messages import PublishType
from seqrepair.simulation import InMemoryComponent, LinkConditions, Simulation


def run(publications: int, seed: int, *, cut: bool) -> tuple[int, int, bool]:
    """(replayed, duplicates, exactly once in order) of one simulated run."""
    plan = [(f"feed.{i % 3}", f"/weather/wind/{i % 7}", {"n": i % 50}, PublishType.UPDATE)
            for i in range(publications)]
    resets = frozenset(range(publications // 6, publications, publications // 6))
    report = Simulation(
        bits=8, plan=plan, seed=seed, resets_at=resets,
        conditions=LinkConditions(loss=0.01, reorder=0.01, latency=0.05),
        component=InMemoryComponent(bits=8, cut_at_link=cut),
    ).run()
    return report.stats.source_repaired, report.stats.duplicates, report.exactly_once_in_order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--publications", type=int, default=3000)
    args = parser.parse_args()
    totals = {True: [0, 0], False: [0, 0]}
    exact = True
    for seed in range(args.runs):
        for cut in (True, False):
            replayed, duplicates, ok = run(args.publications, seed, cut=cut)
            totals[cut][0] += replayed
            totals[cut][1] += duplicates
            exact = exact and ok
    (cut_replayed, cut_dups), (base_replayed, base_dups) = totals[True], totals[False]
    print(f"{args.runs} runs x {args.publications} publications, 5 resets each, 8-bit link")
    print(f"replayed    cut {cut_replayed:8,}  baseline {base_replayed:8,}  "
          f"ratio {cut_replayed / max(1, base_replayed):.3f}")
    print(f"duplicates  cut {cut_dups:8,}  baseline {base_dups:8,}  "
          f"ratio {cut_dups / max(1, base_dups):.3f}")
    print(f"exactly once, in order, every run: {exact}")


if __name__ == "__main__":
    main()
