-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] n: how many leases follow
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1] (i = 1..n): lease i's id, token and
--         ttl_ms
-- ARGV[3n+2] queue_ttl_ms: the waiters' entries' TTL (absent: no waiters)
-- ARGV[3n+3..] the wait ids of the Client's queued waiters
local n = ARGV[1] + 0
local base = 3 * n + 2 -- queue_ttl_ms's position
local queue_ttl_ms = ARGV[base]

-- Keeps alive, in one call, every lease and queued waiter of one
-- semaphore that one Client holds: never shortens an expiry and never
-- re-creates what is gone (by token: a lease handed over is gone for the
-- previous holder).
-- Returns one number per lease (1 held, 0 gone) then one per waiter
-- (0 gone, 1 queued, 2 queued and its permits are free: it should try
-- now, which covers a lost wake-up; -1 - ms: queued at the head of the
-- queue, its timer to try in ms, at the earliest expiry or the pause's
-- end: a waiter made the head without a word, see pass_on, keeps the
-- timer from then on).
local now_ms = clock_ms()
local out = {}
-- One read of the state: keyexp, total, limit, then each lease's record,
-- then each waiter's, then the token.
local fields = {'keyexp', 'total', 'limit'}
local ids = {}
for i = 1, n do
  ids[i] = ARGV[3 * i - 1] -- lease i's id
  fields[3 + i] = ':' .. ids[i]
end
for i = base + 1, #ARGV do fields[#fields + 1] = '?' .. ARGV[i] end
fields[#fields + 1] = 'token'
local st = redis.call('HMGET', KEYS[2], unpack(fields))
-- No token: nothing was ever granted here, which a waiter's try cannot
-- change before a restart quarantine ends (acquire.lua); only the head
-- is told to try, the rest follow its grant.
local granted_before = st[#fields] ~= false
local keyexp = num(st[1]) or 0
local newest = 0
local maxttl = 0
if n > 0 then
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
  local zadd = {}
  for i = 1, n do
    out[i] = 0
    local v = st[3 + i]
    if v and scores[i] and scores[i] + 0 > now_ms then
      local _, tok = parse(v)
      local token, ttl_ms = ARGV[3 * i], ARGV[3 * i + 1] -- lease i's
      if tok == token then
        local ttl = ttl_ms + 0
        local exp = max(now_ms + ttl, scores[i] + 0)
        zadd[#zadd + 1] = fmt(exp)
        zadd[#zadd + 1] = ids[i]
        newest = max(newest, exp)
        maxttl = max(maxttl, ttl)
        out[i] = 1
      end
    end
  end
  if #zadd > 0 then redis.call('ZADD', KEYS[1], unpack(zadd)) end
end
if #ARGV >= base + 1 then
  local wttl = queue_ttl_ms + 0
  local wexp = fmt(now_ms + wttl)
  local set = {}
  -- Expired leases free permits that no release announces: count them
  -- out, so a waiter learns it fits.
  local limit = num(st[3]) or math.huge -- none recorded: let the queue try
  local freed, first_lease = sweep(KEYS, now_ms)
  local free = limit - ((num(st[2]) or 0) - freed)
  local fits = nil -- the ids whose turn it is, found once
  local head = nil -- the queue's head, read once
  for i = base + 1, #ARGV do
    local r = 0
    local v = st[3 + n + i - base]
    if v then
      -- Only the expiry changes.
      local ws, es, rec = with_expiry(v, wexp)
      local w = ws + 0
      if es + 0 > now_ms then
        set[#set + 1] = '?' .. ARGV[i]
        set[#set + 1] = rec
        r = 1
        if free >= w or w > limit then
          if not fits then
            fits = {}
            -- Paused: nobody's turn (the head's timer ends the pause).
            if pause_left(KEYS, now_ms) == 0 then
              for _, f in ipairs(fitting(KEYS, now_ms, free, limit)) do
                fits[f.id] = true
                if not granted_before then break end
              end
            end
          end
          if fits[ARGV[i]] then r = 2 end
        end
        if r == 1 then
          head = head or redis.call('ZRANGE', KEYS[3], '0', '0')[1] or ''
          if head == ARGV[i] then
            local ms
            if free >= w then ms = pause_left(KEYS, now_ms) else ms = earliest_ms(KEYS, first_lease) end
            if ms then r = -1 - ms end
          end
        end
      end
    end
    out[#out + 1] = r
  end
  if #set > 0 then redis.call('HSET', KEYS[2], unpack(set)) end
  newest = max(newest, now_ms + wttl)
  maxttl = max(maxttl, wttl)
end
local at = next_keyexp(newest, maxttl, keyexp)
if at then
  redis.call('HSET', KEYS[2], 'keyexp', at)
  expire_keys(KEYS, at)
end
return out
