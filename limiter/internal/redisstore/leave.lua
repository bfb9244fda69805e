-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] wait: the waiter's id in the queue
-- ARGV[2] own: its Client's wake channel
local wait = ARGV[1]
local own = ARGV[2]

-- A waiter gives up: it leaves the queue and passes its turn on to those
-- behind that now fit. A lease a release already handed it (under the
-- wait id, see pass_on) is given back as a release gives one back.
-- Returns the own waiters' messages (see pass_on).
local st = redis.call('HMGET', KEYS[2], 'total', 'limit', ':' .. wait, 'token', 'keyexp', 'cap')
local limit = num(st[2]) or math.huge -- none recorded: let the queue try
local total = num(st[1]) or 0
if st[3] then
  local w, _, holder = parse(st[3])
  if holder == owner_of(own) then
    redis.call('ZREM', KEYS[1], wait)
    local g = {total = total - w, token = tonum(st[4]) or 0, keyexp = tonum(st[5]) or 0,
      limit = st[2], cap = st[6], hdel = {'HDEL', KEYS[2], ':' .. wait}, hset = {'HSET', KEYS[2]}}
    local mine = pass_on(KEYS, nil, limit - g.total, own, limit, g)
    g.hset[#g.hset + 1], g.hset[#g.hset + 2] = 'total', int_string(g.total)
    redis.call(unpack(g.hdel))
    redis.call(unpack(g.hset))
    return mine
  end
end
return dequeue(KEYS, wait, nil, limit - total, own, limit)
