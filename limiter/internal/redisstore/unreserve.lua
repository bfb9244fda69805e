-- KEYS[1] rate: STRING tat (see reserve.lua); KEYS[2..5] unused
-- ARGV[1] prev: the reservation's tat before it (from reserve.lua)
-- ARGV[2] next_tat: the reservation's tat after it (from reserve.lua)
local prev = ARGV[1]
local next_tat = ARGV[2]

-- Gives a reservation back when nothing was reserved after it (tat is
-- still next): later callers were given their times already, which
-- cannot move. Returns 1 when it did, 0 when it could not.
if redis.call('GET', KEYS[1]) ~= next_tat then return 0 end
redis.call('SET', KEYS[1], prev, 'PX', fmt(max(ceil((prev - now_us() + RATE_KEEP_US) / 1000), 1)))
return 1
