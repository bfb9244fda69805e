-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] n: the fleet-wide limit ('0' clears it)
-- ARGV[2] own: the caller's wake channel
-- ARGV[3] ttl_ms: the caller's TTL: when the limit is cleared, the keys
--         expire again after it, or after the last lease, whichever is
--         later
local n_s = ARGV[1]
local n = tonum(n_s)
local own = ARGV[2]
local ttl_ms = ARGV[3]

-- Stores a limit that overrides every Semaphore's own, for every process.
-- Lowering it evicts nobody: grants wait until the permits in use fit.
-- Raising it wakes at once the waiters that now fit. While it is set the
-- keys never expire (keyexp "inf": no grant sets an expiry), so an idle
-- night does not silently bring back the processes' own limits.
-- Returns the own waiters woken.
local st = redis.call('HMGET', KEYS[2], 'total', 'adapt')
local total = tonum(st[1]) or 0
if n == 0 then
  -- A learned limit (acquire.lua) is forgotten too: learning starts again.
  redis.call('HDEL', KEYS[2], 'cap', 'adapt')
  local last = redis.call('ZREVRANGEBYSCORE', KEYS[1], '(+inf', '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
  local now = clock_ms()
  local until_ms = now + tonum(ttl_ms)
  if #last > 0 then until_ms = max(until_ms, tonum(last[2])) end
  local at = fmt(until_ms + 1000)
  -- Each process's own limit applies again, which no script knows until
  -- the next grant records its own: forget the recorded one and let the
  -- queue try (releases meanwhile wake as for an unknown limit).
  redis.call('HDEL', KEYS[2], 'limit')
  redis.call('HSET', KEYS[2], 'keyexp', at)
  expire_keys(KEYS, at)
  return pass_on(KEYS, nil, math.huge, own, math.huge)
end
redis.call('HSET', KEYS[2], 'cap', n_s, 'limit', n_s, 'keyexp', 'inf')
-- A learned limit is pinned: nothing moves it until the limit is cleared.
if st[2] then redis.call('HSET', KEYS[2], 'adapt', 'pin') end
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
redis.call('PERSIST', KEYS[3])
-- Raising wakes those that now fit; lowering wakes those now heavier
-- than the limit, so that they learn so rather than wait.
return pass_on(KEYS, nil, n - total, own, n)
