-- KEYS[1] rate, KEYS[2] pause, KEYS[3] fleet (see reserve.lua)
-- ARGV: events, per_ns, burst ('0', '0', '0': clear the fleet rate)
-- Stores a rate that overrides every RateLimit's own, for every process,
-- with no expiry (an idle night does not bring the processes' own rates
-- back). Reservations already made keep their times.
if ARGV[1] == '0' then
  redis.call('DEL', KEYS[3])
else
  redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
end
return 1
