"""One hostile connection cannot stop the component serving everyone else (issue 24).

Real processes: a private redis-server, ``seqrepair serve`` with the resource options of
:data:`chaos.SERVE_ARGS`, an honest journaling publisher at 500 publications/s (1 KiB each, its
own process) and an honest library ``Subscriber`` timing every delivery; after 3 s of honest
traffic an attacker process (:mod:`attacks`, at nice 10) runs one attack for 12 s, then 3 s
more of honest traffic. For each attack (:data:`chaos.ATTACKS`) and for all of them at once:

* the honest stream never stalls: inter-delivery gaps p99 <= 1 s and max <= 3 s; it keeps at
  least half its pace, publish -> delivery delay p99 <= 2 s + 0.5 s per second of attack
  (:data:`PACE_LAG`), and it has caught up by the end (the last :data:`CAUGHT_UP` deliveries
  within 2 s), each plus the time the machine kept the honest path's processes (component,
  feed, subscriber) off the CPU meanwhile (``schedstat``'s run delay, measured in the same
  run; ~0 on a quiet machine);
* nothing honest is lost: the honest source arrives exactly once, in order, and is exactly
  what the journal holds;
* the component's RSS (``/proc``, every 0.5 s) stays under :func:`ceiling_mib`: the baseline
  before the attack + the ``component-bytes`` it reports in CAPABILITIES + 48 MiB;
* a fresh client is served within 5 s during the attack (a CAPABILITIES query), plus the time
  the machine kept the component and the client off the CPU during the query;
* what the attack itself got is bounded: never-open connections are all closed
  (``--open-timeout 2``; the attacker waits up to 20 s after its 12 s for the last ones a
  starved component accepted late), a hoarder gets at most ``max-links-per-connection`` links.

Why the allowances: on a 2-core machine shared with other work (load 8-11) the honest stream
flowed (gap p99 0.05 s, max 0.3-0.6 s) but the delay p99 reached 3.3-7.8 s, a fresh client
waited 7.8-9.7 s and 85-162 never-open connections were still open when the 12 s ended: in
those runs the component's busiest thread waited 12-17 s for a CPU, 9-10 s during the query.
A wall-clock bound alone measured the machine. The stall, loss and memory bounds stay absolute;
the tight latency figures (delay p99 and max as ratios to a same-run baseline, the fresh
client's time) are ``benchmarks/bench_attacks.py``'s.

All at once went over the RSS ceiling (166-223 MiB against ~157) until repair steps waited for
a peer's socket to take what was sent (proton kept each replay's frames, ~13 MiB a connection):
now 124-146 MiB (:data:`KNOWN_OVER_CEILING` is empty; an attack named there has only its RSS
bound as an expected failure).

Bounds, measured first (2 cores shared with other test runs, load 3-8): undisturbed, gaps are
~0.02 s at p99 and <= 0.1 s at most, the delay 0.01-0.07 s at p99 and RSS grows ~3 MiB in the
18 s. With the fixes (a local merge of fair, memory and limits) the single attacks measured:
delay p99 at most 0.79 s (the flood), gap max at most 0.43 s, RSS growth at most +83 MiB (the
flood; the allowance is 64 + 48 MiB). The bounds leave >= 2.5x on the delay, >= 7x on gaps.

Before the fixes (main at b0ccc9f, defaults) every attack broke a bound: the flood froze the
honest stream 47-57 s (RSS 55 -> 1,237 MiB, a fresh client not answered in 10 s), 16 dead
links grew RSS 55 -> 208 MiB and kept it, 330 links on one connection took it to 352 MiB,
and 500 never-open connections held 511 descriptors, none closed (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import pytest

from .chaos import ATTACKS, SERVE_ARGS, Outcome, Scenario

pytestmark = [pytest.mark.amqp, pytest.mark.redis, pytest.mark.slow]

GAP_P99_S = 1.0
GAP_MAX_S = 3.0
DELAY_P99_S = 2.0
FRESH_CLIENT_S = 5.0
PACE_LAG = 0.5
"""Seconds of delay the honest stream may gather per second of attack: it is served at least
half its rate (500 publications/s) while the attack lasts. All the attacks at once saturate
the component's thread on the 2-core machine (the hoarder's 30 busy links alone are 15,000
transfers/s): there the delay grew ~0.4 s a second in some runs (p99 4.30 and 4.45 s, quiet
machine, load 1.4, CI and a rerun; 0.3-1.1 s in others) while gaps stayed ~0.3 s at most and
the stream caught up within a second of the attack's end. Capacity, not a stall: the gap
bounds catch a stall, :data:`CAUGHT_UP` that it is over."""
CAUGHT_UP = 250
"""The last deliveries (0.5 s of the honest feed, which runs 3 s past the attack) whose delay
must be back under :data:`DELAY_P99_S` (plus the starvation): the stream caught up."""

BASE_HEADROOM_MIB = 48.0
"""RSS the component may add over its pre-attack baseline on top of its byte budget: Python's
allocator, proton's buffers, replay pages in flight and the honest traffic's own growth."""


def ceiling_mib(outcome: Outcome) -> float:
    """The RSS the component must stay under: its baseline, plus the whole-component byte
    budget it reports (``limits``), plus :data:`BASE_HEADROOM_MIB`."""
    budget = outcome.caps_limits.get("component-bytes", 0.0) / (1 << 20)
    return outcome.baseline_rss + budget + BASE_HEADROOM_MIB


def check(outcome: Outcome) -> list[str]:
    """Every bound the outcome breaks, in words (empty: all hold)."""
    figures = outcome.figures()
    broken = []
    if not outcome.component_alive:
        broken.append("the component exited")
    if not outcome.exactly_once_in_order:
        broken.append(f"honest stream not exactly once in order: delivered "
                      f"{len(outcome.delivered)} of {len(outcome.journaled)} journaled")
    if outcome.publisher.get("flushed") is not True:
        broken.append(f"the honest publisher did not finish: {outcome.publisher}")
    if figures["gap_p99_s"] > GAP_P99_S:
        broken.append(f"inter-delivery gap p99 {figures['gap_p99_s']} s > {GAP_P99_S}")
    if figures["gap_max_s"] > GAP_MAX_S:
        broken.append(f"inter-delivery gap max {figures['gap_max_s']} s > {GAP_MAX_S}")
    starved = sum(outcome.starved_s.values())
    lag = PACE_LAG * attrs.fields(Scenario).attack_s.default
    if figures["delay_p99_s"] > DELAY_P99_S + lag + starved:
        broken.append(f"delay p99 {figures['delay_p99_s']} s > {DELAY_P99_S} + {lag} + "
                      f"{starved:.2f} (half the rate over the attack; the honest path's "
                      f"processes kept off the CPU by the machine)")
    late = max(outcome.delays[-CAUGHT_UP:], default=float("inf"))
    if late > DELAY_P99_S + starved:
        broken.append(f"not caught up after the attack: the last {CAUGHT_UP} deliveries' "
                      f"delay {late:.3f} s > {DELAY_P99_S} + {starved:.2f}")
    if outcome.peak_rss > ceiling_mib(outcome):
        broken.append(f"RSS peak {outcome.peak_rss:.0f} MiB > ceiling "
                      f"{ceiling_mib(outcome):.0f} MiB")
    if outcome.late_connect_s is None or \
            outcome.late_connect_s > FRESH_CLIENT_S + outcome.late_starved_s:
        broken.append(f"a fresh client's CAPABILITIES during the attack: "
                      f"{outcome.late_connect_s} s > {FRESH_CLIENT_S} + "
                      f"{outcome.late_starved_s:.2f} (kept off the CPU by the machine)")
    return broken + attack_bounds(outcome)


def attack_bounds(outcome: Outcome) -> list[str]:
    """What the attacker itself may get: never-open connections closed, links limited."""
    broken = []
    limits = outcome.caps_limits
    for part in outcome.attacker.get("parts", []):
        if part["attack"] == "never-open":
            deadline = limits.get("open-timeout")
            if deadline is None:
                broken.append("the component reports no open-timeout")
            elif part["still_open"] > 0:
                broken.append(f"{part['still_open']} of {part['connected']} never-open "
                              f"connections never closed (open-timeout {deadline} s; "
                              f"{part['open_at_end']} open when the attack ended)")
        if part["attack"] == "hoard":
            most = limits.get("max-links-per-connection")
            if most is None or part["links_attached"] > most:
                broken.append(f"one connection attached {part['links_attached']} links "
                              f"(max-links-per-connection {most})")
    if "error" in outcome.attacker:
        broken.append(f"the attacker failed: {outcome.attacker['error']}")
    return broken


KNOWN_OVER_CEILING: dict[str, str] = {}
"""Attacks whose RSS is known to pass the ceiling with today's component: only that bound is
an expected failure (every other bound of the run still fails the test), and the test passes
as soon as the RSS stays under it."""


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_honest_subscriber_is_served_on_and_memory_stays_bounded(
    attack: str, tmp_path: Path
) -> None:
    args, fill = ATTACKS[attack]
    outcome = Scenario(tmp_path, attack=attack, attack_args=args, serve_args=SERVE_ARGS,
                       fill=fill).run()
    figures: dict[str, Any] = {**outcome.figures(), "ceiling_mib": round(ceiling_mib(outcome)),
                               # the bounds hold at load 3-8 on 2 cores: say what it was
                               "loadavg_1_5_15": [round(x, 1) for x in os.getloadavg()]}
    broken = check(outcome)
    over = [b for b in broken if b.startswith("RSS peak")]
    rest = [b for b in broken if b not in over]
    assert not rest, "\n".join([*broken, json.dumps(figures, indent=1), *outcome.log_tail])
    if over and attack in KNOWN_OVER_CEILING:
        pytest.xfail(f"{over[0]}: {KNOWN_OVER_CEILING[attack]}")
    assert not over, "\n".join([*over, json.dumps(figures, indent=1), *outcome.log_tail])
