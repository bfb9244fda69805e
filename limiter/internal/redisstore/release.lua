-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] id: the lease's id
-- ARGV[2] token: the lease's token ('' = any)
-- ARGV[3] own: the releasing Client's wake channel
-- ARGV[4] wake: 1 wake waiters; 0 a quorum giving back a failed attempt,
--         which must not wake anyone, or waiters would retry in a loop
-- ARGV[5] check: 1 report a lease past its expiry as not held; 0 the
--         caller knows it was live, as a Lease within its local deadline
--         does, so the clock and the score need not be read
local id = ARGV[1]
local token = ARGV[2]
local own = ARGV[3]
local wake = ARGV[4] == '1'
local check = ARGV[5] == '1'

-- Returns {permits the lease held (0 when it was not held: expired,
-- released, or another incarnation of the id), own waiters woken...},
-- each "wait id" or, when granted here, "wait id token" (also the
-- message published to another Client's waiter); the permits alone, not
-- a table, when it woke none of its own (a table costs the common path
-- more than anything else in its reply).
local field = ':' .. id
local st = redis.call('HMGET', KEYS[2], field, 'total', 'limit', 'token', 'keyexp', 'cap', 'seq', 'emptied')
if not st[1] then return 0 end
local w, tok = string.match(st[1], '^(%d+):(%d+):') -- as parse, but the owner
w = w + 0
if token ~= '' and tok ~= token then return 0 end
local now -- read only when needed
local held = w
if check then
  now = clock_ms()
  -- An expired lease is removed all the same (its permits were free for
  -- the taking already), but it was not held.
  if (num(redis.call('ZSCORE', KEYS[1], id)) or 0) <= now then held = 0 end
end
redis.call('ZREM', KEYS[1], id)
local total = (num(st[2]) or w) - w
local mine -- own waiters woken, when the queue was walked
if wake and st[7] ~= st[8] then
  local hdel, hset = {'HDEL', KEYS[2], field}, {'HSET', KEYS[2]}
  local g = {total = total, token = num(st[4]) or 0, keyexp = num(st[5]) or 0,
    limit = st[3], cap = st[6], hdel = hdel, hset = hset}
  -- No recorded limit (a fleet limit was just cleared): let the queue try.
  local limit = num(st[3]) or math.huge
  mine = pass_on(KEYS, now, limit - total, own, limit, g)
  total = g.total
  if queue_seen_empty and st[7] then hset[#hset + 1], hset[#hset + 2] = 'emptied', st[7] end
  hset[#hset + 1], hset[#hset + 2] = 'total', int_string(total)
  redis.call(unpack(hdel))
  redis.call(unpack(hset))
else
  -- Nobody to wake: the writes as they are, no tables to build.
  redis.call('HDEL', KEYS[2], field)
  redis.call('HSET', KEYS[2], 'total', int_string(total))
end
if not mine or #mine == 0 then return held end
table.insert(mine, 1, held)
return mine
