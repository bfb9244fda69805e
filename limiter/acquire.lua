-- ARGV: limit, weight, ttl_ms, id, proposed token ('' = use the server clock)
-- A quorum proposes the token (the client clock) so that its nodes, whose
-- clocks differ, agree on it unless one has seen a later token.
-- Returns {1, token, weight, permits still free, existing} when granted
-- (existing = 1 when id already held a lease: that lease, refreshed), else
-- {0, ms until the earliest lease expires, permits in use}.
local limit, weight, ttl, id = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local field = ':' .. id
local now = now_us()
local now_ms = math.floor(now / 1000)
local exp = now_ms + ttl
local st = redis.call('HMGET', KEYS[2], 'total', 'token', 'keyexp', field)
local total, last, keyexp = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or 0

local mine = st[4]
local score = mine and tonumber(redis.call('ZSCORE', KEYS[1], id) or '0')
if mine and score > now_ms then
  local w, tok = parse(mine)
  exp = math.max(exp, score) -- never shorten another holder's expiry
  redis.call('ZADD', KEYS[1], fmt(exp), id)
  local at = next_keyexp(exp, ttl, keyexp)
  if at then
    redis.call('HSET', KEYS[2], 'keyexp', at)
    expire_keys(at)
  end
  return {1, tok, w, limit - total, 1}
end

-- Expired leases are swept only when they are in the way.
if mine or total + weight > limit then
  total = total - sweep(now_ms)
end

if total + weight <= limit then
  local tok = fmt(math.max(last + 1, tonumber(ARGV[5]) or now))
  local at = next_keyexp(exp, ttl, keyexp)
  redis.call('ZADD', KEYS[1], fmt(exp), id)
  redis.call('HSET', KEYS[2], field, fmt(weight) .. ':' .. tok, 'total', fmt(total + weight), 'token', tok,
    'keyexp', at or fmt(keyexp))
  if at then expire_keys(at) end
  return {1, tok, weight, limit - total - weight, 0}
end

local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = ttl
if #first > 0 then wait = tonumber(first[2]) - now_ms end
return {0, wait, total}
