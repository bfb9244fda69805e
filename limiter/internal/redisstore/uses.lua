-- KEYS[i] inuse: name i's limits in use (ZSET "<value>|<owner>" -> expiry
--                ms, server clock), one key per name recorded
-- ARGV[1] ttl_ms: how long the records last unless written again
-- ARGV[2] owner: the recording Client's id
-- ARGV[3..] for each key in turn: how many values follow (count), then
--           those values ('s<limit>' or 'r<events>/<per_ns>/<burst>')
local ttl_ms = ARGV[1]
local owner = ARGV[2]

-- Records what one Client applies to each name: a record lasts ttl_ms
-- from now unless written again, so a dead process's go with it; the
-- expired ones are dropped here. The key lives as long as the latest
-- record, which is this one: every Client records with the same ttl_ms
-- (reading the latest expiry back cost a call per name, 25% of this
-- script). Returns 1.
local now_ms = clock_ms()
local exp = fmt(now_ms + ttl_ms)
local dead_by = fmt(now_ms)
local at = 3 -- the position of key i's count
for i = 1, #KEYS do
  local count = ARGV[at] + 0
  local zadd = {}
  for j = at + 1, at + count do
    zadd[#zadd + 1] = exp
    zadd[#zadd + 1] = ARGV[j] .. '|' .. owner
  end
  at = at + count + 1
  local dead = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', dead_by)
  if #dead > 0 then redis.call('ZREM', KEYS[i], unpack(dead)) end
  if #zadd > 0 then redis.call('ZADD', KEYS[i], unpack(zadd)) end
  redis.call('PEXPIREAT', KEYS[i], exp)
end
return 1
