-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] max_n: how many waiters to list at most
-- ARGV[2] wait: list up to this wait id, whatever max_n ('' = none)
-- ARGV[3] quarantine_ms: the restart quarantine of a new request, and of
--         a waiter whose record has none (the previous version's) (0:
--         none)
local max_n = tonumber(ARGV[1])
local wait = ARGV[2]
local quarantine_ms = ARGV[3]

-- Read-only: what the Inspector needs to say why each waiter waits and
-- when it should be granted, read in one call so that the holders, the
-- queue and the pause are of one instant. Returns {now (µs, string),
-- pause end (µs, '' when none or past), quarantine left (ms) for a new
-- request, fleet limit ('' when none), limit of the last grant (''),
-- holder count n, then n times {weight, token (string), ms until it
-- expires}, then per live waiter in queue order {wait id, weight, ms
-- until its entry expires, its own limit, its own quarantine left
-- (ms)}}. The holders are not swept: an expired lease is left out, as an
-- acquire's sweep would drop it.
local now = now_us()
local now_ms = floor(now / 1000)
local st = redis.call('HMGET', KEYS[2], 'token', 'cap', 'limit')
local pause = redis.call('GET', KEYS[4])
if pause and pause + 0 <= now then pause = nil end

-- When the server started, as acquire.lua's quarantine_left judges it,
-- without the marker it writes (this script writes nothing); false when
-- not known. Asked once, and only of a name with no token: only such a
-- name is held by a quarantine.
local start
local function started()
  if start ~= nil then return start end
  start = false
  local info = redis.pcall('INFO', 'server')
  local up = type(info) == 'string' and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
  if not up then return start end
  local t = tonumber(string.match(info, 'server_time_usec:(%d+)'))
  start = ((t and floor(t / 1000000) or floor(now / 1000000)) - up + 1) * 1000000
  local run = string.match(info, 'run_id:(%x+)')
  local m = run and redis.call('GET', string.match(KEYS[1], '^[^}]*}') .. ':seen')
  local mrun, seen
  if m then mrun, seen = string.match(m, '^(%x+) (%d+)$') end
  if mrun == run and seen then start = min(start, seen + 0) else start = min(start, now) end
  return start
end

-- The ms left of a restart quarantine of q ms (a string): each waiter is
-- held by its own Client's, which its record keeps.
local function quarantine(q)
  if st[1] then return 0 end -- the common case: no number to parse
  q = tonumber(q or quarantine_ms)
  if q <= 0 or not started() then return 0 end
  return max(ceil((start + q * 1000 - now) / 1000), 0)
end

local out = {clock_string(), pause or '', quarantine(), st[2] or '', st[3] or '', 0}
local leases = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. fmt(now_ms), '+inf', 'WITHSCORES')
local ids, fields = {}, {}
for i = 1, #leases, 2 do
  if leases[i] ~= '' then
    ids[#ids + 1] = leases[i + 1]
    fields[#fields + 1] = ':' .. leases[i]
  end
end
if #fields > 0 then
  local recs = redis.call('HMGET', KEYS[2], unpack(fields))
  for i = 1, #fields do
    if recs[i] then
      local w, tok = parse(recs[i])
      out[#out + 1] = w
      out[#out + 1] = tok
      out[#out + 1] = ids[i] - now_ms
      out[6] = out[6] + 1
    end
  end
end

-- The queue in pages, so that a waiter far down is found without one
-- HMGET of every field at once (unpack is bounded by Lua's C stack).
local PAGE = 1000
local from, listed = 0, 0
while listed < max_n or wait ~= '' do
  local page = redis.call('ZRANGE', KEYS[3], fmt(from), fmt(from + PAGE - 1))
  if #page == 0 then break end
  from = from + PAGE
  local wf = {}
  for i = 1, #page do wf[i] = '?' .. page[i] end
  local vals = redis.call('HMGET', KEYS[2], unpack(wf))
  for i = 1, #page do
    local w, exp, _, _, limit, q
    if vals[i] then w, exp, _, _, limit, _, q = parse_waiter(vals[i]) end
    if exp and exp > now_ms then
      out[#out + 1] = page[i]
      out[#out + 1] = w
      out[#out + 1] = exp - now_ms
      out[#out + 1] = limit + 0
      out[#out + 1] = quarantine(q)
      listed = listed + 1
      if page[i] == wait then return out end
      if listed >= max_n and wait == '' then return out end
    end
  end
end
return out
