"""Throwaway design-study benchmark (notes/packed-rows.md): redis-server CPU per publication
of the journal's APPEND script and of a *packed* row format (one stream entry per appended
batch, entry ID = the batch's last number, the batch's envelope as one value), then the read
side (READ / READ_ROWS against a packed READ) and the Python decode of each page, and the
memory of a stream of 100,000 publications both ways. A private redis-server; redis CPU is
``INFO cpu`` (user + sys) over the calls, best of ``--runs``. Nothing in ``seqrepair`` changes:
the packed scripts live here only.

    python benchmarks/notes/packed_rows_lua.py [--runs 5] [--only write|read|memory|decode]
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import redis

from seqrepair.core.messages import Publication, PublishType
from seqrepair.journal.envelope import encode_envelope
from seqrepair.journal.format import JournalRow, meta_key, stream_key
from seqrepair.journal.journal import Journal
from seqrepair.journal.scripts import APPEND, JOURNALED_CHANNEL, READ, READ_ROWS

SOURCE = "bench-src"
BITS = 32
TOTAL = 98_304  # publications per measured write (12 slices of CHUNK)

APPEND_NO_SOURCE_BITS = re.sub(r"call\('XADD', key, id, 'source', source, ",
                               "call('XADD', key, id, ", APPEND)
APPEND_NO_SOURCE_BITS = re.sub(r"'wire', e\[7\], 'bits', bits\)", "'wire', e[7])",
                               APPEND_NO_SOURCE_BITS)
assert APPEND_NO_SOURCE_BITS.count("'bits', bits)") == 2  # the two marker XADDs keep theirs

_PACK_HEAD = """
-- ARGV: source, bits, first, last, envelope (the batch's rows, JSON text, stored as is)
local meta = redis.call('HMGET', KEYS[2], 'high_water', 'bits')
local hw = tonumber(meta[1] or '0')
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #top > 0 then
  local top_seq = tonumber(string.match(top[1][1], '^(%d+)'))
  if top_seq > hw then hw = top_seq end
end
if meta[2] and meta[2] ~= ARGV[2] then
  return {'bits', meta[2]}
end
local first = tonumber(ARGV[3])
local last = tonumber(ARGV[4])
if first ~= hw + 1 or last < first then
  return {'conflict', tostring(hw)}
end
"""
_PACK_TAIL = """
redis.call('XADD', KEYS[1], ARGV[4] .. '-0', 'first', ARGV[3], 'rows', ARGV[5])
redis.call('HSET', KEYS[2], 'high_water', ARGV[4], 'bits', ARGV[2])
redis.call('HSETNX', KEYS[2], 'trimmed_through', '0')
redis.call('PUBLISH', 'CHANNEL', ARGV[4] .. ' ' .. ARGV[1])
return {'ok', ARGV[4]}
""".replace("'CHANNEL'", repr(JOURNALED_CHANNEL))

APPEND_PACKED = _PACK_HEAD + _PACK_TAIL
"""Continuity from the first/last numbers passed as arguments, the envelope not decoded."""

APPEND_PACKED_CHECKED = _PACK_HEAD + """
local batch = cjson.decode(ARGV[5])
if #batch ~= last - first + 1 or tonumber(batch[1][1]) ~= first
   or tonumber(batch[#batch][1]) ~= last then
  return {'conflict', tostring(hw)}
end
""" + _PACK_TAIL
"""The same, with the envelope decoded to check its first/last/count against the arguments."""

READ_PACKED = """
-- ARGV: first, last (numbers), max rows. The packed rows holding first..last (entry ID = a
-- row's last number): XRANGE first..last gives every row ending in the range, one more XRANGE
-- the row holding last when no row ends there. Their envelopes joined as one JSON text
-- without decoding them: [[first, envelope], ...]
local meta = redis.call('HMGET', KEYS[2], 'high_water', 'trimmed_through')
local rows = redis.call('XRANGE', KEYS[1], ARGV[1] .. '-0', ARGV[2] .. '-0', 'COUNT', ARGV[3])
local out = {}
for i = 1, #rows do
  local f = rows[i][2]
  out[i] = '[' .. f[2] .. ',' .. f[4] .. ']'
end
local top = -1
if #rows > 0 then top = tonumber(string.match(rows[#rows][1], '^(%d+)')) end
if top < tonumber(ARGV[2]) and #rows < tonumber(ARGV[3]) then
  local tail = redis.call('XRANGE', KEYS[1], '(' .. ARGV[2] .. '-0', '+', 'COUNT', 1)
  if #tail > 0 then
    local f = tail[1][2]
    out[#out + 1] = '[' .. f[2] .. ',' .. f[4] .. ']'
  end
end
return {meta[1] or '0', meta[2] or '0', '[' .. table.concat(out, ',') .. ']'}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def publications(first: int, n: int) -> list[Publication]:
    """A relay-shaped batch (as relay_bound_lua.py: fields of two keys, a timestamp)."""
    now = time.time()
    return [Publication(topic="/bench/topic", source=SOURCE, source_seq=s,
                        ptype=PublishType.UPDATE, fields={"n": s, "price": 1.5},
                        timestamp=now) for s in range(first, first + n)]


def envelopes(batch: int, total: int = TOTAL) -> list[tuple[int, int, bytes]]:
    return [(first, first + batch - 1, encode_envelope(publications(first, batch), BITS, SOURCE))
            for first in range(1, total + 1, batch)]


class Server:
    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", self.dir.name], stdout=subprocess.DEVNULL)
        self.client = redis.Redis(port=port)
        for _ in range(100):
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)

    def cpu(self) -> float:
        info: dict[str, Any] = self.client.info("cpu")  # type: ignore[assignment]
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.dir.cleanup()


KEYS = (stream_key(SOURCE), meta_key(SOURCE))
CHUNK = 8192  # publications per measured slice (a multiple of every batch size)


def keys_of(case: int) -> tuple[str, str]:
    """A case's own stream and meta keys (the scripts never compare the key with ARGV's source)."""
    return stream_key(f"{SOURCE}.{case}"), meta_key(f"{SOURCE}.{case}")


def slim(envs: list[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
    """The envelopes without each row's number and wire (both follow from the row's first
    number, its place and the bits): what a packed row would need to hold."""
    return [(a, b, json.dumps([row[1:6] for row in json.loads(env)],
                              separators=(",", ":")).encode()) for a, b, env in envs]


def call_append(srv: Server, sha: str, keys: tuple[str, str], packed: bool,
                env: tuple[int, int, bytes]) -> None:
    first, last, text = env
    if packed:
        reply = srv.client.evalsha(sha, 2, *keys, SOURCE, str(BITS), str(first), str(last), text)
    else:
        reply = srv.client.evalsha(sha, 2, *keys, SOURCE, str(BITS), text)
    assert reply[0] == b"ok", reply


def write_all(srv: Server, script: str, envs: list[tuple[int, int, bytes]], packed: bool,
              keys: tuple[str, str] = KEYS) -> float:
    """Fill ``keys``'s stream from empty; redis CPU per publication (us)."""
    sha = srv.client.script_load(script)
    srv.client.delete(*keys)
    before = srv.cpu()
    for env in envs:
        call_append(srv, sha, keys, packed, env)
    return (srv.cpu() - before) / envs[-1][1] * 1e6


WRITE_CASES: list[tuple[str, str, int, bool]] = [
    ("APPEND as is", APPEND, 256, False),
    ("APPEND as is", APPEND, 16, False),
    ("APPEND as is", APPEND, 1024, False),
    ("APPEND without source/bits fields", APPEND_NO_SOURCE_BITS, 256, False),
    ("packed, not decoded", APPEND_PACKED, 16, True),
    ("packed, not decoded", APPEND_PACKED, 256, True),
    ("packed, not decoded", APPEND_PACKED, 1024, True),
    ("packed, decoded to check", APPEND_PACKED_CHECKED, 16, True),
    ("packed, decoded to check", APPEND_PACKED_CHECKED, 256, True),
    ("packed, decoded to check", APPEND_PACKED_CHECKED, 1024, True),
]


def measure_write(srv: Server, runs: int) -> None:
    """Every case fills its own stream, the cases taking turns a slice of CHUNK publications
    at a time (so a slow moment of this shared machine hits them alike); per case the best
    run's us/pub, and the median over slices of its ratio to APPEND as is (256) in the same
    slice."""
    print(f"## write: redis CPU us/pub, {TOTAL:,} publications a run, best of {runs}; "
          "ratio to APPEND as is (256), median of same-slice ratios")
    envs = {b: envelopes(b) for b in (16, 256, 1024)}
    shas = [srv.client.script_load(script) for _, script, _, _ in WRITE_CASES]
    totals: dict[int, list[float]] = {i: [] for i in range(len(WRITE_CASES))}
    ratios: dict[int, list[float]] = {i: [] for i in range(len(WRITE_CASES))}
    for _ in range(runs):
        used = [0.0] * len(WRITE_CASES)
        srv.client.flushall()
        for start in range(0, TOTAL, CHUNK):
            slice_cost = []
            for i, (_, _, batch, packed) in enumerate(WRITE_CASES):
                part = envs[batch][start // batch:(start + CHUNK) // batch]
                before = srv.cpu()
                for env in part:
                    call_append(srv, shas[i], keys_of(i), packed, env)
                cost = srv.cpu() - before
                used[i] += cost
                slice_cost.append(cost)
            for i, cost in enumerate(slice_cost):
                ratios[i].append(cost / slice_cost[0])
        for i in range(len(WRITE_CASES)):
            totals[i].append(used[i] / TOTAL * 1e6)
    print("| script | batch | us/pub best | worst | ratio to APPEND 256 |")
    for i, (name, _, batch, _) in enumerate(WRITE_CASES):
        print(f"| {name} | {batch} | {min(totals[i]):.2f} | {max(totals[i]):.2f} | "
              f"{statistics.median(ratios[i]):.3f} |")


def fill(srv: Server, batch: int | None, keys: tuple[str, str] = KEYS) -> None:
    """100k publications written the current way (batch None: 256-entry appends) or packed."""
    if batch is None:
        write_all(srv, APPEND, envelopes(256), False, keys)
    else:
        write_all(srv, APPEND_PACKED, envelopes(batch), True, keys)


def read_pass(srv: Server, script: str, ranges: list[tuple[int, int]],
              args: Callable[[int, int], list[Any]], keys: tuple[str, str] = KEYS
              ) -> tuple[float, list[Any]]:
    sha = srv.client.script_load(script)
    call = srv.client.evalsha
    replies = []
    before = srv.cpu()
    for a, b in ranges:
        replies.append(call(sha, 2, *keys, *args(a, b)))
    used = srv.cpu() - before
    wanted = sum(b - a + 1 for a, b in ranges)
    return used / wanted * 1e6, replies


def read_ranges(size: int, offset: int, count: int) -> list[tuple[int, int]]:
    """``count`` ranges of ``size`` numbers, the first starting at ``offset``, spread over the
    100k (a stride not a multiple of any batch size, so their places in rows vary)."""
    stride = (TOTAL - size - offset) // count
    return [(offset + i * stride, offset + i * stride + size - 1) for i in range(count)]


def decode_current(text: bytes) -> list[Publication]:
    return [Journal._row(SOURCE, row).publication(SOURCE)  # type: ignore[union-attr]
            for row in json.loads(text)]


def rows_current(text: bytes) -> list[Any]:
    return [Journal._row(SOURCE, row) for row in json.loads(text)]


def rows_packed(text: bytes, a: int, b: int) -> list[JournalRow]:
    """The packed page's entries a..b as the JournalRows READ_ROWS gives (same parts)."""
    out: list[JournalRow] = []
    add = out.append
    bits = str(BITS)
    for first, entries in json.loads(text):
        first = int(first)
        lo = max(0, a - first)
        hi = min(len(entries), b - first + 1)
        for e in entries[lo:hi]:
            add(JournalRow(first + lo, [f"{e[0]}-0", SOURCE, e[1], e[2], e[3], e[4], e[5], e[6],
                                        bits]))
            lo += 1
    return out


def decode_packed(text: bytes, a: int, b: int) -> list[Publication]:
    return [row.publication(SOURCE) for row in rows_packed(text, a, b)]


def best_time(fn: Callable[[], Any], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_read(srv: Server, runs: int) -> None:
    """Per read shape, the variants take turns within each run (each layout in its own
    stream); redis us/pub returned, best run, and the median over runs of the ratio to
    READ_ROWS in the same run; then the Python side of the same replies, best of ``runs``."""
    shapes = [("probe (1)", 1, 7, 1000), ("64 inside a row", 64, 70, 500),
              ("1000 spanning rows (a page)", 1000, 100, 60)]
    layouts: list[tuple[str, int | None]] = [("current rows", None), ("packed 16", 16),
                                              ("packed 256", 256), ("packed 1024", 1024)]
    keys = {batch: keys_of(100 + i) for i, (_, batch) in enumerate(layouts)}
    for _, batch in layouts:
        fill(srv, batch, keys[batch])
    variants: list[tuple[str, str, int | None, Callable[[int, int], list[Any]]]] = [
        ("READ", READ, None, lambda a, b: [f"{a}-0", f"{b}-0", 1000, "fwd"]),
        ("READ_ROWS", READ_ROWS, None, lambda a, b: [f"{a}-0", f"{b}-0", 1000]),
        ("READ_PACKED", READ_PACKED, 16, lambda a, b: [a, b, 1000]),
        ("READ_PACKED", READ_PACKED, 256, lambda a, b: [a, b, 1000]),
        ("READ_PACKED", READ_PACKED, 1024, lambda a, b: [a, b, 1000]),
    ]
    print(f"## read: redis CPU us/pub returned, best of {runs}; ratio to READ_ROWS (median of "
          "same-run ratios); Python us/pub, best of the same")
    print("| read | script (layout) | redis us/pub | ratio | us/call | py parse+rows | "
          "py to Publication | reply B/pub |")
    for shape, size, offset, count in shapes:
        ranges = read_ranges(size, offset, count)
        wanted = sum(b - a + 1 for a, b in ranges)
        cpu: list[list[float]] = [[] for _ in variants]
        ratio: list[list[float]] = [[] for _ in variants]
        replies: list[list[Any]] = [[] for _ in variants]
        for _ in range(runs):
            costs = []
            for i, (_, script, batch, args) in enumerate(variants):
                used, replies[i] = read_pass(srv, script, ranges, args, keys[batch])
                cpu[i].append(used)
                costs.append(used)
            for i, cost in enumerate(costs):
                ratio[i].append(cost / costs[1])
        for i, (name, _, batch, _) in enumerate(variants):
            texts = [r[2] for r in replies[i]]
            pairs = list(zip(texts, ranges, strict=True))
            if batch is None:
                got = sum(len(rows_current(t)) for t in texts)
                parse = best_time(lambda p=pairs: [rows_current(t) for t, _ in p], runs)
                full = best_time(lambda p=pairs: [decode_current(t) for t, _ in p], runs)
            else:
                got = sum(len(rows_packed(t, a, b)) for t, (a, b) in pairs)
                parse = best_time(lambda p=pairs: [rows_packed(t, a, b) for t, (a, b) in p],
                                  runs)
                full = best_time(
                    lambda p=pairs: [decode_packed(t, a, b) for t, (a, b) in p], runs)
            assert got == wanted, (shape, name, batch, got, wanted)
            size_b = sum(len(t) for t in texts) / wanted
            label = "current rows" if batch is None else f"packed {batch}"
            print(f"| {shape} | {name} ({label}) | {min(cpu[i]):.2f} | "
                  f"{statistics.median(ratio[i]):.2f} | "
                  f"{min(cpu[i]) * wanted / len(ranges):.0f} | {parse / wanted * 1e6:.2f} | "
                  f"{full / wanted * 1e6:.2f} | {size_b:.0f} |")


def measure_memory(srv: Server) -> None:
    print(f"## memory: MEMORY USAGE of the stream, {TOTAL:,} publications")
    cases: list[tuple[str, str, int, bool]] = [
        ("current rows (appends of 256)", APPEND, 256, False),
        ("without source/bits fields", APPEND_NO_SOURCE_BITS, 256, False),
        ("packed 16", APPEND_PACKED, 16, True),
        ("packed 256", APPEND_PACKED, 256, True),
        ("packed 1024", APPEND_PACKED, 1024, True),
        ("packed 256, slim rows (no number, no wire)", APPEND_PACKED, 256, True),
    ]
    for name, script, batch, packed in cases:
        envs = envelopes(batch)
        srv.client.flushall()
        used0 = srv.client.info("memory")["used_memory"]
        write_all(srv, script, slim(envs) if "slim" in name else envs, packed)
        usage = srv.client.memory_usage(KEYS[0], samples=0) or 0
        length = srv.client.xlen(KEYS[0])
        used = srv.client.info("memory")["used_memory"] - used0
        print(f"| {name} | {length} entries | {usage / TOTAL:.1f} B/pub | "
              f"used_memory {used / TOTAL:.1f} B/pub |")


def check_same(srv: Server) -> None:
    """The packed page of a range holds the publications the current READ_ROWS gives."""
    fill(srv, None)
    a, b = 300, 1299
    sha = srv.client.script_load(READ_ROWS)
    current = decode_current(srv.client.evalsha(sha, 2, *KEYS, f"{a}-0", f"{b}-0", 1000)[2])
    fill(srv, 256)
    sha = srv.client.script_load(READ_PACKED)
    packed = decode_packed(srv.client.evalsha(sha, 2, *KEYS, a, b, 1000)[2], a, b)
    strip = [(p.source_seq, p.topic, p.ptype, dict(p.fields)) for p in current]
    assert strip == [(p.source_seq, p.topic, p.ptype, dict(p.fields)) for p in packed]
    assert [p.source_seq for p in packed] == list(range(a, b + 1))
    print("check: packed page == READ_ROWS page for", a, "..", b)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=["write", "read", "memory"], default=None)
    opts = parser.parse_args()
    srv = Server()
    try:
        check_same(srv)
        if opts.only in (None, "write"):
            measure_write(srv, opts.runs)
        if opts.only in (None, "read"):
            measure_read(srv, opts.runs)
        if opts.only in (None, "memory"):
            measure_memory(srv)
    finally:
        srv.close()


if __name__ == "__main__":
    main()
