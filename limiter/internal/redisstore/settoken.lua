-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] id: the lease's id
-- ARGV[2] token: the token the quorum agreed on
-- ARGV[3] granted: the token this node granted it
local id = ARGV[1]
local token = ARGV[2]
local granted = ARGV[3]

-- Quorum write-back: gives a lease the token its quorum agreed on (the
-- highest any node granted) and raises the node's counter to it, so any
-- later quorum, which shares a node with this one, issues a higher token.
-- Only over this node's own grant: a Resume may have taken the lease here
-- meanwhile (a parked lease goes to any ticket of its id), and its token
-- is not this quorum's to overwrite.
-- Returns 1, or 0 when the lease is not there with that token.
local field = ':' .. id
local st = redis.call('HMGET', KEYS[2], field, 'token')
if not st[1] then return 0 end
local w, cur, owner = parse(st[1])
if cur ~= granted then return 0 end
local tok = tonumber(token)
local set = {'HSET', KEYS[2], field, lease_record(fmt(w), token, owner)}
if tok > (tonumber(st[2]) or 0) then set[5], set[6] = 'token', token end
redis.call(unpack(set))
return 1
