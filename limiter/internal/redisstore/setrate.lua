-- KEYS[1] rate: the rate's tat (unused; see reserve.lua)
-- KEYS[2] pause: the name's pause (unused; see reserve.lua)
-- KEYS[3] fleet: STRING "events per_ns burst" (see reserve.lua)
-- KEYS[4] moved: a pause's move of tat (unused; see reserve.lua)
-- KEYS[5] adapt: the learned rate's state (adapt.lua)
-- ARGV[1] events: the fleet rate's events per per_ns ('0': clear it)
-- ARGV[2] per_ns: its period in ns
-- ARGV[3] burst: its burst
local events, per_ns, burst = ARGV[1], ARGV[2], ARGV[3]

-- Stores a rate that overrides every RateLimit's own, for every process,
-- with no expiry (an idle night does not bring the processes' own rates
-- back), and pins a learned rate: it stops moving (a rate stored before
-- any learning is pinned as well: see reserve.lua). Clearing it clears
-- what was learned too, and learning Clients start again. Reservations
-- already made keep their times.
if events == '0' then
  redis.call('DEL', KEYS[3], KEYS[5])
else
  redis.call('SET', KEYS[3], events .. ' ' .. per_ns .. ' ' .. burst)
  redis.call('SET', KEYS[5], 'pin', 'XX')
end
return 1
