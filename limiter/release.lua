-- ARGV: id, token ('' = any), notify command ('', 'PUBLISH', 'SPUBLISH'), channel, origin
-- Returns the permits the lease held, or 0 when it was not held (expired,
-- released, or another incarnation of the same id).
local id, want = ARGV[1], ARGV[2]
local field = ':' .. id
local held = redis.call('HGET', KEYS[2], field)
if not held then return 0 end
local w, tok = parse(held)
if want ~= '' and tok ~= want then return 0 end
local now_ms = math.floor(now_us() / 1000)
local expired = tonumber(redis.call('ZSCORE', KEYS[1], id) or '0') <= now_ms
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], field)
redis.call('HINCRBY', KEYS[2], 'total', -w)
-- An expired lease is removed all the same (its permits were free for
-- the taking already), but it was not held.
notify(ARGV[3], ARGV[4], w, ARGV[5] .. ':' .. tok)
if expired then return 0 end
return w
