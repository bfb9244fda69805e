-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause, which its rate shares (reserve.lua)
-- KEYS[5] rate: the rate's tat (reserve.lua)
-- KEYS[6] moved: the rate's record of a pause's move (reserve.lua)
-- ARGV[1] d_us: the pause, µs from now ('lift': lift the pause)
-- ARGV[2] own: the caller's wake channel
-- ARGV[3] notice: the channel every Client of the prefix hears pauses on
--         (store.PauseChannel), '' for none
local d_us = ARGV[1]
local own = ARGV[2]
local notice = ARGV[3]

-- Pauses the name until d_us from now on the server's clock, unless it
-- is paused longer already (two 429s never shorten each other's pause).
-- The key outlives the pause by a day (its end still paces the rate until
-- the burst refills: reserve.lua). Lifting it wakes the waiters that fit:
-- they slept until its end. Returns {µs left of the pause, own waiters
-- woken...}.
--
-- Events reserved before the pause were told times that may fall inside
-- it. Its rate's schedule is moved on by what the pause added (moved_us:
-- its end less the later of now and the end of the pause it extends), tat
-- and every time reserved alike: the events keep their order and their
-- pace, the first of them goes at the pause's end, and those reserved
-- from now on come after them. The reservations' Clients move theirs when
-- they hear the notice "end_us tat_us moved_us rate-key" (published only
-- when a reservation may be held: tat in the future): a reservation
-- whose next (its tat) is at most tat_us was made before this pause
-- (reserve.lua's tat after it is above tat_us + moved_us), and moves by
-- moved_us, which keeps its Cancel (unreserve.lua's compare) valid.
-- When no reserved event was still to come, tat need not have moved
-- (the burst was spent by events already gone): pause.lua cannot tell,
-- not knowing the burst, so it records "tat before, tat after, now" in
-- KEYS[6], and the next reservation, which knows it, takes tat back
-- (reserve.lua). A pause that extends one whose move no reservation
-- followed keeps that record's tat before and now.
if d_us == 'lift' then
  redis.call('DEL', KEYS[4])
  local st = redis.call('HMGET', KEYS[2], 'total', 'limit')
  local limit = tonum(st[2]) or math.huge
  local reply = {0}
  for _, v in ipairs(pass_on(KEYS, nil, limit - (tonum(st[1]) or 0), own, limit)) do reply[#reply + 1] = v end
  return reply
end
local now = now_us()
local was = tonum(redis.call('GET', KEYS[4]) or '0')
local until_us = max(now + tonum(d_us), was)
redis.call('SET', KEYS[4], fmt(until_us))
redis.call('PEXPIREAT', KEYS[4], fmt(ceil(until_us / 1000) + 86400000))
local moved = until_us - max(now, was)
if moved > 0 then
  local tat = tonum(redis.call('GET', KEYS[5]) or '')
  if tat and tat > now then
    local to = tat + moved
    local px = fmt(ceil((to - now + RATE_KEEP_US) / 1000))
    local before, at = fmt(tat), fmt(now)
    local rec = redis.call('GET', KEYS[6])
    if rec then
      local b, a, t = string.match(rec, '^(%d+) (%d+) (%d+)$')
      if a and tonum(a) == tat then before, at = b, t end
    end
    redis.call('SET', KEYS[5], fmt(to), 'PX', px)
    redis.call('SET', KEYS[6], before .. ' ' .. fmt(to) .. ' ' .. at, 'PX', px)
    if notice ~= '' then
      redis.call('PUBLISH', notice, fmt(until_us) .. ' ' .. fmt(tat) .. ' ' .. fmt(moved) .. ' ' .. KEYS[5])
    end
  end
end
return {fmt(until_us - now)}
