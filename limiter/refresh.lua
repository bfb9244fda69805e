-- ARGV: id, token ('' = any), ttl_ms
-- Extends a lease that is still held; never re-creates an expired one.
-- Returns {weight, token} or 0 when the lease is gone.
local id, want, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now_ms = math.floor(now_us() / 1000)
local score = redis.call('ZSCORE', KEYS[1], id)
if not score or tonumber(score) <= now_ms then return 0 end
local held = redis.call('HGET', KEYS[2], id)
if not held then return 0 end
local w, tok = parse(held)
if want ~= '' and tok ~= want then return 0 end
redis.call('ZADD', KEYS[1], fmt(now_ms + ttl), id)
touch()
return {w, tok}
