-- ARGV: id, token, ttl_ms, owner, proposed token ('' = server clock)
-- Hands a held lease over to owner: a new fencing token, owner's TTL
-- (from now, shorter or longer: the adopter's TTL governs from here) and
-- owner as its holder, so the previous holder's next refresh, by the old
-- token, finds it gone. Of two resumes of one ticket, one wins. owner ''
-- parks the lease (Lease.Park).
-- Returns {weight, new token}, or 0 when the lease is not held with token.
local id, want, ttl = ARGV[1], ARGV[2], ARGV[3] + 0
local field = ':' .. id
local st = redis.call('HMGET', KEYS[2], field, 'token', 'keyexp')
if not st[1] then return 0 end
local w, tok, holder = parse(st[1])
-- A parked lease (no holder: Lease.Park) goes to the first Resume of any
-- ticket of its id; parking itself needs the token.
if tok ~= want and not (holder == '' and ARGV[4] ~= '') then return 0 end
local now = now_us()
local now_ms = floor(now / 1000)
local score = redis.call('ZSCORE', KEYS[1], id)
if not score or score + 0 <= now_ms then return 0 end
local newtok = next_token(num(st[2]) or 0, ARGV[5], now)
local exp = now_ms + ttl
redis.call('ZADD', KEYS[1], fmt(exp), id)
local at = next_keyexp(exp, ttl, num(st[3]) or 0)
redis.call('HSET', KEYS[2], field, lease_record(fmt(w), newtok, ARGV[4]), 'token', newtok, 'keyexp', at or st[3])
if at then expire_keys(KEYS, at) end
return {w, newtok}
