-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause, which its rate shares (reserve.lua)
-- KEYS[5] rate: the rate's tat (reserve.lua)
-- KEYS[6] moved: the rate's record of a pause's move (reserve.lua)
-- KEYS[7] fleet: the rate's fleet rate (reserve.lua)
-- KEYS[8] adapt: the learned rate's state (adapt.lua)
-- KEYS[9] used: the learned rate's use (reserve.lua, adapt.lua's
--               adapt_count)
-- ARGV[1] d_us: the pause, µs from now ('lift': lift the pause)
-- ARGV[2] own: the caller's wake channel
-- ARGV[3] notice: the channel every Client of the prefix hears pauses on
--         (store.PauseChannel), '' for none
-- ARGV[4] overload: 1 the upstream refused (a 429 or 503): a learned rate
--         is cut too (adapt.lua), and d_us may be 0 (no pause)
-- ARGV[5] advertised: '' none; else "events per_ns", the rate the
--         upstream advertises (Advertise), which a learned rate takes
--         (adapt.lua); d_us may then be 0 (no pause)
local d_us = ARGV[1]
local own = ARGV[2]
local notice = ARGV[3]
local overload = ARGV[4] == '1'
local advertised = ARGV[5]

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
--
-- An overload that cuts a learned rate re-paces the times reserved at the
-- old rate, which would go too fast for the new one: each is stretched
-- from the pause's end (or now) by scale, the old rate over the new, tat
-- too, and the notice says so ("end_us tat_us moved_us xscale rate-key").

-- Cuts the learned limit of KEYS (adapt.lua; the state hash's 'adapt'
-- and 'cap', see acquire.lua) for an overload at now whose pause ends at
-- until_us, from used, the permits held then. capped: the rate is
-- advertised, so the overload was likely the calls at once': the permits
-- held less the refused call's are the upstream's, and the limit's
-- ceiling (its adv) for ADAPT_CEIL_US (adapt_ceiling). Probing past them
-- only draws 429s, one a probe (every 13s), each a fleet-wide pause: the
-- advertised bench's only 429s.
local function cut_learned_limit(keys, state, now, until_us, used, capped)
  local s = adapt_parse(state)
  if not s or not adapt_down(s, now, until_us, used) then return end
  if capped and used and used > 1 then s.adv = max(s.min, used - 1) end
  local cut = fmt(adapt_events(s))
  redis.call('HSET', keys[2], 'cap', cut, 'limit', cut, 'adapt', adapt_string(s))
end

