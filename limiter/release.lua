-- ARGV: id, token ('' = any), own wake channel, wake (1: wake waiters;
--       0: a quorum giving back a failed attempt, which must not wake
--       anyone, or waiters would retry in a loop), check (1: report a
--       lease past its expiry as not held; 0: the caller knows it was
--       live, as a Lease within its local deadline does, so the clock
--       and the score need not be read)
-- Returns {permits the lease held (0 when it was not held: expired,
-- released, or another incarnation of the id), own waiters woken...},
-- each "wait id" or, when granted here, "wait id token" (also the
-- message published to another Client's waiter).
local id, want = ARGV[1], ARGV[2]
local field = ':' .. id
local st = redis.call('HMGET', KEYS[2], field, 'total', 'limit', 'token', 'keyexp', 'cap')
if not st[1] then return {0} end
local w, tok = parse(st[1])
if want ~= '' and tok ~= want then return {0} end
local now -- read only when needed
local reply = {w}
if ARGV[5] == '1' then
  now = clock_ms()
  -- An expired lease is removed all the same (its permits were free for
  -- the taking already), but it was not held.
  if tonumber(redis.call('ZSCORE', KEYS[1], id) or '0') <= now then reply[1] = 0 end
end
local total = (tonumber(st[2]) or w) - w
redis.call('ZREM', KEYS[1], id)
local hdel = {'HDEL', KEYS[2], field}
local hset = {'HSET', KEYS[2]}
if ARGV[4] == '1' then
  -- No recorded limit (a fleet limit was just cleared): let the queue try.
  local limit = tonumber(st[3]) or math.huge
  -- The waiters that now fit are granted their leases here (the handoff),
  -- each under its wait id, and told the token: no acquire round trip
  -- follows. The waiter's local deadline counts from its last request
  -- Redis answered "queued", which this script follows (an answer after
  -- it carries a token at least this one, and the waiter then ignores
  -- the handoff: its lease expired meanwhile); and so that a
  -- waiter whose process died holds the permits no longer than its queue
  -- entry would have lived, the lease expires with the entry (the waiter
  -- refreshes it at once to its TTL). Waiters that cannot take a handoff
  -- (handoff ttl 0: see acquire.lua) are only woken. Each waiter is
  -- granted only within its own Semaphore's limit (or the fleet limit),
  -- as its own acquire would be; from the first that is not, the rest
  -- are only woken, so nobody overtakes it.
  local last, newest, maxttl, granted_limit = tonumber(st[4]) or 0, 0, 0, nil
  local zadd, zrem = {}, {}
  local granting = true
  for _, f in ipairs(fitting(now, limit - total, limit)) do
    local wait, channel, fw, hand, fexp = f[1], f[2], f[3], f[4], f[5]
    local msg = wait
    local own_limit = st[6] or f[6]
    granting = granting and hand > 0 and total + fw <= tonumber(own_limit)
    if granting then
      granted_limit = own_limit
      local t = next_token(last, '', now_us())
      last = tonumber(t)
      local exp = math.min(math.floor(now_us() / 1000) + hand, fexp)
      zadd[#zadd + 1], zadd[#zadd + 2] = fmt(exp), wait
      zrem[#zrem + 1] = wait
      hdel[#hdel + 1] = '?' .. wait
      hset[#hset + 1], hset[#hset + 2] = ':' .. wait, fmt(fw) .. ':' .. t .. ':' .. string.match(channel, '([^:]*)$')
      total = total + fw
      newest, maxttl = math.max(newest, exp), math.max(maxttl, hand)
      msg = wait .. ' ' .. t
    end
    if channel == ARGV[3] then
      reply[#reply + 1] = msg
    else
      redis.call('PUBLISH', channel, msg)
    end
  end
  if #zadd > 0 then
    redis.call('ZADD', KEYS[1], unpack(zadd))
    redis.call('ZREM', KEYS[3], unpack(zrem))
    hset[#hset + 1], hset[#hset + 2] = 'token', fmt(last)
    -- Like a grant by acquire: releases wake by the limit of the last.
    if granted_limit ~= st[3] then
      hset[#hset + 1], hset[#hset + 2] = 'limit', granted_limit
    end
    local at = next_keyexp(newest, maxttl, tonumber(st[5]) or 0)
    if at then
      hset[#hset + 1], hset[#hset + 2] = 'keyexp', at
      expire_keys(at)
    end
  end
end
hset[#hset + 1], hset[#hset + 2] = 'total', fmt(total)
redis.call(unpack(hdel))
redis.call(unpack(hset))
return reply
