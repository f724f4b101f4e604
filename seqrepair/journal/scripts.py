"""The Lua scripts the journal runs server-side. Each touches only one source's two keys
(``KEYS[1]`` the stream, ``KEYS[2]`` the meta hash), which share a Cluster slot.

Why Lua for appends: a script is atomic per batch (no other command runs in between) and it
checks everything *before* writing, so a batch is held completely or not at all. A MULTI/EXEC
pipeline is isolated but not all-or-nothing: a failing XADD does not undo the others. Measured
in ``benchmarks/bench_journal.py``, the script (one JSON argument per batch) is also the faster
of the two, because redis-py packs one argument instead of ~17 per publication.
"""

from __future__ import annotations

JOURNALED_CHANNEL = "seqrepair:journaled"
"""The Pub/Sub channel :data:`APPEND` announces each append on: ``"<high-water> <source>"``,
published inside the script, after the append (a component learns there, without a round trip
of its own, that a journaling publisher's publications are held: see
:class:`seqrepair.amqp.component.journalfeed.JournaledFeed`). A fact of the journal as good as
reading the high-water: only Redis writes it, in the same atomic script as the append."""

APPEND = """
-- ARGV: source, bits, envelope = JSON [[seq, topic, ptype, fields, permtoken|null, ts|null, wire]],
-- and optionally the not-selected selection (below)
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
local batch = cjson.decode(ARGV[3])
-- ARGV[4], when given and not empty: the numbers a batch skips were not selected by this
-- relay's upstream subscription (selection.py); each skipped range becomes one marker entry
local fill = ARGV[4]
if fill == '' then fill = nil end
-- ARGV[5], ARGV[6], when given: a skip's numbers through ARGV[5] are journaled under the
-- selection ARGV[6] instead (published before the relay subscribed), the rest under fill
local before = tonumber(ARGV[5] or '')
local before_fill = ARGV[6]
local expect = hw + 1
local gaps = {}
for i = 1, #batch do
  local seq = tonumber(batch[i][1])
  if seq ~= expect then
    if fill == nil or seq < expect then
      return {'conflict', tostring(hw)}
    end
    gaps[i] = expect
  end
  expect = seq + 1
end
local null = cjson.null
local call = redis.call
local key = KEYS[1]
local source = ARGV[1]
local bits = ARGV[2]
-- one direct call per shape: building an argument table and unpacking it costs ~1us more
for i = 1, #batch do
  local e = batch[i]
  local id = e[1] .. '-0'
  if gaps[i] then
    local from = gaps[i]
    local through = tonumber(e[1]) - 1
    if before and from <= before then
      local upto = math.min(before, through)
      call('XADD', key, from .. '-0', 'source', source, 'ptype', 'not-selected',
           'through', tostring(upto), 'selection', before_fill, 'bits', bits)
      from = upto + 1
    end
    if from <= through then
      call('XADD', key, from .. '-0', 'source', source, 'ptype', 'not-selected',
           'through', tostring(through), 'selection', fill, 'bits', bits)
    end
  end
  if e[5] == null then
    if e[6] == null then
      call('XADD', key, id, 'source', source, 'topic', e[2], 'ptype', e[3], 'fields', e[4],
           'wire', e[7], 'bits', bits)
    else
      call('XADD', key, id, 'source', source, 'topic', e[2], 'ptype', e[3], 'fields', e[4],
           'ts', e[6], 'wire', e[7], 'bits', bits)
    end
  elseif e[6] == null then
    call('XADD', key, id, 'source', source, 'topic', e[2], 'ptype', e[3], 'fields', e[4],
         'permtoken', e[5], 'wire', e[7], 'bits', bits)
  else
    call('XADD', key, id, 'source', source, 'topic', e[2], 'ptype', e[3], 'fields', e[4],
         'permtoken', e[5], 'ts', e[6], 'wire', e[7], 'bits', bits)
  end
end
local last = batch[#batch][1]
-- ARGV[7], when given and not empty: the principal a component took this batch from; the
-- source's first journaling records it (the allowance of new sources it counts against)
if hw == 0 and ARGV[7] and ARGV[7] ~= '' then
  redis.call('HSETNX', KEYS[2], 'brought_by', ARGV[7])
end
redis.call('HSET', KEYS[2], 'high_water', last, 'bits', ARGV[2])
redis.call('HSETNX', KEYS[2], 'trimmed_through', '0')
redis.call('PUBLISH', 'CHANNEL', last .. ' ' .. source)
return {'ok', last}
""".replace("'CHANNEL'", repr(JOURNALED_CHANNEL))

