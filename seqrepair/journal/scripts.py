"""The Lua scripts the journal runs server-side. Each touches only one source's two keys
(``KEYS[1]`` the stream, ``KEYS[2]`` the meta hash), which share a Cluster slot.

Why Lua for appends: a script is atomic per batch (no other command runs in between) and it
checks everything *before* writing, so a batch is held completely or not at all. A MULTI/EXEC
pipeline is isolated but not all-or-nothing: a failing XADD does not undo the others. Measured
in ``benchmarks/bench_journal.py``, the script (one JSON argument per batch) is also the faster
of the two, because redis-py packs one argument instead of ~17 per publication.
"""

from __future__ import annotations

from seqrepair.journal.envelope import ROW_MOST

JOURNALED_CHANNEL = "seqrepair:journaled"
"""The Pub/Sub channel :data:`APPEND` announces each append on: ``"<high-water> <source>"``,
published inside the script, after the append (a component learns there, without a round trip
of its own, that a journaling publisher's publications are held: see
:class:`seqrepair.amqp.component.journalfeed.JournaledFeed`). A fact of the journal as good as
reading the high-water: only Redis writes it, in the same atomic script as the append."""

APPEND = """
-- ARGV: source, bits, the batch: either an envelope, JSON
-- [[seq, topic, ptype, fields, permtoken|null, ts|null, wire], ...] written one entry per
-- publication, or packed rows (format.py): a line 'P<first> <last>', then per row a line
-- '<first> <last> <bytes>' and that row's envelope, written one entry per row;
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
-- ARGV[4], when given and not empty: the numbers a batch skips were not selected by this
-- relay's upstream subscription (selection.py); each skipped range becomes one marker entry
local fill = ARGV[4]
if fill == '' then fill = nil end
-- ARGV[5], ARGV[6], when given: a skip's numbers through ARGV[5] are journaled under the
-- selection ARGV[6] instead (published before the relay subscribed), the rest under fill
local before = tonumber(ARGV[5] or '')
local before_fill = ARGV[6]
local null = cjson.null
local call = redis.call
local key = KEYS[1]
local source = ARGV[1]
local bits = ARGV[2]
-- a number as decimal digits: tostring and '..' write '%.14g' (1e+14 and above in exponent form)
local function digits(n) return string.format('%.0f', n) end
local function skip(from, through)  -- the markers of a range a relay's batch skips
  if before and from <= before then
    local upto = math.min(before, through)
    call('XADD', key, digits(from) .. '-0', 'source', source, 'ptype', 'not-selected',
         'through', digits(upto), 'selection', before_fill, 'bits', bits)
    from = upto + 1
  end
  if from <= through then
    call('XADD', key, digits(from) .. '-0', 'source', source, 'ptype', 'not-selected',
         'through', digits(through), 'selection', fill, 'bits', bits)
  end
end
local text = ARGV[3]
local last
if string.byte(text, 1) == 80 then  -- 'P': packed rows
  local _, at, first, through = string.find(text, '^P(%d+) (%d+)\\n')
  if not at then return redis.error_reply('ERR packed rows: no header') end
  first, through = tonumber(first), tonumber(through)
  if first ~= hw + 1 and (fill == nil or first <= hw) then
    return {'conflict', digits(hw)}
  end
  -- every row's numbers follow the one before, checked before anything is written
  local rows, expect, pos = {}, first, at + 1
  while pos <= #text do
    local _, stop, from, upto, size = string.find(text, '^(%d+) (%d+) (%d+)\\n', pos)
    if not stop or tonumber(from) ~= expect or tonumber(upto) < expect then
      return redis.error_reply('ERR packed rows: row ' .. (#rows + 1) .. ' does not continue')
    end
    size = tonumber(size)
    if stop + size > #text then
      return redis.error_reply('ERR packed rows: row ' .. (#rows + 1) .. ' is cut short')
    end
    rows[#rows + 1] = {from, upto, stop + 1, stop + size}
    expect = tonumber(upto) + 1
    pos = stop + size + 1
  end
  if #rows == 0 or expect ~= through + 1 then
    return redis.error_reply('ERR packed rows: the rows do not end at the batch\\'s last')
  end
  if first > hw + 1 then skip(hw + 1, first - 1) end
  for i = 1, #rows do
    local row = rows[i]
    call('XADD', key, row[2] .. '-0', 'first', row[1], 'source', source, 'bits', bits,
         'rows', string.sub(text, row[3], row[4]))
  end
  last = rows[#rows][2]
else
  local batch = cjson.decode(text)
  local expect = hw + 1
  local gaps = {}
  for i = 1, #batch do
    local seq = tonumber(batch[i][1])
    if seq ~= expect then
      if fill == nil or seq < expect then
        return {'conflict', digits(hw)}
      end
      gaps[i] = expect
    end
    expect = seq + 1
  end
  -- one direct call per shape: building an argument table and unpacking it costs ~1us more
  for i = 1, #batch do
    local e = batch[i]
    local id = e[1] .. '-0'
    if gaps[i] then
      skip(gaps[i], tonumber(e[1]) - 1)
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
  last = batch[#batch][1]
end
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

_ENTRIES = f"local ROW_MOST = {ROW_MOST}\n" + """
-- The entries of KEYS[1] from ARGV[1] to ARGV[2] (stream IDs as XRANGE takes them), at most
-- ARGV[3], oldest first (newest first when rev), as shape(...) makes them: a packed row
-- (format.py: ID its last number; 'first', 'source', 'bits', 'rows' its envelope) gives each
-- of its publications in the range as an entry of its own, so readers see one entry per
-- publication whichever way it was written. A range's ends may fall inside a packed row
-- (its ID is above the range's end): that row is read too, and cut. So is one holding
-- trimmed_through (ARGV of TRIM: it stays whole), its numbers up to there not given.
local function bound(id, low)
  if id == '-' then return 0 end
  if id == '+' then return math.huge end
  local n = tonumber(string.match(id, '^%(?(%d+)'))
  if string.byte(id, 1) == 40 then  -- '(': exclusive
    if low then return n + 1 end
    return n - 1
  end
  return n
end
local function packed(row)
  local f = row[2]
  return #f == 8 and f[1] == 'first' and f[7] == 'rows'
end
local function entries(key, start, stop, count, rev, plain, shape, trimmed)
  local lo, hi = bound(start, true), bound(stop, false)
  if lo <= trimmed then lo = trimmed + 1 end
  local out, n = {}, 0
  local function take(row)
    local f = row[2]
    local batch = cjson.decode(f[8])
    local from, to, step = 1, #batch, 1
    if rev then from, to, step = #batch, 1, -1 end
    for i = from, to, step do
      if n >= count then return end
      local e = batch[i]
      local seq = tonumber(e[1])
      if seq >= lo and seq <= hi then
        n = n + 1
        out[n] = shape(e, f[4], f[6])
      end
    end
  end
  local function read(rows)
    for i = 1, #rows do
      if n >= count then return end
      if packed(rows[i]) then
        take(rows[i])
      else
        n = n + 1
        out[n] = plain(rows[i])
      end
    end
  end
  -- COUNT counts rows, and a packed row gives up to ROW_MOST publications: asking for a row
  -- per publication wanted would load up to ROW_MOST times the page into the script (a page of
  -- 2000 read 128,000 publications' text, 10 times a plain page's time, Redis blocked). So rows
  -- are asked for as many as the publications still wanted need at the rate of those read so
  -- far (ROW_MOST a row at first). Returns the last row read (nil: none).
  local function scan(from, to)
    local per, last = ROW_MOST, nil
    while n < count do
      local want, had, rows = math.ceil((count - n) / per), n, nil
      if rev then
        rows = redis.call('XREVRANGE', key, to, from, 'COUNT', want)
      else
        rows = redis.call('XRANGE', key, from, to, 'COUNT', want)
      end
      read(rows)
      if #rows > 0 then last = rows[#rows][1] end
      if #rows < want then return last end  -- the range ran out
      per = math.max(1, math.floor((n - had) / #rows))
      if rev then to = '(' .. last else from = '(' .. last end
    end
    return last
  end
  if rev then
    if hi ~= math.huge then  -- the packed row holding hi, if any, comes first
      local row = redis.call('XRANGE', key, string.format('%.0f', hi) .. '-0', '+', 'COUNT', 1)[1]
      if row and packed(row) and tonumber(string.match(row[1], '^(%d+)')) > hi
         and tonumber(row[2][2]) <= hi then
        take(row)
      end
    end
    scan(start, stop)
  else
    local last = scan(start, stop)
    if n < count and hi ~= math.huge then  -- the packed row holding hi, if any, comes last
      local after = start
      if last then after = '(' .. last end
      local row = redis.call('XRANGE', key, after, '+', 'COUNT', 1)[1]
      if row and packed(row) and tonumber(row[2][2]) <= hi then
        take(row)
      end
    end
  end
  return out, n
end
"""

READ = _ENTRIES + """
-- ARGV: start id, end id, count, 'rev' for newest first. Returns high_water, trimmed_through
-- and the entries as one JSON text (one bulk string parses far faster than 17 per entry).
local meta = redis.call('HMGET', KEYS[2], 'high_water', 'trimmed_through')
local null = cjson.null
local function plain(row) return row end
local function shape(e, source, bits)
  local f = {'source', source, 'topic', e[2], 'ptype', e[3], 'fields', e[4]}
  if e[5] ~= null then f[#f + 1] = 'permtoken'; f[#f + 1] = e[5] end
  if e[6] ~= null then f[#f + 1] = 'ts'; f[#f + 1] = e[6] end
  f[#f + 1] = 'wire'; f[#f + 1] = e[7]; f[#f + 1] = 'bits'; f[#f + 1] = bits
  return {e[1] .. '-0', f}
end
local out, n = entries(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == 'rev', plain,
                       shape, tonumber(meta[2] or '0'))
local text = '[]'
if n > 0 then
  text = cjson.encode(out)
end
return {meta[1] or '0', meta[2] or '0', text}
"""

READ_ROWS = _ENTRIES + """
-- ARGV: start id, end id, count. READ forward for a reader that relays entries (a source
-- replay): an entry in the layout APPEND writes comes as [id, source, topic, ptype, fields,
-- permtoken|null, ts|null, wire, bits] (half the strings to parse, no names to pair), any
-- other entry (a not-selected marker, one written otherwise) as READ gives it.
local meta = redis.call('HMGET', KEYS[2], 'high_water', 'trimmed_through')
local null = cjson.null
local function plain(row)
  local id, f = row[1], row[2]
  local n = #f
  if n >= 12 and f[1] == 'source' and f[3] == 'topic' and f[5] == 'ptype'
     and f[7] == 'fields' and f[n - 3] == 'wire' and f[n - 1] == 'bits' then
    if n == 12 then
      return {id, f[2], f[4], f[6], f[8], null, null, f[10], f[12]}
    elseif n == 14 and f[9] == 'permtoken' then
      return {id, f[2], f[4], f[6], f[8], f[10], null, f[12], f[14]}
    elseif n == 14 and f[9] == 'ts' then
      return {id, f[2], f[4], f[6], f[8], null, f[10], f[12], f[14]}
    elseif n == 16 and f[9] == 'permtoken' and f[11] == 'ts' then
      return {id, f[2], f[4], f[6], f[8], f[10], f[12], f[14], f[16]}
    end
  end
  return row
end
local function shape(e, source, bits)
  return {e[1] .. '-0', source, e[2], e[3], e[4], e[5], e[6], e[7], bits}
end
local out, n = entries(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), false, plain, shape,
                       tonumber(meta[2] or '0'))
if n == 0 then
  return {meta[1] or '0', meta[2] or '0', '[]'}
end
return {meta[1] or '0', meta[2] or '0', cjson.encode(out)}
"""

TRIM = """
-- ARGV: through (absolute), now. Removes every entry numbered <= through (capped at the
-- high-water; a not-selected marker covering through + 1 stays, and so does a packed row holding
-- it: readers take nothing at or below trimmed_through) and remembers it. Returns
-- trimmed_through and how many numbers it trimmed (not entries: a packed row holds many).
local meta = redis.call('HMGET', KEYS[2], 'high_water', 'trimmed_through')
local hw = tonumber(meta[1] or '0')
local done = tonumber(meta[2] or '0')
local through = tonumber(ARGV[1])
if through > hw then through = hw end
if through <= done then
  return {string.format('%.0f', done), 0}
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
redis.call('XTRIM', KEYS[1], 'MINID', '=', keep)
redis.call('HSET', KEYS[2], 'trimmed_through', text, 'trimmed_at', ARGV[2])
return {text, through - done}
"""
