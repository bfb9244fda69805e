-- The learned rate's control law (docs/adaptive.md): the one place that
-- moves a learned rate, called by reserve.lua (up) and pause.lua (down).
--
-- A learned rate is two keys of the name: the fleet rate (STRING "events
-- per_ns burst", which every reservation applies, as SetRate's) and its
-- state, a STRING "min max r wmax t_over t_move hold" (events per per_ns;
-- µs on the server's clock):
--   min, max: the bounds the first learning Client gave;
--   r: the rate learned, a fraction (the fleet rate is its floor, at
--      least min);
--   wmax: r at the last overload (0: none yet, the slow start);
--   t_over: that overload's time; t_move: when r last moved;
--   hold: nothing moves r before it (the overload's episode).
-- 'pin' instead: an operator set the fleet rate (setrate.lua); nothing
-- moves it.
--
-- The law is CUBIC's (RFC 9438), on a rate shared by the fleet. The slow
-- start doubles r per second while reservations wait (the rate is all
-- used). An overload (a 429 or 503, Overload) cuts r to ADAPT_CUT of
-- itself and holds it for the Retry-After, at least ADAPT_HOLD_US: the
-- other refusals of the same episode, from any process, cut nothing more.
-- Then, while the rate is all used, r grows as wmax * (1 + (1 - ADAPT_CUT)
-- * x^3), x = (t - t_over - ADAPT_K_US) / ADAPT_K_US: back near wmax in
-- ADAPT_K_US, flat there (where the last overload was), and faster past
-- it, which finds a limit that has grown. A cut below the last wmax lowers
-- wmax too (CUBIC's fast convergence: a limit that shrank).

local ADAPT_CUT = 0.8
local ADAPT_K_US = 5000000
local ADAPT_HOLD_US = 1000000

-- The state of v (a table), or nil for none or a pin.
local function adapt_parse(v)
  if not v or v == 'pin' then return nil end
  local lo, hi, r, wmax, t_over, t_move, hold = string.match(v, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  if not lo then return nil end
  return {min = lo + 0, max = hi + 0, r = r + 0, wmax = wmax + 0, t_over = t_over + 0, t_move = t_move + 0, hold = hold + 0}
end

local function adapt_string(s)
  return fmt(s.min) .. ' ' .. fmt(s.max) .. ' ' .. format('%.3f %.3f', s.r, s.wmax) .. ' ' ..
    fmt(s.t_over) .. ' ' .. fmt(s.t_move) .. ' ' .. fmt(s.hold)
end

-- The events per per_ns that the fleet rate applies for s.
local function adapt_events(s)
  return max(s.min, floor(s.r))
end

-- Moves s up for a reservation that waited at now (the rate is all used);
-- returns whether the events applied changed.
local function adapt_up(s, now)
  if now < s.hold then return false end
  local r
  if s.wmax == 0 then
    r = s.r * 2 ^ (min(now - s.t_move, 1000000) / 1000000)
  else
    local x = (now - s.t_over - ADAPT_K_US) / ADAPT_K_US
    r = s.wmax * (1 + (1 - ADAPT_CUT) * x * x * x)
  end
  -- Never down here, and at most doubled at once (a rate idle for long
  -- has not shown that the upstream takes more).
  r = min(max(r, s.r), 2 * s.r, s.max)
  if floor(r) == floor(s.r) then return false end
  s.r, s.t_move = r, now
  return true
end

-- Cuts s for an overload at now, unless it is held; until_us: the end of
-- the pause it asked for. Returns whether it cut.
local function adapt_down(s, now, until_us)
  if now < s.hold then return false end
  if s.wmax > 0 and s.r < s.wmax then
    s.wmax = s.r * (1 + ADAPT_CUT) / 2
  else
    s.wmax = s.r
  end
  s.r = max(s.min, s.r * ADAPT_CUT)
  s.t_over, s.t_move = now, now
  s.hold = max(until_us, now + ADAPT_HOLD_US)
  return true
end
