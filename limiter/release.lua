-- ARGV: id, token ('' = any), own wake channel, wake (1: wake waiters;
--       0: a quorum giving back a failed attempt, which must not wake
--       anyone, or waiters would retry in a loop)
-- Returns {permits the lease held (0 when it was not held: expired,
-- released, or another incarnation of the id), own waiters woken...}.
local id, want = ARGV[1], ARGV[2]
local field = ':' .. id
local st = redis.call('HMGET', KEYS[2], field, 'total', 'limit')
if not st[1] then return {0} end
local w, tok = parse(st[1])
if want ~= '' and tok ~= want then return {0} end
local now_ms = math.floor(now_us() / 1000)
local expired = tonumber(redis.call('ZSCORE', KEYS[1], id) or '0') <= now_ms
local total = (tonumber(st[2]) or w) - w
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], field)
redis.call('HSET', KEYS[2], 'total', fmt(total))
-- An expired lease is removed all the same (its permits were free for
-- the taking already), but it was not held.
local reply = {0}
if not expired then reply[1] = w end
if ARGV[4] == '1' then
  for _, v in ipairs(wake_fitting(now_ms, (tonumber(st[3]) or w) - total, ARGV[3])) do reply[#reply + 1] = v end
end
return reply
