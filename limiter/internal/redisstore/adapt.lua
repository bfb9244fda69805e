-- The control law of a learned rate and a learned limit
-- (docs/adaptive.md): the one place that moves them, called by
-- reserve.lua and acquire.lua (up) and pause.lua (down).
--
-- A learned rate is two keys of the name: the fleet rate (STRING "events
-- per_ns burst", which every reservation applies, as SetRate's) and its
-- state, a STRING "min max r wmax t_over t_move hold [adv]" (events per
-- per_ns; µs on the server's clock); a learned limit is the semaphore's
-- 'cap' and the same state in its hash's 'adapt' (permits):
--   min, max: the bounds the first learning Client gave;
--   r: the value learned, a fraction (the applied one is its floor, at
--      least min);
--   wmax: the plateau of the last overload (0: none yet, the slow start);
--   t_over: that overload's time; t_move: when r last moved;
--   hold: nothing moves r before it (the overload's episode);
--   adv: r's ceiling; absent, nil or 0: none (the states the scripts
--      start have none). A rate's: the rate the upstream advertises (its
--      RateLimit headers). A limit's: the permits an overload under an
--      advertised rate found held, less one (pause.lua), in force for
--      ADAPT_CEIL_US after the last overload (adapt_ceiling).
-- 'pin' instead: an operator set the value (setrate.lua, setlimit.lua);
-- nothing moves it.
--
-- The law is CUBIC's (RFC 9438), on values shared by the fleet. The slow
-- start doubles r per second of calls while it is all used (reservations
-- wait, while the name's fleet limit is not all used: reserve.lua;
-- acquires find every permit taken); a rise of the rate re-paces the
-- times already reserved (reserve.lua). An overload (a 429 or 503,
-- Overload) cuts both values (pause.lua: which of the upstream's limits
-- refused cannot be told), each from its use (adapt_down: the limit's
-- permits held; the rate's events reserved in the last second when it
-- had room, adapt_count). The slow start's first cuts r to
-- ADAPT_SLOW_CUT and sets wmax to ADAPT_SLOW_BELOW of it; a later one
-- cuts r to ADAPT_CUT of itself and sets wmax just below the r that
-- overloaded (ADAPT_BELOW: the plateau is then a value the upstream
-- took, where CUBIC's sits on the one it refused), or lower when it came
-- below the last wmax (CUBIC's fast convergence: a limit that shrank). A
-- cut holds r for the Retry-After, at least ADAPT_HOLD_US: the other
-- refusals of the same episode, from any process, cut nothing more.
-- Then, while all used, r grows as wmax * (1 + (1 - ADAPT_CUT) * x^3),
-- x = (t - t_over - ADAPT_K_US) / ADAPT_K_US below the plateau, 0 for
-- ADAPT_FLAT_US, then on ADAPT_UP_US past it: back near wmax in
-- ADAPT_K_US, flat there, and fast past it, which finds a limit that has
-- grown (a doubling in about ADAPT_K_US + ADAPT_FLAT_US + 1.9
-- ADAPT_UP_US; a probe every ADAPT_K_US + ADAPT_FLAT_US + 0.7
-- ADAPT_UP_US); and by at least ADAPT_RENO a second
-- (CUBIC's Reno-friendly region: an integer limit's plateau floors a
-- whole permit low). Each overload costs the fleet its Retry-After's
-- pause, so the plateau is long.
--
-- An upstream that advertises its quota (a limit per window: Advertise)
-- says where the probing would end: r is set to it at once, within the
-- bounds, and grows no further while it stands; a 429 does not cut it
-- (pause.lua cuts the limit instead: the headers speak for the rate, and
-- a quota spent, by this fleet or others sharing it, pauses until its
-- reset), and its overload's permits held, less the refused call's,
-- ceil the learned limit (its adv) for ADAPT_CEIL_US after the overload,
-- or until the quota changes (pause.lua). Any overload sets it, so it
-- must lapse: 429s that are not the calls at once' (other tenants
-- spending the quota, the latency signal's) would otherwise lower it a
-- permit each, and nothing raised it. A stable upstream then costs a 429
-- per ADAPT_CEIL_US at most, where the curve's probe cost one per 13s.
-- A new advertisement replaces the last, up or down; clearing
-- the learned state (SetRate's zero) forgets it.

-- A learned rate's keys live ADAPT_KEEP_MS after its last move (a name
-- used by key, per customer or host, would keep them forever): a state
-- left unmoved for a day starts again from its start.
local ADAPT_KEEP_MS = 86400000
local ADAPT_CUT = 0.85
local ADAPT_BELOW = 0.95 -- the plateau, under the rate that overloaded
local ADAPT_SLOW_CUT = 0.7
local ADAPT_SLOW_BELOW = 0.95 -- the slow start's plateau, under the rate that overloaded
local ADAPT_K_US = 3000000 -- back to the plateau after a cut
local ADAPT_FLAT_US = 8000000 -- on the plateau, before probing past it
local ADAPT_UP_US = 1500000 -- the curve's scale past the plateau
local ADAPT_HOLD_US = 1000000
local ADAPT_RENO = 0.1 -- the least growth a second while all used, after an overload
local ADAPT_CEIL_US = 30000000 -- a learned limit's ceiling's life, from its overload

-- The state of v (a table), or nil for none or a pin.
local function adapt_parse(v)
  if not v or v == 'pin' then return nil end
  local lo, hi, r, wmax, t_over, t_move, hold, adv = string.match(v, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) ?(%S*)$')
  if not lo then return nil end
  return {min = lo + 0, max = hi + 0, r = r + 0, wmax = wmax + 0, t_over = t_over + 0, t_move = t_move + 0, hold = hold + 0,
    adv = tonum(adv) or 0}
end

local function adapt_string(s)
  local v = fmt(s.min) .. ' ' .. fmt(s.max) .. ' ' .. format('%.3f %.3f', s.r, s.wmax) .. ' ' ..
    fmt(s.t_over) .. ' ' .. fmt(s.t_move) .. ' ' .. fmt(s.hold)
  if (s.adv or 0) > 0 then v = v .. ' ' .. format('%.6g', s.adv) end
  return v
end

-- The events per per_ns that the fleet rate applies for s.
local function adapt_events(s)
  return max(s.min, floor(s.r))
end

-- Drops from s, a learned limit's state, its ceiling (adv) at now when
-- it has lapsed: the limit may then probe past it.
local function adapt_ceiling(s, now)
  if (s.adv or 0) > 0 and now - s.t_over >= ADAPT_CEIL_US then s.adv = 0 end
end

-- Moves s up for a reservation of n events that waited at now (the rate
-- is all used); returns whether the events applied changed.
--
-- Each event grows r by n at most, and r at most doubles a second: the
-- growth is clocked by the events the fleet makes, as TCP's window is by
-- its ACKs, since the events already reserved at the old rate go at its
-- pace (the clock alone ran r up to 40 times what the upstream took while
-- those drained), and bounded by the clock, since callers arriving at once
-- are events that have not gone yet.
local function adapt_up(s, now, n)
  if now < s.hold then return false end
  local r = min(s.r + n, s.r * 2 ^ (min(now - s.t_move, 1000000) / 1000000))
  if s.wmax > 0 then
    local x = (now - s.t_over - ADAPT_K_US) / ADAPT_K_US
    if x > 0 then x = max(now - s.t_over - ADAPT_K_US - ADAPT_FLAT_US, 0) / ADAPT_UP_US end
    local reno = s.r + ADAPT_RENO * (now - s.t_move) / 1000000
    r = min(r, max(s.wmax * (1 + (1 - ADAPT_CUT) * x * x * x), reno))
  end
  if (s.adv or 0) > 0 then r = min(r, s.adv) end
  r = min(max(r, s.r), s.max)
  if floor(r) == floor(s.r) then return false end
  s.r, s.t_move = r, now
  return true
end

-- Cuts s for an overload at now, unless it is held; until_us: the end of
-- the pause it asked for; used: what was in use when it was told (the
-- limit's permits held, the refused call's among them), nil or 0 when not
-- measured (the rate's). Returns whether it cut.
--
-- The cut is taken from the lower of r and used: a limit that was not
-- all used when the upstream refused is above what the upstream took, so
-- its cut starts from the use, as TCP's window is cut from the flight
-- size. A measured use also replaces the slow start's guess
-- (ADAPT_SLOW_BELOW r: the rate grew for the 429's delay): the calls at
-- once are counted at once, so the plateau is just below the use.
local function adapt_down(s, now, until_us, used)
  if now < s.hold then return false end
  local r, cut = s.r, ADAPT_CUT
  local measured = used and used > 0
  if measured then r = min(r, used) end
  if s.wmax == 0 and not measured then
    s.wmax, cut = ADAPT_SLOW_BELOW * r, ADAPT_SLOW_CUT
  elseif s.wmax == 0 then
    s.wmax, cut = ADAPT_BELOW * r, ADAPT_SLOW_CUT
  elseif r < s.wmax then
    s.wmax = r * (1 + ADAPT_CUT) / 2
  else
    s.wmax = ADAPT_BELOW * r
  end
  s.r = max(s.min, r * cut)
  s.t_over, s.t_move = now, now
  s.hold = max(until_us, now + ADAPT_HOLD_US)
  return true
end

-- Sets s at now to adv, the rate the upstream advertises, within the
-- bounds (see above); returns whether the events applied changed.
local function adapt_advertise(s, now, adv)
  local was = adapt_events(s)
  s.adv, s.r, s.t_move = adv, min(max(adv, s.min), s.max), now
  return adapt_events(s) ~= was
end

-- The use of a learned rate: v (a STRING "window_us count prev", or nil)
-- counted n more events reserved at now: the events of the second from
-- window_us, and of the one before.
local function adapt_count(v, now, n)
  local w, c, p = string.match(v or '', '^(%d+) (%d+) (%d+)$')
  w, c, p = tonum(w), tonum(c), tonum(p)
  if not w or now - w >= 2000000 then
    w, c, p = now, 0, 0
  elseif now - w >= 1000000 then
    w, c, p = w + 1000000, 0, c
  end
  return fmt(w) .. ' ' .. fmt(c + n) .. ' ' .. fmt(p)
end

-- The events v (adapt_count's) counted in the second before now, the
-- second before its window weighted by its part in that second; nil
-- when v covers less than a second (not measured).
local function adapt_used(v, now)
  local w, c, p = string.match(v or '', '^(%d+) (%d+) (%d+)$')
  w, c, p = tonum(w), tonum(c), tonum(p)
  if not w or (p == 0 and now - w < 1000000) then return nil end
  local age = now - w
  if age >= 2000000 then return nil end
  if age >= 1000000 then return c * (2 - age / 1000000) end
  return c + p * (1 - age / 1000000)
end
