# ruff: noqa
"""Throwaway: the upstream thread per transfer (in _take vs between transfers) of one relaytrace json."""
import json, sys, statistics
rows = json.load(open(sys.argv[1]))["rows"]
rec = [r for r in rows if r[2]=="received"]
off = [r for r in rows if r[2]=="offered"]
print("received counts", [r[3] for r in rec[:3]], "first rec t", rec[0][0]%100, rec[1][0]%100)
rec = rec[1:] if len(rec) == len(off)+1 else rec
proc = [o[0]-r[0] for r, o in zip(rec, off)]
idle = [rec[i+1][0]-off[i][0] for i in range(len(off)-1)]
print("transfers", len(off), "upstream thread: in _take (received->offered) sum %.3f med %.2f ms; between transfers sum %.3f med %.2f ms" % (sum(proc), statistics.median(proc)*1e3, sum(idle), statistics.median(idle)*1e3))
print("per-transfer busy ms", [round(x*1e3,1) for x in proc[:40]])
print("between ms", [round(x*1e3,1) for x in idle[:40]])
