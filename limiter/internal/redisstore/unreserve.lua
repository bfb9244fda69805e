-- KEYS[1] rate HASH (see reserve.lua)
-- ARGV: prev, next (a reservation's, from reserve.lua)
-- Gives a reservation back when nothing was reserved after it (tat is
-- still next): later callers were given their times already, which
-- cannot move. Returns 1 when it did, 0 when it could not.
if redis.call('HGET', KEYS[1], 'tat') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'tat', ARGV[1])
return 1
