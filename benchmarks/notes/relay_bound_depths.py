# ruff: noqa
"""Throwaway: queue depths over a relayed round from one relaytrace json: the handover
(offered - taken) and the journaler (taken - fanned out), max and time-weighted mean."""
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
ev = []
for t, _th, st, n, *_ in rows:
    if st == "offered": ev.append((t, n, 0))
    elif st == "taken": ev.append((t, -n, n))
    elif st == "fanout1": ev.append((t, 0, -n))
ev.sort()
h = j = 0; hmax = jmax = 0; hw = jw = 0.0; last = ev[0][0]
for t, dh, dj in ev:
    hw += h * (t - last); jw += j * (t - last); last = t
    h += dh; j += dj; hmax = max(hmax, h); jmax = max(jmax, j)
span = ev[-1][0] - ev[0][0]
print(f"handover max {hmax} mean {hw/span:.0f}; journaler (submitted, not fanned out) max {jmax} mean {jw/span:.0f}; span {span:.3f}s")
