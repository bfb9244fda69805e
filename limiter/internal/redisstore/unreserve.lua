-- KEYS[1] rate STRING (see reserve.lua)
-- ARGV: prev, next (a reservation's, from reserve.lua)
-- Gives a reservation back when nothing was reserved after it (tat is
-- still next): later callers were given their times already, which
-- cannot move. Returns 1 when it did, 0 when it could not.
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', fmt(math.max(math.ceil((tonumber(ARGV[1]) - now_us() + RATE_KEEP_US) / 1000), 1)))
return 1