-- Cuts the learned rate of KEYS (adapt.lua) for an overload at now whose
-- pause ends at until_us; returns the old rate over the new (1: no cut).
-- With no reservation waiting (tat, the next free time, not ahead) the
-- rate had room: something else bound (the calls at once), and it is
-- cut from its use, the events reserved in the last second, in its unit
-- (untested, it stayed at 1.3-1.6 times the upstream's after the bench's
-- halving, cut by 0.85 an episode). While they wait it is all used, and
-- cut from itself (the last second's count lags a rate that grew).
local function cut_learned(keys, now, until_us, tat)
  local st = redis.call('MGET', keys[7], keys[8], keys[9])
  local s = st[1] and adapt_parse(st[2])
  local events, per, burst = string.match(st[1] or '', '^(%d+) (%d+) (%d+)$')
  local used = (not tat or tat <= now) and adapt_used(st[3], now)
  if used and per then used = used * per / 1e9 end
  if not s or not adapt_down(s, now, until_us, used) then return 1 end
  local cut = adapt_events(s)
  redis.call('SET', keys[8], adapt_string(s), 'PX', ADAPT_KEEP_MS)
  redis.call('SET', keys[7], fmt(cut) .. ' ' .. per .. ' ' .. burst, 'PX', ADAPT_KEEP_MS)
  return max(events / cut, 1)
end

-- Sets the learned rate of KEYS (adapt.lua) at now to the one the
-- upstream advertises, adv_events per adv_ns; returns the old rate over
-- the new (1: unchanged; below 1: a rise).
local function advertise_learned(keys, now, adv_events, adv_ns)
  local st = redis.call('MGET', keys[7], keys[8])
  local s = st[1] and adapt_parse(st[2])
  if not s then return 1 end
  local events, per_ns, burst = string.match(st[1], '^(%d+) (%d+) (%d+)$')
  local adv = adv_events * per_ns / adv_ns
  if math.abs(adv - s.adv) > 1e-5 * adv then
    -- Another quota: the plan changed, the calls at once may have too.
    -- The learned limit's ceiling (cut_learned_limit) goes.
    local ls = adapt_parse(redis.call('HGET', keys[2], 'adapt'))
    if ls and ls.adv > 0 then
      ls.adv = 0
      redis.call('HSET', keys[2], 'adapt', adapt_string(ls))
    end
  end
  if not adapt_advertise(s, now, adv) then
    redis.call('SET', keys[8], adapt_string(s), 'PX', ADAPT_KEEP_MS)
    return 1
  end
  local now_events = adapt_events(s)
  redis.call('SET', keys[8], adapt_string(s), 'PX', ADAPT_KEEP_MS)
  redis.call('SET', keys[7], fmt(now_events) .. ' ' .. per_ns .. ' ' .. burst, 'PX', ADAPT_KEEP_MS)
  return events / now_events
end

-- Draws in from now by scale (below 1) the times reserved at the rate
-- before an advertised rise, as reserve.lua does for a learned rise: tat,
-- and every Client's reservations by the notice "now tat 0 xscale key",
-- which moves those whose Next is at most tat and whose reply said the
-- rate moved before now (adapt_advertise set t_move to now). Callers that
-- reserved at a cold start's 5/s before the first answer otherwise kept
-- their times: 6-9s to the advertised rate in the bench. Not while paused:
-- the times are the pause's, and its end is not the rise's time.
local function draw_in(keys, now, tat, scale)
  local to = ceil(now + (tat - now) * scale)
  redis.call('SET', keys[5], fmt(to), 'PX', ceil((to - now + RATE_KEEP_US) / 1000))
  redis.call('DEL', keys[6])
  if notice ~= '' then
    redis.call('PUBLISH', notice, fmt(now) .. ' ' .. fmt(tat) .. ' 0 x' .. format('%.17g', scale) .. ' ' .. keys[5])
  end
end

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
if d_us + 0 > 0 and until_us > was then
  redis.call('SET', KEYS[4], fmt(until_us))
  redis.call('PEXPIREAT', KEYS[4], fmt(ceil(until_us / 1000) + 86400000))
end
local moved = until_us - max(now, was)
-- An overload heard while the name is paused is of the episode that
-- paused it (nothing was sent since): it cuts nothing more. It cuts both
-- learned values, each from its use (adapt.lua): the limit from the
-- permits held, the rate from itself. Which of the upstream's limits
-- refused cannot be told from which of ours was all used (where the
-- calls take C/R, both are; an unpaced burst draws a rate's 429 under a
-- rate that had room), and a value left uncut grows where it was never
-- tested: the bench's halving left a learned rate at 1.6 times the
-- upstream's when only what was all used was cut, and blaming what
-- probed (past its plateau) ran the rate to 1.5-4 times it.
local scale = 1
local tat = tonum(redis.call('GET', KEYS[5]) or '')
if advertised ~= '' then
  -- A lower rate re-paces what was reserved at the old one, as a cut.
  local e, p = string.match(advertised, '^(%d+) (%d+)$')
  scale = advertise_learned(KEYS, now, e + 0, p + 0)
  if scale < 1 then
    if tat and tat > now and was <= now then draw_in(KEYS, now, tat, scale) end
    scale = 1
  end
end
--
-- A rate the upstream advertises (adapt.lua's adv) is its quota's: the
-- overload is then the calls at once', and only the limit is cut (a
-- spent quota is answered by the pause until its reset: httplimit).
if overload and was <= now then
  local st = redis.call('HMGET', KEYS[2], 'adapt', 'total')
  local rs = adapt_parse(redis.call('GET', KEYS[8]))
  if not (rs and rs.adv > 0) then scale = cut_learned(KEYS, now, until_us, tat) end
  cut_learned_limit(KEYS, st[1], now, until_us, tonum(st[2]), rs and rs.adv > 0)
end
if moved > 0 or scale > 1 then
  if tat and tat > now then
    local to = tat + moved
    if scale > 1 and to > until_us then to = ceil(until_us + (to - until_us) * scale) end
    local px = fmt(ceil((to - now + RATE_KEEP_US) / 1000))
    local before, at = fmt(tat), fmt(now)
    local rec = redis.call('GET', KEYS[6])
    if rec then
      local b, a, t = string.match(rec, '^(%d+) (%d+) (%d+)$')
      if a and tonum(a) == tat then before, at = b, t end
    end
    redis.call('SET', KEYS[5], fmt(to), 'PX', px)
    if scale > 1 then
      -- Re-paced: what is still to come the next reservation cannot tell
      -- by the new rate, so the move is not to be undone.
      redis.call('DEL', KEYS[6])
    else
      redis.call('SET', KEYS[6], before .. ' ' .. fmt(to) .. ' ' .. at, 'PX', px)
    end
    if notice ~= '' then
      local how = ' '
      if scale > 1 then how = ' x' .. format('%.17g', scale) .. ' ' end
      redis.call('PUBLISH', notice, fmt(until_us) .. ' ' .. fmt(tat) .. ' ' .. fmt(moved) .. how .. KEYS[5])
    end
  end
end
return {fmt(until_us - now)}
