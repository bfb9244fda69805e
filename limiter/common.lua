-- Prelude shared by every script (prepended in scripts.go).
-- KEYS[1] leases ZSET id -> expiry (ms, server clock), plus the member ''
--                at +inf that keeps the set (and its TTL) alive while empty
-- KEYS[2] state  HASH ':'..id -> "<weight>:<token>" for each lease, and
--                total  (sum of the weights of every lease in KEYS[1]),
--                token  (the last fencing token),
--                keyexp (when both keys expire)
-- Every redis.call costs ~2us of Lua overhead, more than most commands
-- themselves, so the common paths are written to make as few as possible.
--
-- Numbers are formatted by hand: Lua 5.1 turns large numbers into "1.7e+15"
-- when Redis converts them to strings.
local function fmt(n)
  return string.format('%.0f', n)
end

-- Server time in microseconds: the only clock the scripts trust.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function parse(v)
  local w, tok = string.match(v, '^(%d+):(%d+)$')
  return tonumber(w), tok
end

-- Drops every lease whose expiry has passed; returns the permits freed.
local function sweep(now_ms)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
  if #gone == 0 then return 0 end
  local freed = 0
  for i = 1, #gone, 1000 do
    local ids, fields = {}, {}
    for j = i, math.min(i + 999, #gone) do
      ids[#ids + 1] = gone[j]
      fields[#fields + 1] = ':' .. gone[j]
    end
    for _, v in ipairs(redis.call('HMGET', KEYS[2], unpack(fields))) do
      if v then freed = freed + parse(v) end
    end
    redis.call('HDEL', KEYS[2], unpack(fields))
    redis.call('ZREM', KEYS[1], unpack(ids))
  end
  redis.call('HINCRBY', KEYS[2], 'total', -freed)
  return freed
end

-- Both keys must outlive every lease, and no key may live forever. They
-- are extended a TTL beyond the newest expiry, so most calls skip this;
-- an idle semaphore disappears at most about two TTLs after its last use.
-- Returns the new keyexp, or nil when the current one suffices.
local function next_keyexp(exp, ttl, keyexp)
  if exp + 1000 <= keyexp then return nil end
  return fmt(exp + ttl + 1000)
end

local function expire_keys(at)
  redis.call('ZADD', KEYS[1], '+inf', '')
  redis.call('PEXPIREAT', KEYS[1], at)
  redis.call('PEXPIREAT', KEYS[2], at)
end

-- Wakes waiters in other processes: cmd is '', 'PUBLISH' or 'SPUBLISH'.
-- The payload, "<freed>:<origin>:<token>", names the releasing process,
-- which woke its own waiters already and ignores the message, and the
-- lease, so a quorum's nodes announcing one release wake waiters once.
local function notify(cmd, channel, freed, origin)
  if cmd ~= '' and freed > 0 then
    redis.call(cmd, channel, fmt(freed) .. ':' .. origin)
  end
end
