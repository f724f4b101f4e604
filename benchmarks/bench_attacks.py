"""What each attack of issue 24 costs an honest subscriber and the component, as same-run ratios.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_attacks.py [--only flood,dead] [--serve ARGS]

The chaos harness (``tests/amqp/chaos.py``): a private redis-server, ``seqrepair serve``, an
honest journaling publisher at 500 publications/s of 1 KiB (its own process) and a library
``Subscriber`` timing every delivery (delay = arrival - publish time); 3 s of honest traffic,
12 s with the attack (``tests/amqp/attacks.py``, its own process), 3 s after. The baseline is
the same run without an attack, measured in the same invocation before and after the attacks
(the ratios use the first; the second shows how far the machine drifted meanwhile).

Figures per attack: the honest delay p99 and max, and the ratio of each to the baseline's; the
inter-delivery gap p99 and max; whether the honest stream arrived exactly once and in order
(compared with the journal); the component's RSS (from ``/proc`` every 0.5 s): baseline before
the attack, peak, at the end, and the growth per dead link, per attacking connection and in
all; a fresh client's CAPABILITIES time during the attack. ``--serve`` passes options to
``seqrepair serve`` (default: the chaos test's ``SERVE_ARGS``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from amqp.chaos import ATTACKS, SERVE_ARGS, Outcome, Scenario  # noqa: E402


def attackers(outcome: Outcome) -> tuple[int, int]:
    """(connections, dead links) the attacker made."""
    connections = dead = 0
    for part in outcome.attacker.get("parts", []):
        connections += int(part.get("connections", 0))
        dead += int(part.get("links_dead", 0))
    return connections, dead


def row(outcome: Outcome, base: Outcome) -> dict[str, Any]:
    fig = outcome.figures()
    ref = base.figures()
    grown = outcome.peak_rss - outcome.baseline_rss
    connections, dead = attackers(outcome)
    return {
        "attack": outcome.attack,
        "delay_p99_s": fig["delay_p99_s"],
        "delay_p99_ratio": round(fig["delay_p99_s"] / ref["delay_p99_s"], 1),
        "delay_max_s": fig["delay_max_s"],
        "delay_max_ratio": round(fig["delay_max_s"] / ref["delay_max_s"], 1),
        "gap_p99_s": fig["gap_p99_s"],
        "gap_max_s": fig["gap_max_s"],
        "exactly_once_in_order": fig["exactly_once_in_order"],
        "rss_mib": fig["rss_mib"],
        "rss_growth_mib": round(grown, 1),
        "rss_growth_per_connection_mib": round(grown / connections, 2) if connections else None,
        "rss_growth_per_dead_link_mib": round(grown / dead, 1) if dead else None,
        "fds": fig["fds"],
        "fresh_client_s": fig["late_connect_s"],
        "limits": outcome.caps_limits,
        "attacker": outcome.attacker.get("parts", outcome.attacker),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", default=",".join(ATTACKS),
                        help=f"comma-separated attacks (default all: {','.join(ATTACKS)})")
    parser.add_argument("--serve", default=shlex.join(SERVE_ARGS),
                        help="options for seqrepair serve (default: the chaos test's)")
    args = parser.parse_args()
    serve = shlex.split(args.serve)
    tmp = Path(tempfile.mkdtemp(prefix="bench-attacks-"))
    load = [os.getloadavg()]
    started = time.monotonic()

    def scenario(attack: str | None) -> Outcome:
        attack_args, fill = ATTACKS[attack] if attack else ([], 0)
        return Scenario(tmp / (attack or f"baseline-{time.monotonic_ns()}"), attack=attack,
                        attack_args=attack_args, serve_args=serve, fill=fill).run()

    base = scenario(None)
    rows = [row(scenario(name), base) for name in args.only.split(",") if name]
    again = scenario(None)
    load.append(os.getloadavg())
    print(json.dumps({
        "serve": serve,
        "load_avg_before_after": load,
        "ran_s": round(time.monotonic() - started),
        "baseline": {k: v for k, v in base.figures().items() if k != "attacker"},
        "baseline_again": {k: v for k, v in again.figures().items() if k != "attacker"},
        "attacks": rows,
    }, indent=1))
    print("\n| attack | delay p99 s (x baseline) | delay max s (x) | gap p99 / max s | "
          "once, in order | RSS MiB base -> peak -> end | growth per conn / per dead link MiB "
          "| fresh client s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        rss = r["rss_mib"]
        per_conn = r["rss_growth_per_connection_mib"]
        per_dead = r["rss_growth_per_dead_link_mib"]
        print(f"| {r['attack']} | {r['delay_p99_s']} ({r['delay_p99_ratio']}x) | "
              f"{r['delay_max_s']} ({r['delay_max_ratio']}x) | {r['gap_p99_s']} / "
              f"{r['gap_max_s']} | {r['exactly_once_in_order']} | {rss['baseline']} -> "
              f"{rss['peak']} -> {rss['end']} | {per_conn} / {per_dead} | "
              f"{r['fresh_client_s']} |")


if __name__ == "__main__":
    main()
