-- ARGV: wait id, own wake channel
-- A waiter gives up: it leaves the queue and passes its turn on to those
-- behind that now fit. Returns the own waiters woken.
local wait = ARGV[1]
if redis.call('ZREM', KEYS[3], wait) == 0 then return {} end
redis.call('HDEL', KEYS[2], '?' .. wait)
local st = redis.call('HMGET', KEYS[2], 'total', 'limit')
local free = (tonumber(st[2]) or 0) - (tonumber(st[1]) or 0)
return wake_fitting(nil, free, ARGV[2], tonumber(st[2]) or math.huge)
