-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- No ARGV.
-- Read-only. Returns {id, weight, token, ms left, ...} for every live lease.
local now_ms = clock_ms()
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. fmt(now_ms), '+inf', 'WITHSCORES')
local out = {}
if #live == 0 then return out end
local fields = {}
for i = 1, #live, 2 do fields[#fields + 1] = ':' .. live[i] end
local vals = redis.call('HMGET', KEYS[2], unpack(fields))
for i = 1, #live, 2 do
  local v = vals[(i + 1) / 2]
  if v then
    local w, tok = parse(v)
    out[#out + 1] = live[i]
    out[#out + 1] = w
    out[#out + 1] = tok
    out[#out + 1] = tonumber(live[i + 1]) - now_ms
  end
end
return out
