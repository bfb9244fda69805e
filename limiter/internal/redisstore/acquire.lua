-- KEYS[1] leases: the semaphore's leases (ZSET; see common.lua)
-- KEYS[2] state: its records and counters (HASH; see common.lua)
-- KEYS[3] queue: its waiters in order (ZSET; see common.lua)
-- KEYS[4] pause: the name's pause (STRING; see common.lua)
-- ARGV[1] limit: the asking Semaphore's limit
-- ARGV[2] weight: the permits asked for
-- ARGV[3] ttl_ms: the lease's TTL
-- ARGV[4] id: the lease's id
-- ARGV[5] proposed: the token a quorum proposes ('' = the server clock's)
-- ARGV[6] owner: the asking Client
-- ARGV[7] reclaim_above: '' no; else a token: the owner has no live Lease
--         of this id, so its lease of the id with a token above this one
--         is a retry's, whose reply was lost
-- ARGV[8] wait: the waiter's id in the queue ('' = never queue)
-- ARGV[9] queue_ttl_ms: how long the waiter's entry lives unless kept alive
-- ARGV[10] own: the asking Client's wake channel
-- ARGV[11] fifo: 1 grant in queue order; 0 not (a quorum's node: below)
-- ARGV[12] direct_grant: 1 a release may grant this waiter its lease
--          directly, under the lease id wait (see release.lua)
-- ARGV[13] quarantine_ms: the restart quarantine (0: none; see
--          quarantine_left), kept in the waiter's record for why.lua
-- ARGV[14] exact: 1 the proposed token is the lease's own, to be taken
--          as is (see quorumStore.regain)
-- ARGV[15] learn: '' the limit is fixed; else "min start": it is learned
--          between min and limit, from start (adapt.lua; not on a
--          quorum's node)
-- Numbers stored as they came (decimal from Go) keep their string too, as
-- name_s: formatting a number costs more than the rest of a write.
local limit_s, weight_s, ttl_ms_s = ARGV[1], ARGV[2], ARGV[3]
local limit, weight, ttl_ms = limit_s + 0, weight_s + 0, ttl_ms_s + 0
local id = ARGV[4]
local proposed = ARGV[5]
local owner = ARGV[6]
local reclaim_above = ARGV[7]
local wait = ARGV[8]
local queue_ttl_ms = ARGV[9]
local own = ARGV[10]
local fifo = ARGV[11] == '1'
local direct_grant = ARGV[12] == '1'
local quarantine_ms = ARGV[13]
local exact = ARGV[14] == '1'
local learn = ARGV[15]

-- A quorum proposes the token so that its nodes, whose clocks differ,
-- agree on it unless one has seen a later token. A quorum does not queue
-- in order (fifo 0): each node's queue only says whom to wake, since an
-- order per node can deadlock waiters that each head one node.
-- Returns {1, token, weight, permits still free, existing, own waiters
-- woken...} when granted (existing = 1: the owner's lease of this id,
-- extended), {0, ms until the earliest expiry, permits in use, at head}
-- when not (with the last token issued, 1 when the restart quarantine
-- refused it, 2 when the name's pause did, the ms being then until its
-- end, and the limit applied: the fleet limit, set or learned, when there
-- is one, else the asking Semaphore's), {-1, weight held} when the id
-- holds another weight, {-2, fleet limit} when the weight is above the
-- fleet-wide limit.

local field = ':' .. id
local now = now_us()
local now_ms = floor(now / 1000)
local exp = now_ms + ttl_ms
-- One read for everything the common paths need ('?' alone, when this
-- request does not queue, is never a field). Each field read costs ~2-3k
-- instructions, one written ~1.5k: the limit of the last grant is not
-- read but written with every grant, and the waiter's wake-up marker not
-- read but reset with every requeue (below). A learned limit's state is
-- read here only by a Client that learns; beside a fleet limit, below.
local st
if learn == '' then
  st = redis.call('HMGET', KEYS[2], 'total', 'token', 'keyexp', field, '?' .. wait, 'cap', 'seq', 'emptied')
else
  st = redis.call('HMGET', KEYS[2], 'total', 'token', 'keyexp', field, '?' .. wait, 'cap', 'seq', 'emptied', 'adapt')
end
-- keyexp is "inf" while a fleet limit is set (setlimit.lua): tonumber
-- reads it as infinity, so no expiry is ever set.
local total, last, keyexp = num(st[1]) or 0, num(st[2]) or 0, num(st[3]) or 0
local mine = wait ~= '' and st[5]
-- A fleet-wide limit stored by SetLimit overrides the asking Semaphore's
-- (not on a quorum's nodes: its size is made for the asking limit).
local cap = fifo and st[6]
local adapt = st[9]
if cap and learn == '' then adapt = redis.call('HGET', KEYS[2], 'adapt') end
-- A learned limit (adapt.lua) is the fleet limit, its state beside it
-- ('adapt'), started by the first learning Client; a fleet limit without
-- a state is an operator's (SetLimit), and pins it as 'pin' does.
local learned
if fifo and learn ~= '' and adapt ~= 'pin' and (adapt or not cap) then
  learned = adapt_parse(adapt)
  if not learned then
    local lo, start = string.match(learn, '^(%d+) (%d+)$')
    learned = {min = lo + 0, max = limit, r = start + 0, wmax = 0, t_over = 0, t_move = now, hold = 0}
    cap = start
    redis.call('HSET', KEYS[2], 'cap', cap, 'adapt', adapt_string(learned))
  end
end
-- A learned limit is no greater than the asking Semaphore's, its bound
-- (a Client whose code lowered it, or that does not learn).
if cap and adapt and adapt ~= 'pin' and cap + 0 > limit then cap = limit_s end
local rule_s = cap or limit_s -- the limit a grant records
if cap then
  limit = cap + 0
  if weight > limit then return {-2, limit} end
end

-- One id, one holder: a live lease of this id is returned only to its own
-- Client retrying after a lost reply; anyone else waits for it to end.
local conflict = false
if st[4] then
  local w, tok, holder = parse(st[4])
  local score = num(redis.call('ZSCORE', KEYS[1], id)) or 0
  if score > now_ms then
    if w ~= weight then return {-1, w} end
    -- A lease a release handed to this waiter (id == wait), whose wake-up
    -- was lost, is its own too. Only releases in order grant directly (fifo);
    -- on a quorum's node such a lease is what an earlier attempt left,
    -- which its rollback may be removing right now: not to be counted.
    local handed = fifo and id == wait
    local above = reclaim_above ~= '' and reclaim_above + 0
    if holder == owner and ((above and tok + 0 > above) or handed) then
      exp = max(exp, score) -- never shorten
      redis.call('ZADD', KEYS[1], fmt(exp), id)
      local at = next_keyexp(exp, ttl_ms, keyexp)
      if at then
        redis.call('HSET', KEYS[2], 'keyexp', at)
        expire_keys(KEYS, at)
      end
      local reply = {1, tok, w, limit - total, 1}
      -- The retry may have queued meanwhile: its entry must not keep
      -- the room of those behind.
      if mine then
        for _, v in ipairs(dequeue(KEYS, wait, now_ms, limit - total, own, limit)) do reply[#reply + 1] = v end
      end
      return reply
    end
    conflict = true
  else
    -- Its own expired lease: drop it here, since the bounded sweep may
    -- not reach it and the grant below overwrites its record.
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], field)
    redis.call('HINCRBY', KEYS[2], 'total', -w)
    total = total - w
  end
end

-- In order: the permits of live waiters ahead are spoken for (queue: a
-- ticket was taken since the queue was last seen empty, so it may hold
-- some). A newcomer that does not fit even in the permits free now cannot
-- fit whatever is ahead: only whether a live waiter is (for the head's
-- timer) matters, and the walk stops at the first. Behind a live waiter
-- the sweep is left to that waiter's attempts and the waiters'
-- keep-alives (refresh.lua sweeps): the permits expired leases free are
-- the waiters' ahead first, and this newcomer, queued, hears of its turn
-- from them. Dead entries on the way are dropped, as by any walk.
local queue = fifo and not conflict and st[7] ~= st[8]
local ahead = 0
local first -- the earliest live lease, when the sweep read it
local behind = false -- a newcomer behind a live waiter: no sweep
if not conflict and total + weight > limit then
  if queue and not mine and wait ~= '' then -- (a request that never queues asks nothing)
    if live_ahead(KEYS, now_ms) ~= false then ahead, behind = 1, true end
    queue = false
  end
  if not behind then
    local freed
    freed, first = sweep(KEYS, now_ms)
    total = total - freed
  end
end
if queue and (mine or total + weight <= limit) then
  ahead = queued_ahead(KEYS, now_ms, wait, limit)
end

-- No token: the name is new to this server, or was forgotten in a restart
-- with its leases. Only then is the server's age asked (one INFO), so the
-- names in use pay nothing.
local quarantine = 0
if not conflict and not st[2] and quarantine_ms ~= '0' then
  quarantine = quarantine_left(KEYS, quarantine_ms + 0)
end

local fits = not conflict and ahead and quarantine == 0 and total + ahead + weight <= limit
local paused = fits and pause_left(KEYS, now_ms) or 0
-- A newcomer that finds every permit taken says the limit is all used: a
-- learned limit grows (adapt.lua), for the grants after this one.
if learned then adapt_ceiling(learned, now) end
if learned and not conflict and quarantine == 0 and total + weight > limit and adapt_up(learned, now, weight) then
  local grown = fmt(adapt_events(learned))
  redis.call('HSET', KEYS[2], 'cap', grown, 'limit', grown, 'adapt', adapt_string(learned))
end
if fits and paused == 0 then
  -- A quorum granting a lease it holds again on a node that lost it
  -- gives the lease its own token (exact); the node's counter never
  -- goes back.
  local tok, counter
  if exact then
    tok = proposed
    counter = fmt(max(last, tok + 0))
  else
    tok = next_token(last, proposed, now)
    counter = tok
  end
  local at = next_keyexp(exp, ttl_ms, keyexp)
  redis.call('ZADD', KEYS[1], fmt(exp), id)
  -- limit and weight are stored as they came (decimal from Go): no
  -- formatting (the first lease's total is its weight); the limit with
  -- every grant (cheaper than reading whether it changed), keyexp and
  -- emptied only when they change.
  local new_total = total == 0 and weight_s or int_string(total + weight)
  local rec = lease_record(weight_s, tok, owner)
  local set_emptied = queue_seen_empty and st[7]
  if not (at or set_emptied) then
    -- The common grant: the writes as they are, no table to build.
    redis.call('HSET', KEYS[2], field, rec, 'total', new_total, 'token', counter, 'limit', rule_s)
  else
    local set = {'HSET', KEYS[2], field, rec, 'total', new_total, 'token', counter, 'limit', rule_s}
    if at then
      local n = #set
      set[n + 1], set[n + 2] = 'keyexp', at
    end
    if set_emptied then
      local n = #set
      set[n + 1], set[n + 2] = 'emptied', st[7]
    end
    redis.call(unpack(set))
  end
  if at then expire_keys(KEYS, at) end
  local reply = {1, tok, weight, limit - total - weight, 0}
  if mine then
    for _, v in ipairs(dequeue(KEYS, wait, now_ms, limit - total - weight, own, limit)) do reply[#reply + 1] = v end
  end
  return reply
end

local head = 0
if wait ~= '' then
  if ahead == 0 then head = 1 end
  local wexp = now_ms + queue_ttl_ms
  local hand = '0'
  if fifo and direct_grant and wait == id then hand = ttl_ms_s end
  local rec = waiter_record(weight_s, fmt(wexp), hand, limit_s, quarantine_ms, own)
  if not mine then
    -- The ticket is the seq read above plus one, written with the record
    -- (the script runs alone: nobody took it meanwhile), one call less
    -- than an HINCRBY of its own. A newcomer has no wake-up marker to
    -- reset: a marker is deleted with its record.
    local seq = fmt((num(st[7]) or 0) + 1)
    redis.call('ZADD', KEYS[3], seq, wait)
    local at = next_keyexp(wexp, ttl_ms, keyexp)
    if at then
      redis.call('HSET', KEYS[2], '?' .. wait, rec, 'seq', seq, 'keyexp', at)
    else
      redis.call('HSET', KEYS[2], '?' .. wait, rec, 'seq', seq)
    end
    if at then
      expire_keys(KEYS, at)
    elseif head == 1 and keyexp < math.huge then
      -- The queue key is new when the queue had emptied (then nobody was
      -- ahead): give it the expiry the other keys have (none while a
      -- fleet limit is set).
      redis.call('PEXPIREAT', KEYS[3], st[3])
    end
  else
    -- The wake-up that brought this attempt is spent: reset the marker
    -- (pass_on), so that the next room wakes the waiter again. '' rather
    -- than HDEL, and unread: it rides on this HSET.
    redis.call('HSET', KEYS[2], '?' .. wait, rec, '!' .. wait, '')
  end
end
-- The last token issued: a direct grant announced with a token no higher came
-- before this answer, so its lease has expired since (see wait.go).
-- The limit applied lets the caller tell a fleet limit below its own from
-- a full semaphore (BusyError.Reason) without a read of its own.
if quarantine > 0 then return {0, quarantine, total, head, '0', 1, limit} end
if paused > 0 then return {0, paused, total, head, st[2] or '0', 2, limit} end
-- Behind a live waiter, the earliest expiry is not this one's to wait for
-- (its timer is the head's), and the TTL saves the call that reads it.
if behind then return {0, ttl_ms, total, head, st[2] or '0', 0, limit} end
return {0, earliest(KEYS, now_ms, ttl_ms, first), total, head, st[2] or '0', 0, limit}
