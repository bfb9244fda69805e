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
redis.call('ZREM', KEYS[1], id)
local g = {total = (tonumber(st[2]) or w) - w, token = tonumber(st[4]) or 0, keyexp = tonumber(st[5]) or 0,
  limit = st[3], cap = st[6], hdel = {'HDEL', KEYS[2], field}, hset = {'HSET', KEYS[2]}}
if ARGV[4] == '1' then
  -- No recorded limit (a fleet limit was just cleared): let the queue try.
  local limit = tonumber(st[3]) or math.huge
  for _, v in ipairs(pass_on(now, limit - g.total, ARGV[3], limit, g)) do reply[#reply + 1] = v end
end
g.hset[#g.hset + 1], g.hset[#g.hset + 2] = 'total', fmt(g.total)
redis.call(unpack(g.hdel))
redis.call(unpack(g.hset))
return reply
