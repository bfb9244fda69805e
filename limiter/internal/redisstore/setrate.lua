-- KEYS[1] rate HASH (see reserve.lua)
-- ARGV: events, per_us, burst ('0', '0', '0': clear the fleet rate)
-- Stores a rate that overrides every RateLimit's own, for every process,
-- and keeps the state while it is set (an idle night does not bring the
-- processes' own rates back); cleared, the state expires again once its
-- burst is whole. Reservations already made keep their times.
if ARGV[1] ~= '0' then
  redis.call('HSET', KEYS[1], 'events', ARGV[1], 'per', ARGV[2], 'burst', ARGV[3])
  redis.call('PERSIST', KEYS[1])
  return 1
end
redis.call('HDEL', KEYS[1], 'events', 'per', 'burst')
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat') or '0')
local at = math.max(math.ceil(tat / 1000), clock_ms()) + 1000
redis.call('PEXPIREAT', KEYS[1], fmt(at))
return 1
