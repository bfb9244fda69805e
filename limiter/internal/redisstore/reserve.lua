-- KEYS[1] rate: STRING tat: µs (server clock), GCRA's theoretical arrival
--               time; past it the burst is whole again, and the key
--               expires RATE_KEEP_US later (see there)
-- KEYS[2] pause: STRING µs until which the name grants nothing (pause.lua;
--               it outlives the pause, whose end still paces the rate)
-- KEYS[3] fleet: STRING "events per_ns burst": the rate SetRate stored
-- KEYS[4] moved: STRING "tat_before tat_after now_us": a pause moved tat
--               (pause.lua); the next reservation undoes the move when it
--               was not needed, and deletes it
-- ARGV[1] asked_interval_us: the asking rate's emission interval T (per /
--         events, in µs, as a decimal that Go and Lua compute alike)
-- ARGV[2] asked_burst: the asking rate's burst (a fleet rate overrides
--         both)
-- ARGV[3] n: the event's cost
-- ARGV[4] max_wait_us: the longest wait to reserve (-1: no bound)
-- KEYS[5] adapt: STRING the learned rate's state (adapt.lua), 'pin' when
--               an operator set the fleet rate since; absent: not learned
--               (with a fleet rate: one set before any learning, pinned)
-- KEYS[6] sem: HASH the state of the semaphore of the same name (see
--               common.lua; read: 'total', 'cap')
-- KEYS[7] used: STRING "window_us count prev": the events a learned rate
--               reserved in the last two seconds (adapt.lua's adapt_count)
-- ARGV[5] careful: 1 a name with no state takes its burst as spent
--         until the server is surely older than a burst (see below)
-- ARGV[6] learn: '' the asking rate is fixed; else "min start max per_ns"
--         (events per per_ns): it is learned, and starts so when no
--         learned or pinned rate is stored
-- ARGV[7] notice: the channel every Client of the prefix hears pauses on
--         (store.PauseChannel), where a learned rate's rise re-paces
--         the times reserved before it ('' for none)
local asked_interval_us = ARGV[1]
local asked_burst = ARGV[2]
local n = ARGV[3] + 0
local max_wait_us = ARGV[4]
local careful = ARGV[5] == '1'
local learn = ARGV[6]
local notice = ARGV[7]

-- Returns {1, wait_us, prev, next} when reserved: the event goes wait_us
-- from now, and unreserve.lua gives it back while tat is still next (1,
-- not a table, when it goes now: nothing is left to give back, and a
-- table costs the common path more than the rest of its reply), and for
-- a learned rate a fifth, t_move (adapt.lua: when it last moved, µs),
-- by which a rise's notice tells the reservations made before it;
-- {0, wait_us, paused (1/0)} when it would wait longer than max_wait_us
-- (nothing is reserved); {-1, burst} when n is above the burst.
--
-- GCRA: each event of cost n moves tat on by n emission intervals
-- (T = per / events), and may go once tat - burst * T is not in the
-- future. Reserving moves tat at once, so callers are given their times
-- in the order they reached Redis, paced exactly, with one call each.
-- Three commands (MGET, TIME, SET; a DEL after a pause): every key is a
-- string. A learned rate's adds the SET of its use (KEYS[7]); one that
-- grows, an HMGET of the semaphore's state (KEYS[6]) and the rise's
-- writes.
local st = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7])
local now = now_us()
-- A learned rate: its state, started by the first learning Client, and
-- the fleet rate it applies. A fleet rate stored without a state was set
-- by an operator (SetRate): pinned, as after a learning.
local learned
if learn ~= '' and st[5] ~= 'pin' and (st[5] or not st[3]) then
  local lo, start, hi, per_ns = string.match(learn, '^(%d+) (%d+) (%d+) (%d+)$')
  learned = adapt_parse(st[5])
  if not learned then
    learned = {min = lo + 0, max = hi + 0, r = start + 0, wmax = 0, t_over = 0, t_move = now, hold = 0}
    st[5] = adapt_string(learned)
    redis.call('SET', KEYS[5], st[5], 'PX', ADAPT_KEEP_MS)
  end
  if not st[3] then
    st[3] = fmt(adapt_events(learned)) .. ' ' .. per_ns .. ' ' .. asked_burst
    redis.call('SET', KEYS[3], st[3], 'PX', ADAPT_KEEP_MS)
  end
end
local T, burst -- T: the emission interval, µs
if st[3] then
  local e, p, b = string.match(st[3], '^(%d+) (%d+) (%d+)$')
  T, burst = p / 1000 / e, b + 0
  if st[5] and st[5] ~= 'pin' then
    -- A learned rate is no faster than the asking rate, its bound (a
    -- Client whose code lowered it, or that does not learn), and keeps
    -- the asker's burst.
    T, burst = max(T, asked_interval_us + 0), asked_burst + 0
  end