READ = """
-- ARGV: start id, end id, count, 'rev' for newest first. Returns high_water, trimmed_through
-- and the entries as one JSON text (one bulk string parses far faster than 17 per entry).
local meta = redis.call('HMGET', KEYS[2], 'high_water', 'trimmed_through')
local rows
if ARGV[4] == 'rev' then
  rows = redis.call('XREVRANGE', KEYS[1], ARGV[2], ARGV[1], 'COUNT', ARGV[3])
else
  rows = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
end
local text = '[]'
if #rows > 0 then
  text = cjson.encode(rows)
end
return {meta[1] or '0', meta[2] or '0', text}
"""

READ_ROWS = """
-- ARGV: start id, end id, count. READ forward for a reader that relays entries (a source
-- replay): an entry in the layout APPEND writes comes as [id, source, topic, ptype, fields,
-- permtoken|null, ts|null, wire, bits] (half the strings to parse, no names to pair), any
-- other entry (a not-selected marker, one written otherwise) as READ gives it.
local meta = redis.call('HMGET', KEYS[2], 'high_water', 'trimmed_through')
local rows = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
if #rows == 0 then
  return {meta[1] or '0', meta[2] or '0', '[]'}
end
local null = cjson.null
local out = {}
for i = 1, #rows do
  local id, f = rows[i][1], rows[i][2]
  local n = #f
  local row = nil
  if n >= 12 and f[1] == 'source' and f[3] == 'topic' and f[5] == 'ptype'
     and f[7] == 'fields' and f[n - 3] == 'wire' and f[n - 1] == 'bits' then
    if n == 12 then
      row = {id, f[2], f[4], f[6], f[8], null, null, f[10], f[12]}
    elseif n == 14 and f[9] == 'permtoken' then
      row = {id, f[2], f[4], f[6], f[8], f[10], null, f[12], f[14]}
    elseif n == 14 and f[9] == 'ts' then
      row = {id, f[2], f[4], f[6], f[8], null, f[10], f[12], f[14]}
    elseif n == 16 and f[9] == 'permtoken' and f[11] == 'ts' then
      row = {id, f[2], f[4], f[6], f[8], f[10], f[12], f[14], f[16]}
    end
  end
  out[i] = row or rows[i]
end
return {meta[1] or '0', meta[2] or '0', cjson.encode(out)}
"""

TRIM = """
-- ARGV: through (absolute), now. Removes every entry numbered <= through (capped at the
-- high-water; a not-selected marker covering through + 1 stays) and remembers it. Returns
-- trimmed_through and the number of entries removed.
local meta = redis.call('HMGET', KEYS[2], 'high_water', 'trimmed_through')
local hw = tonumber(meta[1] or '0')
local done = tonumber(meta[2] or '0')
local through = tonumber(ARGV[1])
if through > hw then through = hw end
if through <= done then
  return {tostring(done), 0}
end
local text = string.format('%.0f', through)
local keep = string.format('%.0f', through + 1) .. '-0'
-- a relay's not-selected marker reaching past through is kept whole (it begins at or before
-- through): its numbers above through stay covered, not lost
local last = redis.call('XREVRANGE', KEYS[1], keep, '-', 'COUNT', 1)[1]
if last then
  local f = last[2]
  for i = 1, #f, 2 do
    if f[i] == 'ptype' and f[i + 1] == 'not-selected' then
      for j = 1, #f, 2 do
        if f[j] == 'through' and tonumber(f[j + 1]) > through then keep = last[1] end
      end
    end
  end
end
local removed = redis.call('XTRIM', KEYS[1], 'MINID', '=', keep)
redis.call('HSET', KEYS[2], 'trimmed_through', text, 'trimmed_at', ARGV[2])
return {text, removed}
"""
