# ruff: noqa
"""Throwaway analysis of a bench_relay.py --trace DIR (stages per batch, spans, latencies); see notes/relay-bound.md. Not cleaned up: a head start."""
import json, sys, collections, statistics
d = sys.argv[1]
import glob, os
files = sorted(glob.glob(d + "/*.json"))
for f in files:
    name = os.path.basename(f)
    if "sub-" in name:
        off, times, nums = json.load(open(f))
        t = [x + off for x in times]
        print(name, "span %.3f s, rate %.0f/s, first %.3f" % (t[-1]-t[0], (len(t)-1)/(t[-1]-t[0]), t[0] % 100))
        # gaps: largest inter-delivery gaps
        gaps = sorted(((t[i+1]-t[i], i) for i in range(len(t)-1)), reverse=True)[:5]
        print("   biggest gaps ms:", [(round(g*1e3,1), nums[i]) for g, i in gaps])
        if "relayed" in name:
            SUB = dict(zip(nums, t))
    else:
        rows = json.load(open(f)); print("  thread CPU s", rows["threads"]); rows = rows["rows"]
        by = collections.defaultdict(list)
        for r in rows:
            by[r[2]].append(r)
        for st in ["received", "offered", "taken", "append0", "append1", "fanout0", "fanout1", "pumped"]:
            rs = [r for r in by[st] if st == "pumped" or r[3]]
            if not rs: continue
            cnt = [r[3] for r in rs]
            print("  %-9s n=%5d span %.3f first %.3f  count med %s max %s  thread %s" % (
                st, len(rs), rs[-1][0]-rs[0][0], rs[0][0] % 100, statistics.median(cnt), max(cnt), rs[0][1]))
        RELAY = by
    if "sub-relayed" in name:
        # per appended batch: latency from received of its first seq to stages
        recv = {}
        for r in RELAY["received"]:
            pass
        off_first = {}
        for st in ["offered", "taken", "append0", "append1", "fanout0", "fanout1"]:
            for r in RELAY[st]:
                if r[3]:
                    off_first.setdefault(st, {})[r[4]] = r[0]
        lat = collections.defaultdict(list)
        for seq, t0 in off_first["offered"].items():
            for st in ["taken", "fanout1"]:
                if seq in off_first.get(st, {}):
                    lat[st].append(off_first[st][seq] - t0)
            if seq in SUB:
                lat["sub"].append(SUB[seq] - t0)
        for st, v in lat.items():
            print("   offered->%s ms: med %.2f p90 %.2f max %.2f" % (st, statistics.median(v)*1e3, sorted(v)[int(len(v)*.9)]*1e3, max(v)*1e3))
        a = list(zip(RELAY["append0"], RELAY["append1"]))
        dur = [y[0]-x[0] for x, y in a]
        print("   appends: %d, sizes med %s, dur med %.2f ms sum %.3f s; " % (len(a), statistics.median([x[3] for x,_ in a]), statistics.median(dur)*1e3, sum(dur)))
        fo = list(zip(RELAY["fanout0"], RELAY["fanout1"]))
        print("   fanouts: %d, sizes med %s, dur sum %.3f s" % (len(fo), statistics.median([x[3] for x,_ in fo]), sum(y[0]-x[0] for x,y in fo)))
