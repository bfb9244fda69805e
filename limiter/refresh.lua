-- ARGV: id, token ('' = any), ttl_ms
-- Extends a lease that is still held; never re-creates an expired one.
-- Returns {weight, token} or 0 when the lease is gone.
local id, want, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local st = redis.call('HMGET', KEYS[2], ':' .. id, 'keyexp')
if not st[1] then return 0 end
local w, tok = parse(st[1])
if want ~= '' and tok ~= want then return 0 end
local now_ms = math.floor(now_us() / 1000)
local score = redis.call('ZSCORE', KEYS[1], id)
if not score or tonumber(score) <= now_ms then return 0 end
-- Exactly now + ttl, even if shorter: on a handoff the adopter's TTL
-- governs, so a crashed worker frees the lock after its own TTL.
local exp = now_ms + ttl
redis.call('ZADD', KEYS[1], fmt(exp), id)
local at = next_keyexp(exp, ttl, tonumber(st[2]) or 0)
if at then
  redis.call('HSET', KEYS[2], 'keyexp', at)
  expire_keys(at)
end
return {w, tok}
