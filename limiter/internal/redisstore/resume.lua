-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] id: the lease's id
-- ARGV[2] token: its token now
-- ARGV[3] ttl_ms: its TTL from now
-- ARGV[4] owner: the Client it goes to ('' = park it)
-- ARGV[5] proposed: the token a quorum proposes ('' = the server clock's)
local id = ARGV[1]
local token = ARGV[2]
local ttl_ms = ARGV[3] + 0
local owner = ARGV[4]
local proposed = ARGV[5]

-- Hands a held lease over to owner: a new fencing token, owner's TTL
-- (from now, shorter or longer: the adopter's TTL governs from here) and
-- owner as its holder, so the previous holder's next refresh, by the old
-- token, finds it gone. Of two resumes of one ticket, one wins. owner ''
-- parks the lease (Lease.Park).
-- Returns {weight, new token}, or 0 when the lease is not held with token.
local field = ':' .. id
local st = redis.call('HMGET', KEYS[2], field, 'token', 'keyexp')
if not st[1] then return 0 end
local w, tok, holder = parse(st[1])
-- A parked lease (no holder: Lease.Park) goes to the first Resume of any
-- ticket of its id; parking itself needs the token.
if tok ~= token and not (holder == '' and owner ~= '') then return 0 end
local now = now_us()
local now_ms = floor(now / 1000)
local score = redis.call('ZSCORE', KEYS[1], id)
if not score or score + 0 <= now_ms then return 0 end
local newtok = next_token(num(st[2]) or 0, proposed, now)
local exp = now_ms + ttl_ms
redis.call('ZADD', KEYS[1], fmt(exp), id)
local at = next_keyexp(exp, ttl_ms, num(st[3]) or 0)
redis.call('HSET', KEYS[2], field, lease_record(fmt(w), newtok, owner), 'token', newtok, 'keyexp', at or st[3])
if at then expire_keys(KEYS, at) end
return {w, newtok}