else
  T, burst = asked_interval_us + 0, asked_burst + 0
end
if n > burst then return {-1, burst} end
local tat = num(st[1])
if st[4] and tat then
  -- A pause moved tat on with the events reserved before it. If none was
  -- still to come (the latest, at tat - burst * T, had gone when it was
  -- set), nothing held moved, and the move would only delay the first
  -- event after the pause: take tat back (unless reservations came since).
  local before, after, at = string.match(st[4], '^(%d+) (%d+) (%d+)$')
  if after and tat == after + 0 and before - burst * T <= at + 0 then tat = before + 0 end
end
if not tat and careful then
  -- No state: a name never used, used long ago, or forgotten by a restart.
  -- Events before the start can have moved tat to at most the start plus
  -- a burst: until then, take it that they did.
  local start = started_by(burst * T, KEYS[1])
  if start then tat = start + burst * T end
end
tat = max(tat or now, now)
-- A pause leaves the burst empty at its end: the first event goes then,
-- the others paced after it (an API that answered 429 is not sent a burst
-- the moment it said to come back), also after the end, until the burst
-- has refilled. Times are rounded up: a rate may run slow by a µs an
-- event, never fast.
local paused = num(st[2]) or 0
tat = ceil(max(tat, paused + (burst - 1) * T))
local wait = max(tat + (n - burst) * T - now, 0)
local max_wait = max_wait_us + 0
if max_wait >= 0 and wait > max_wait then
  return {0, ceil(wait), paused > now and 1 or 0}
end
local nxt = ceil(tat + n * T)
-- Whether the semaphore of the name has its fleet limit all used: the
-- calls at once bind, and the rate is not what waits on the upstream.
-- Its callers reserve the rate, then wait for a permit, then renew a late
-- slot: their reservations wait by chance, not because the rate binds
-- (the bench's learned rate climbed to 1.5 times the upstream's while its
-- learned limit held the fleet at the upstream's calls at once).
local function limit_binds()
  local h = redis.call('HMGET', KEYS[6], 'total', 'cap')
  return h[2] and (tonum(h[1]) or 0) >= h[2] + 0
end
-- An event that waits says the rate is all used: a learned rate grows
-- (not for a pause's wait, nor while the limit binds), for the
-- reservations after this one.
local grew = false
if learned and wait > 0 and paused <= now then
  local r, t_move = learned.r, learned.t_move
  grew = adapt_up(learned, now, n)
  if grew and limit_binds() then learned.r, learned.t_move, grew = r, t_move, false end
end
if grew then
  local per_burst = string.match(st[3], '^%d+( %d+ %d+)$')
  local events = adapt_events(learned)
  redis.call('SET', KEYS[3], fmt(events) .. per_burst, 'PX', ADAPT_KEEP_MS)
  redis.call('SET', KEYS[5], adapt_string(learned), 'PX', ADAPT_KEEP_MS)
  -- The times reserved at the old rate would keep its pace: 32 callers
  -- reserved at a start of 2/s went 500ms apart for 16s while the rate
  -- grew past 36/s (the adaptive bench). They are re-paced from now at
  -- the new one, as a cut stretches them (pause.lua): tat here, and every
  -- Client's reservations by the notice "now tat 0 xscale key" (scale
  -- below 1), which moves those whose Next is at most tat and whose reply
  -- said the rate moved before now (the reservations made after this one
  -- said now or later). This one is re-paced here.
  local scale = max(string.match(per_burst, '^ (%d+)') / 1000 / events, asked_interval_us + 0) / T
  if notice ~= '' and scale < 1 then
    redis.call('PUBLISH', notice, fmt(now) .. ' ' .. fmt(nxt) .. ' 0 x' .. format('%.17g', scale) .. ' ' .. KEYS[1])
    local at = ceil(now + wait * scale)
    tat, nxt = ceil(now + (tat - now) * scale), ceil(now + (nxt - now) * scale)
    wait = at - now
  end
end
-- fmt, not a number to redis.call: Redis 7.2.0-7.2.4 wrote those in
-- exponent form, which unreserve.lua's compare would not match.
local nxt_s = fmt(nxt)
redis.call('SET', KEYS[1], nxt_s, 'PX', ceil((nxt - now + RATE_KEEP_US) / 1000))
if st[4] then redis.call('DEL', KEYS[4]) end
-- A learned rate's use: what the fleet sends when something else binds
-- (the calls at once), which an overload cuts the rate from (pause.lua).
-- AllowN's events (max_wait 0) are not counted: a late reservation's
-- Renew asks again for the event it counted.
if learned and max_wait ~= 0 then redis.call('SET', KEYS[7], adapt_count(st[6], now, n), 'PX', 2000) end
if wait == 0 then return 1 end
if learned then return {1, ceil(wait), fmt(tat), nxt_s, fmt(learned.t_move)} end
return {1, ceil(wait), fmt(tat), nxt_s}
