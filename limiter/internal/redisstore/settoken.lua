-- ARGV: id, token, the token this node granted
-- Quorum write-back: gives a lease the token its quorum agreed on (the
-- highest any node granted) and raises the node's counter to it, so any
-- later quorum, which shares a node with this one, issues a higher token.
-- Only over this node's own grant: a Resume may have taken the lease here
-- meanwhile (a parked lease goes to any ticket of its id), and its token
-- is not this quorum's to overwrite.
-- Returns 1, or 0 when the lease is not there with that token.
local field = ':' .. ARGV[1]
local st = redis.call('HMGET', KEYS[2], field, 'token')
if not st[1] then return 0 end
local w, cur, owner = parse(st[1])
if cur ~= ARGV[3] then return 0 end
local tok = tonumber(ARGV[2])
local set = {'HSET', KEYS[2], field, lease_record(fmt(w), ARGV[2], owner)}
if tok > (tonumber(st[2]) or 0) then set[5], set[6] = 'token', ARGV[2] end
redis.call(unpack(set))
return 1
