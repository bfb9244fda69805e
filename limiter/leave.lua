-- ARGV: wait id, own wake channel
-- A waiter gives up: it leaves the queue and passes its turn on to those
-- behind that now fit. Returns the own waiters woken.
local st = redis.call('HMGET', KEYS[2], 'total', 'limit')
local limit = tonumber(st[2]) or math.huge -- none recorded: let the queue try
return dequeue(ARGV[1], nil, limit - (tonumber(st[1]) or 0), ARGV[2], limit)
