-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] max_n: how many waiters to list at most
local max_n = tonumber(ARGV[1])

-- Read-only. Returns {wait id, weight, ms until its entry expires unless
-- kept alive, the limit of the Semaphore it waits on, ...} for the live
-- queued waiters in queue order, at most max_n of them.
local now_ms = clock_ms()
local ids = redis.call('ZRANGE', KEYS[3], '0', fmt(max_n - 1))
local out = {}
if #ids == 0 then return out end
local fields = {}
for i = 1, #ids do fields[i] = '?' .. ids[i] end
local vals = redis.call('HMGET', KEYS[2], unpack(fields))
for i = 1, #ids do
  if vals[i] then
    local w, exp, _, _, limit = parse_waiter(vals[i])
    if exp and exp > now_ms then
      out[#out + 1] = ids[i]
      out[#out + 1] = w
      out[#out + 1] = exp - now_ms
      out[#out + 1] = limit + 0
    end
  end
end
return out
