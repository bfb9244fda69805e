-- KEYS[1] rate HASH (unused), KEYS[2] pause STRING (see reserve.lua)
-- ARGV: d_us (0: lift the pause)
-- Pauses the name until d_us from now on the server's clock, unless it
-- is paused longer already (two 429s never shorten each other's pause).
-- The key expires when the pause ends. Returns the µs left of the pause.
local now = now_us()
if ARGV[1] == '0' then
  redis.call('DEL', KEYS[2])
  return 0
end
local until_us = math.max(now + tonumber(ARGV[1]), tonumber(redis.call('GET', KEYS[2]) or '0'))
redis.call('SET', KEYS[2], fmt(until_us))
redis.call('PEXPIREAT', KEYS[2], fmt(math.ceil(until_us / 1000)))
return fmt(until_us - now)
