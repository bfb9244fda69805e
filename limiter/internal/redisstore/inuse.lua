-- KEYS[1] state: the semaphore's records and counters (HASH; see
--                common.lua), of which 'cap', the fleet limit, and
--                'adapt', a learned limit's state
-- KEYS[2] fleet: the rate SetRate stored (STRING; see reserve.lua)
-- KEYS[3] inuse: the limits in use (ZSET; see uses.lua)
-- No ARGV.
-- Read-only. Returns {fleet limit ('' when none), fleet rate ('' when
-- none), the learned limit's state ('' when none; adapt.lua), now µs,
-- then every live record "<value>|<owner>"}.
local now_ms = clock_ms()
local st = redis.call('HMGET', KEYS[1], 'cap', 'adapt')
local out = {st[1] or '', redis.call('GET', KEYS[2]) or '', st[2] or '', fmt(now_us())}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. fmt(now_ms), '+inf')) do
  out[#out + 1] = m
end
return out
