-- KEYS: the semaphore's (see common.lua); KEYS[4] is the name's pause,
--       which its rate shares (reserve.lua)
-- ARGV: d_us ('lift': lift the pause), own wake channel
-- Pauses the name until d_us from now on the server's clock, unless it
-- is paused longer already (two 429s never shorten each other's pause).
-- The key outlives the pause by a day (its end still paces the rate until
-- the burst refills: reserve.lua). Lifting it wakes the waiters that fit:
-- they slept until its end. Returns {µs left of the pause, own waiters
-- woken...}.
if ARGV[1] == 'lift' then
  redis.call('DEL', KEYS[4])
  local st = redis.call('HMGET', KEYS[2], 'total', 'limit')
  local limit = tonumber(st[2]) or math.huge
  local reply = {0}
  for _, v in ipairs(pass_on(nil, limit - (tonumber(st[1]) or 0), ARGV[2], limit)) do reply[#reply + 1] = v end
  return reply
end
local now = now_us()
local until_us = math.max(now + tonumber(ARGV[1]), tonumber(redis.call('GET', KEYS[4]) or '0'))
redis.call('SET', KEYS[4], fmt(until_us))
redis.call('PEXPIREAT', KEYS[4], fmt(math.ceil(until_us / 1000) + 86400000))
return {fmt(until_us - now)}
