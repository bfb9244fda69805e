-- ARGV: limit, weight, ttl_ms, id
-- Returns {1, token, weight} when granted (or when id already holds a lease:
-- that lease, refreshed), else {0, ms until the earliest lease expires, permits in use}.
local limit, weight, ttl, id = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = now_us()
local now_ms = math.floor(now / 1000)
sweep(now_ms)

local held = redis.call('HGET', KEYS[2], id)
if held then
  local w, tok = parse(held)
  redis.call('ZADD', KEYS[1], fmt(now_ms + ttl), id)
  touch()
  return {1, tok, w}
end

local total = tonumber(redis.call('HGET', KEYS[3], 'total') or '0')
if total + weight <= limit then
  local last = tonumber(redis.call('HGET', KEYS[3], 'token') or '0')
  local tok = fmt(math.max(last + 1, now))
  redis.call('ZADD', KEYS[1], fmt(now_ms + ttl), id)
  redis.call('HSET', KEYS[2], id, fmt(weight) .. ':' .. tok)
  redis.call('HSET', KEYS[3], 'total', fmt(total + weight), 'token', tok)
  touch()
  return {1, tok, weight}
end

local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = ttl
if #first > 0 then wait = tonumber(first[2]) - now_ms end
return {0, wait, total}
