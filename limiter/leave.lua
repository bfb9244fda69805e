-- ARGV: wait id, own wake channel
-- A waiter gives up: it leaves the queue and passes its turn on to those
-- behind that now fit. A lease a release already handed it (under the
-- wait id, see release.lua) is given back the same way. Returns the own
-- waiters woken.
local wait = ARGV[1]
local st = redis.call('HMGET', KEYS[2], 'total', 'limit', ':' .. wait)
local limit = tonumber(st[2]) or math.huge -- none recorded: let the queue try
local total = tonumber(st[1]) or 0
if st[3] then
  local w, _, holder = parse(st[3])
  if holder == string.match(ARGV[2], '([^:]*)$') then
    redis.call('ZREM', KEYS[1], wait)
    redis.call('HDEL', KEYS[2], ':' .. wait)
    total = total - w
    redis.call('HSET', KEYS[2], 'total', fmt(total))
    return wake_fitting(nil, limit - total, ARGV[2], limit)
  end
end
return dequeue(wait, nil, limit - total, ARGV[2], limit)
