-- Prelude shared by every script (prepended in scripts.go).
-- KEYS[1] leases  ZSET  id -> expiry (ms, server clock)
-- KEYS[2] weights HASH  id -> "<weight>:<token>"
-- KEYS[3] meta    HASH  total (sum of live weights), token (last fencing token)
--
-- Numbers are formatted by hand: Lua 5.1 turns large numbers into "1.7e+15"
-- when Redis converts them to strings.
local function fmt(n)
  return string.format('%.0f', n)
end

-- Server time in microseconds; the only clock the scripts trust.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function parse(v)
  local w, tok = string.match(v, '^(%d+):(%d+)$')
  return tonumber(w), tok
end

-- Drops every lease whose expiry has passed and returns the permits it freed.
local function sweep(now_ms)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
  local freed = 0
  for i = 1, #gone, 1000 do
    local chunk = {unpack(gone, i, math.min(i + 999, #gone))}
    local vals = redis.call('HMGET', KEYS[2], unpack(chunk))
    for _, v in ipairs(vals) do
      if v then freed = freed + parse(v) end
    end
    redis.call('HDEL', KEYS[2], unpack(chunk))
    redis.call('ZREM', KEYS[1], unpack(chunk))
  end
  if freed > 0 then
    if redis.call('ZCARD', KEYS[1]) == 0 then
      redis.call('HSET', KEYS[3], 'total', '0')
    else
      redis.call('HINCRBY', KEYS[3], 'total', -freed)
    end
  end
  return freed
end

-- Every key lives until the last lease expires and no longer, so an idle
-- semaphore leaves nothing behind. The token survives that because tokens
-- are never below the server time in microseconds.
local function touch()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
    redis.call('PEXPIRE', KEYS[3], 1000)
    return
  end
  local at = fmt(tonumber(last[2]) + 1000)
  redis.call('PEXPIREAT', KEYS[1], at)
  redis.call('PEXPIREAT', KEYS[2], at)
  redis.call('PEXPIREAT', KEYS[3], at)
end

-- Wakes waiters in other processes: ARGV[n] is '', 'PUBLISH' or 'SPUBLISH'.
local function notify(cmd, channel, freed)
  if cmd ~= '' and freed > 0 then
    redis.call(cmd, channel, fmt(freed))
  end
end
