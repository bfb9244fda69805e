-- KEYS[1] state: the semaphore's records and counters (HASH; see
--                common.lua), of which 'cap', the fleet limit
-- KEYS[2] fleet: the rate SetRate stored (STRING; see reserve.lua)
-- KEYS[3] inuse: the limits in use (ZSET; see uses.lua)
-- No ARGV.
-- Read-only. Returns {fleet limit ('' when none), fleet rate ('' when
-- none), then every live record "<value>|<owner>"}.
local now_ms = clock_ms()
local out = {redis.call('HGET', KEYS[1], 'cap') or '', redis.call('GET', KEYS[2]) or ''}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. fmt(now_ms), '+inf')) do
  out[#out + 1] = m
end
return out
