-- ARGV: id, token
-- Quorum write-back: gives a lease the token its quorum agreed on (the
-- highest any node granted) and raises the node's counter to it, so any
-- later quorum, which shares a node with this one, issues a higher token.
-- Returns 1, or 0 when the lease is not there.
local field = ':' .. ARGV[1]
local st = redis.call('HMGET', KEYS[2], field, 'token')
if not st[1] then return 0 end
local w, _, owner = parse(st[1])
local tok = tonumber(ARGV[2])
local set = {'HSET', KEYS[2], field, fmt(w) .. ':' .. ARGV[2] .. ':' .. owner}
if tok > (tonumber(st[2]) or 0) then set[5], set[6] = 'token', ARGV[2] end
redis.call(unpack(set))
return 1
