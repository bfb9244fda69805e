-- Prelude shared by every script (prepended in scripts.go). No helper
-- reads KEYS or ARGV: each takes the keys it touches as a parameter,
-- since the rate scripts give KEYS[n] other meanings (reserve.lua).
--
-- A semaphore's keys are every semaphore script's KEYS[1] to KEYS[4]
-- (pause.lua adds its rate's after them). The semaphore helpers below
-- take them as one parameter, keys (the script's KEYS), and read each
-- slot by its name here:
local LEASES, STATE, QUEUE, PAUSE = 1, 2, 3, 4
-- KEYS[1] leases ZSET id -> expiry (ms, server clock), plus the member ''
--                at +inf that keeps the set (and its TTL) alive while empty
-- KEYS[2] state  HASH ':'..id -> "<weight>:<token>:<owner>" per lease,
--                '?'..wait -> "<weight>:<expiry ms>:<direct-grant ttl ms>:<its
--                own limit>:<its restart quarantine ms>:<wake channel>"
--                per queued waiter (direct-grant ttl 0: wake it, do not
--                grant it in a release; see release.lua; the quarantine
--                is for why.lua, which judges each waiter by its own),
--                '!'..wait -> when (ms) a queued waiter was woken: for
--                WOKEN_MS after, its attempt is taken to be on its way
--                and pass_on does not wake it again (see there). Written
--                in the waker's own HSET, reset to '' when the attempt
--                queues it again, deleted with its record, and
--                total  (sum of the weights of every lease in KEYS[1]),
--                token  (the last fencing token),
--                limit  (the limit of the last grant: releases wake and
--                        grant by it, each waiter within its own too),
--                seq    (the last queue ticket),
--                emptied (seq when a call last found the queue empty:
--                        see walk_queue),
--                keyexp (when the keys expire),
--                cap    (the fleet-wide limit SetLimit stored, or the
--                        limit learned, if any),
--                adapt  (a learned limit's state, adapt.lua; 'pin' once
--                        SetLimit stored one over it)
-- KEYS[3] queue  ZSET wait -> arrival ticket: the FIFO of waiters
-- KEYS[4] pause  STRING µs (server clock) until which the name grants
--                nothing (pause.lua). Shared with the rate of the same
--                name (reserve.lua).
-- Measured with callgrind on Redis 7.0 (instructions per call): running
-- a script costs ~16k before its first line, this prelude ~8k (every
-- function below is a closure made anew on each call), each redis.call
-- ~6k, and each number turned into a string (string.format, or a number
-- passed to redis.call, which Redis prints with "%.17g") or parsed from
-- one (tonumber: strtod) ~2k. The common paths therefore make as few
-- calls and conversions as they can: strings from ARGV are stored as
-- they came, and numbers are passed to redis.call as strings.
--
-- Numbers are formatted by hand: Lua 5.1 turns large numbers into "1.7e+15"
-- when Redis converts them to strings.
-- A whole number is printed as an integer ('%d'): glibc prints a double's
-- 16 digits ('%.0f') by multi-precision arithmetic, ~2k instructions more.
-- Only where Lua's integer (a C long) holds every value the scripts
-- count, which begin_call checks once: a 32-bit build keeps '%.0f'. NaN,
-- infinity and fractions fail n % 1 == 0 and keep it too.
local format, int_ok -- string.format; '%d' is exact (set by begin_call)
local function fmt(n)
  if int_ok and n % 1 == 0 and n < 1e18 and n > -1e18 then return format('%d', n) end
  return format('%.0f', n)
end

-- The decimal strings of 0 to 15, made once (in a library): the totals
-- and weights most writes carry are small, and string.format costs ~3k
-- instructions a call.
local DECIMAL = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15'}
local function int_string(n)
  return DECIMAL[n] or fmt(n)
end

-- A decimal string (or false, Redis's nil, kept) as a number: arithmetic
-- parses it once, where tonumber parses it twice.
local function num(s)
  return s and s + 0
end

-- Server time in microseconds: the only clock the scripts trust. Read
-- once per call (a script runs as one instant), however many helpers ask.
-- clock_string() is the same time as a decimal string, made only when
-- asked for, so that a fencing token taken from the clock needs no
-- formatting. Arithmetic on the strings parses each once (tonumber parses
-- twice).
local clock, clock_t, clock_s
local queue_seen_empty -- see walk_queue

-- math's max, min, ceil and floor, and tonumber (as tonum), as upvalues: a global costs a lookup in the
-- globals on every use, an upvalue none. A library's loading may not read
-- globals, so its first call sets them (begin_call).
local max, min, ceil, floor, tonum

-- Starts every call (scripts.go): forgets what the last call cached. A
-- script run by EVAL starts fresh, but a function in a library shares
-- these upvalues with every call before it.
local function begin_call()
  clock, clock_t, clock_s, queue_seen_empty = nil, nil, nil, nil
  if not max then
    max, min, ceil, floor, tonum = math.max, math.min, math.ceil, math.floor, tonumber
    format = string.format
    int_ok = format('%d', 2 ^ 60) == '1152921504606846976'
  end
end

local function now_us()
  if not clock then
    clock_t = redis.call('TIME')
    clock = clock_t[1] * 1000000 + clock_t[2]
  end
  return clock
end

local function clock_string()
  if not clock_s then
    now_us()
    local us = clock_t[2]
    -- Six digits but in a tenth of the seconds: one concatenation.
    if #us == 6 then
      clock_s = clock_t[1] .. us
    else
      clock_s = clock_t[1] .. string.sub('00000' .. us, -6)
    end
  end
  return clock_s
end

-- The record parsers below return several values, each position stated
-- at the parser, rather than a table of named fields: a table per record
-- would be allocated (and collected) on every lease and waiter read, the
-- queue walk's hot loop included.
--
-- Splits a lease record ("weight:token:owner"): returns 1 the weight (a
-- number), 2 the token and 3 the owner (strings).
local function parse(v)
  local w, second, third = string.match(v, '^(%d+):(%d+):(.*)$')
  return w + 0, second, third
end

-- A lease's record, as parse splits it (strings, or numbers the caller
-- formatted).
local function lease_record(w, tok, owner)
  return w .. ':' .. tok .. ':' .. owner
end

-- Splits a waiter's record: returns 1 its weight, 2 its expiry (ms), 3
-- its direct-grant ttl (ms) (numbers), 4 its channel, 5 its own limit, 6
-- its weight and 7 its restart quarantine (ms) (strings; 7 nil for the
-- previous version's record, which had none); nil for an older version's
-- record.
local function parse_waiter(v)
  local w, exp, ttl, limit, q, channel = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(.*)$')
  if not w then
    w, exp, ttl, limit, channel = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(.*)$')
    if not w then return nil end -- an older version's record: walk_queue drops it
  end
  return w + 0, exp + 0, ttl + 0, channel, limit, w, q
end

-- A waiter's record, as parse_waiter splits it (strings).
local function waiter_record(w, exp, hand, limit, quarantine, channel)
  return w .. ':' .. exp .. ':' .. hand .. ':' .. limit .. ':' .. quarantine .. ':' .. channel
end

-- A waiter's record v with its expiry replaced by exp (a string): the
-- weight and the old expiry (strings), and the new record, spliced so
-- that the rest need not be parsed.
local function with_expiry(v, exp)
  local w, old, rest = string.match(v, '^(%d+):(%d+)(:.*)$')
  return w, old, w .. ':' .. exp .. rest
end

-- The Client a wake channel belongs to: the channel's last part (it is
-- "<prefix>wake:<client id>", made by limiter.newClient, or on a Cluster
-- or Ring the name's "<prefix>{<name>}:wake:<client id>", made by
-- store.Keyspace.WakeChannel).
local function owner_of(channel)
  -- Anchored: '([^:]*)$' alone is tried from every position of the
  -- channel in turn, which cost a release with a direct grant ~10k
  -- instructions; '^.*:' backtracks once from the end.
  return string.match(channel, '^.*:(.*)$') or channel
end

-- The next fencing token after last: a quorum's proposal, so that its
-- nodes agree, but only within PROPOSAL_SKEW of this server's clock, else
-- the clock itself. Tokens thus stay within the skew of server time, and
-- since the keys outlive the last lease by a TTL and a second, a name
-- whose keys expired (forgetting last) still issues higher tokens, even
-- after a client whose clock was an hour off.
local PROPOSAL_SKEW = 500000 -- µs
local function next_token(last, proposed, now)
  local p = proposed ~= '' and proposed + 0
  if p and math.abs(p - now) <= PROPOSAL_SKEW then return fmt(max(last + 1, p)) end
  if last < now then return clock_string() end
  return fmt(last + 1)
end

local function clock_ms()
  return floor(now_us() / 1000)
end

-- When this server started, at the latest (µs, server clock), for the
-- restart quarantine: a server restarted empty forgot what it held, which
-- lives at most a TTL past the stop, and the stop came before the start.
-- nil from a server that tells no uptime (an embedded fake), which is not
-- restarted under its users.
-- INFO's uptime_in_seconds is the whole seconds of its cached clock less
-- those of the start (time(), whole seconds too), and server_time_usec is
-- that cached clock: the start is within the second their difference
-- begins, so at most that second's end. Taking the uptime alone as the age
-- was up to a second late: a rate whose burst refills in 100ms waited 1.1s
-- on a young server. Within that second, the name's marker (the key
-- "<tag>:seen", "<run_id> <µs>") knows better: when this server (run_id:
-- not a snapshot's or a master's) first saw the name, which was after it
-- started. It is read and written only while the start plus keep_us (the
-- caller's quarantine) may be to come, and lives until then: a marker gone
-- sooner would be written anew, later, and end the quarantine later.
-- tagged_key: any key of the name (the marker takes its hash tag).
local function started_by(keep_us, tagged_key)
  local info = redis.pcall('INFO', 'server')
  local up = type(info) == 'string' and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
  if not up then return nil end
  local now = now_us()
  local t = tonumber(string.match(info, 'server_time_usec:(%d+)'))
  -- Before Redis 6.2 (no server_time_usec), the cached clock is at most
  -- now, so its seconds are too.
  local start = ((t and floor(t / 1000000) or floor(now / 1000000)) - up + 1) * 1000000
  if start + keep_us <= now then return start end
  local run = string.match(info, 'run_id:(%x+)')
  if not run then return start end
  local key = string.match(tagged_key, '^[^}]*}') .. ':seen'
  local m = redis.call('GET', key)
  local mrun, seen
  if m then mrun, seen = string.match(m, '^(%x+) (%d+)$') end
  if mrun == run then return min(start, seen + 0) end
  -- Until the latest end the uptime allows: past it, nobody asks.
  redis.call('SET', key, run .. ' ' .. clock_string(), 'PX', fmt(ceil((start + keep_us - now) / 1000) + 1))
  return min(start, now)
end

-- How long a rate's key (reserve.lua) outlives its tat. Past tat the
-- burst is whole, which is what no key means too; but a missing key makes
-- a careful reserve ask the server's age (one INFO, which costs more than
-- the rest of the call), so a name used at least once a minute never pays
-- it, and one used less often pays it at most once a minute.
local RATE_KEEP_US = 60000000

-- At most this many expired leases or dead waiters are dropped per call,
-- so one call's cost stays bounded whatever piled up; the rest go on later
-- calls.
local SWEEP_MAX = 100

-- Drops expired leases (at most SWEEP_MAX); returns the permits freed.
-- It first looks at the lease that expires first: when that one is live,
-- nothing is to be dropped, and it is returned too ({id, expiry}, or {}
-- or {'', 'inf'} when none) for a refused acquire's retry hint
-- (acquire.lua's earliest), which then needs no call of its own.
local function sweep(keys, now_ms)
  local head = redis.call('ZRANGE', keys[LEASES], '0', '0', 'WITHSCORES')
  if #head == 0 or head[1] == '' or num(head[2]) > now_ms then
    return 0, head
  end
  local gone = redis.call('ZRANGEBYSCORE', keys[LEASES], '-inf', now_ms, 'LIMIT', 0, SWEEP_MAX)
  if #gone == 0 then return 0 end
  local fields = {}
  for i = 1, #gone do fields[i] = ':' .. gone[i] end
  local freed = 0
  for _, v in ipairs(redis.call('HMGET', keys[STATE], unpack(fields))) do
    if v then freed = freed + parse(v) end
  end
  redis.call('HDEL', keys[STATE], unpack(fields))
  redis.call('ZREM', keys[LEASES], unpack(gone))
  redis.call('HINCRBY', keys[STATE], 'total', -freed)
  return freed
end

-- Both keys must outlive every lease, and no key may live forever. They
-- are extended a TTL beyond the newest expiry, so most calls skip this;
-- an idle semaphore disappears at most about two TTLs after its last use.
-- Returns the new keyexp, or nil when the current one suffices.
local function next_keyexp(exp, ttl, keyexp)
  if exp + 1000 <= keyexp then return nil end
  return fmt(exp + ttl + 1000)
end

local function expire_keys(keys, at)
  redis.call('ZADD', keys[LEASES], '+inf', '')
  redis.call('PEXPIREAT', keys[LEASES], at)
  redis.call('PEXPIREAT', keys[STATE], at)
  redis.call('PEXPIREAT', keys[QUEUE], at)
end

-- Every enqueue takes a ticket (seq, acquire.lua), and a call whose walk
-- below found the queue empty (queue_seen_empty) writes the seq it read
-- as emptied with its own writes (acquire's grant, release). While the two
-- are equal nobody has queued since the queue was seen empty, so acquire
-- and release skip the walk: the uncontended cycle runs no ZRANGE. A
-- ticket is the hint, not a flag set beside the entry, so a waiter queued
-- by a Client that knows nothing of emptied (an older version, mid-upgrade)
-- is walked to all the same.
-- Visits the queue from its head, at most four pages, calling
-- visit(id, weight, channel, direct-grant ttl, expiry, own limit, woken,
-- weight as a string) for each live one until it returns true (woken: its
-- '!' marker, when it was woken, or false).
-- The marker is read in the same HMGET as the record, and dropped with it;
-- but with lazy, a page of one reads the record alone (an HGET, half an
-- HMGET of two) and passes woken as UNREAD, for the caller to read with
-- woken_at when it needs it: a direct grant, the contended release,
-- never does.
-- Entries whose Client stopped keeping them alive are dropped on the way
-- (keep excepted, dead or alive). now is the time in ms, or nil to read
-- the clock only if the queue has entries. Returns false when the bound
-- ran out before the queue's end or a stop.
-- The first page holds first entries (1 to 16; nil: 16), the rest 16: a
-- caller that needs only the head's few (a release that frees one permit
-- looks at one waiter) reads no more. Every entry read costs Lua strings
-- and table slots, which under contention cost more than the calls did:
-- with 7 waiters queued, a page of 16 read 14 records of which one was
-- used.
local UNREAD = {} -- a marker walk_queue left unread (lazy)
local function walk_queue(keys, now, visit, keep, first, lazy)
  local dead, finished = nil, false -- dead: made when one is found
  local pos, size = 0, first or 16
  for _ = 1, 4 do
    local lo, hi = '0', int_string(size - 1)
    if pos > 0 then lo, hi = fmt(pos), fmt(pos + size - 1) end
    local ids = redis.call('ZRANGE', keys[QUEUE], lo, hi)
    if #ids == 0 then
      queue_seen_empty = pos == 0
      finished = true
      break
    end
    now = now or clock_ms()
    local vals
    if #ids == 1 and lazy then
      vals = {redis.call('HGET', keys[STATE], '?' .. ids[1]), UNREAD}
    elseif #ids == 1 then -- the head alone (a page of one): no table to build
      vals = redis.call('HMGET', keys[STATE], '?' .. ids[1], '!' .. ids[1])
    else
      local fields = {}
      for i = 1, #ids do fields[2 * i - 1], fields[2 * i] = '?' .. ids[i], '!' .. ids[i] end
      vals = redis.call('HMGET', keys[STATE], unpack(fields))
    end
    for i = 1, #ids do
      local w, exp, hand, channel, own_limit, ws
      local v = vals[2 * i - 1]
      if v then
        w, exp, hand, channel, own_limit, ws = parse_waiter(v)
      end
      if ids[i] ~= keep and (not w or exp <= now) then
        dead = dead or {}
        dead[#dead + 1] = ids[i]
      elseif visit(ids[i], w, channel, hand, exp, own_limit, vals[2 * i] == UNREAD and UNREAD or tonum(vals[2 * i] or ''), ws) then
        finished = true
        break
      end
    end
    if finished or #ids < size then
      finished = true
      break
    end
    pos, size = pos + #ids, 16
  end
  if dead then
    local fields = {}
    for i = 1, #dead do fields[2 * i - 1], fields[2 * i] = '?' .. dead[i], '!' .. dead[i] end
    redis.call('HDEL', keys[STATE], unpack(fields))
    redis.call('ZREM', keys[QUEUE], unpack(dead))
  end
  return finished
end

-- Milliseconds left of the name's pause (keys[PAUSE]), 0 when not paused.
-- Read only when something would be granted: a pause costs the full
-- semaphore's calls nothing.
local function pause_left(keys, now_ms)
  local p = redis.call('GET', keys[PAUSE])
  if not p then return 0 end
  return max(ceil(p / 1000) - (now_ms or clock_ms()), 0)
end

-- The waiters at the head of the queue whose weights fit in free permits,
-- in order, as records {id, channel, w (weight), hand (direct-grant ttl),
-- exp (expiry), own_limit, woken (UNREAD: see walk_queue's lazy), ws
-- (weight as a string)} (direct-grant ttl 0 for one heavier than the
-- limit), up to the first that does not fit: strict
-- FIFO, as golang.org/x/sync/semaphore, so a heavy waiter is never
-- overtaken and cannot starve. A waiter heavier than the limit (lowered
-- by SetLimit after it queued) can never be served: it is listed, so that
-- its retry learns so, and not waited for.
-- With want_next, it also returns the first waiter that does not fit, as
-- a record {id, channel, woken} (nil when the queue ends first), read in
-- the same page (one entry more); with free <= 0 that is the head.
local function fitting(keys, now_ms, free, limit, want_next)
  local fit, nxt = {}, nil
  if free <= 0 and not want_next then return fit end
  local first = min(max(free, 0), 16) -- each fits in one permit at least
  if want_next then first = min(first + 1, 16) end
  walk_queue(keys, now_ms, function(id, w, channel, hand, exp, own_limit, woken, ws)
    if w > limit then
      fit[#fit + 1] = {id = id, channel = channel, w = w, hand = 0, exp = exp, own_limit = own_limit, woken = woken, ws = ws}
      return false
    end
    if w > free then
      if want_next then nxt = {id = id, channel = channel, woken = woken} end
      return true
    end
    free = free - w
    fit[#fit + 1] = {id = id, channel = channel, w = w, hand = hand, exp = exp, own_limit = own_limit, woken = woken, ws = ws}
    return free <= 0 and not want_next
  end, nil, first, not want_next)
  return fit, nxt
end

-- Sends msg to a waiter on channel, or, on own (the caller's process),
-- adds it to mine, returned rather than published.
local function tell(channel, msg, own, mine)
  if channel == own then
    mine[#mine + 1] = msg
  elseif string.find(channel, '{', 1, true) then
    -- A channel with the name's hash tag is the waiter's shard channel
    -- on a Cluster or Ring (store.Keyspace.WakeChannel): SPUBLISH keeps
    -- the message in this shard, where a PUBLISH reaches every node.
    -- pcall: a server without SPUBLISH (or a user refused it) must not
    -- abort the release half done; the waiter's keep-alive tells it
    -- its turn instead.
    redis.pcall('SPUBLISH', channel, msg)
  else
    redis.call('PUBLISH', channel, msg)
  end
end

-- Milliseconds until the earliest lease (expired or not) in keys[LEASES]
-- expires, nil when none is left. head is the leases' first entry when
-- read already.
local function earliest_ms(keys, head)
  head = head or redis.call('ZRANGE', keys[LEASES], '0', '0', 'WITHSCORES')
  if #head == 0 or head[1] == '' then return nil end
  return max(head[2] - clock_ms(), 0)
end

-- The new head's keep-alive (refresh.lua) tells it its turn and the
-- earliest expiry, within QueueTTL/3 (1s): a notice is published only
-- for an expiry sooner than that and a margin, so that a contended
-- semaphore of long TTLs pays nothing for it.
local HEAD_TOLD_MS = 1500

-- The message that makes the waiter id the queue's head: "id h<ms>", ms
-- until the earliest lease expires, when its timer is to try; "id" (try
-- now) when no lease is left; nil when the expiry is far enough for the
-- keep-alive to tell. An older Client takes it for a wake-up.
local function head_message(keys, id)
  local ms = earliest_ms(keys)
  if not ms then return id end
  if ms > HEAD_TOLD_MS then return nil end
  return id .. ' h' .. fmt(ms)
end

-- Passes free permits on to the waiters that now fit, in queue order. With
-- g (what the caller read and will write of the state hash: total, token,
-- keyexp, limit and cap as read, and the HDEL and HSET it will send), it
-- grants them their leases here (a direct grant), each under its wait id,
-- and tells each "wait token"; without g, or for a waiter that cannot take
-- a direct grant (direct-grant ttl 0: see acquire.lua), it only wakes ("wait"). A
-- waiter on the channel own (the caller's process) is returned rather
-- than published to. Returns those own messages; g.total is updated.
--
-- The waiter's local deadline counts from its last request Redis answered
-- "queued", which this grant follows (an answer after it carries a token
-- at least this one, and the waiter then ignores the grant: its lease
-- expired meanwhile). So that a waiter whose process died holds the
-- permits no longer than its queue entry would have lived, the lease
-- expires with the entry; the waiter's refresher extends it. Each waiter
-- is granted only within its own Semaphore's limit (or the fleet limit),
-- as its own acquire would be; from the first that is not, the rest are
-- only woken, so nobody overtakes it.
--
-- A waiter only woken is marked with the time ('!'..wait, in g.hset when
-- the caller writes the state anyway): for WOKEN_MS, or until its attempt
-- queues it again (acquire.lua resets the marker) or takes it out, later
-- calls do not wake it again, but still count its weight as spoken for,
-- so nobody behind overtakes it. Without the marker every release while
-- an attempt is on its way woke the same waiters again: 2.6 PUBLISH per
-- acquisition where 0.7 were needed, when releases cannot grant. The
-- marker lapses rather than waiting to be reset, so that a wake-up lost
-- on the way (a reply that did not arrive, a dropped message) is made
-- good by the next release after WOKEN_MS, as before it (and by the
-- keep-alive), and a waiter queued again by an older version, which knows
-- nothing of it, is woken again all the same.
-- A direct grant is made whether the waiter is marked or not.
--
-- Only the head waiter keeps a timer, for leases that expire without a
-- release. moved says the caller took a waiter out of the queue (its
-- grant, or its leaving). The waiter that is then the head, when nobody
-- fits, is told so (head_message), with the time of the earliest expiry,
-- which its timer now keeps: otherwise it heard of an expiry ahead of it
-- only at its keep-alive, up to QueueTTL/3 later (with a 50ms TTL a
-- waiter gave up after a second while the leases ahead had expired). The
-- keep-alive tells the head too (refresh.lua), in time for an expiry
-- further off than HEAD_TOLD_MS. A direct grant here makes a new head
-- too, but is not followed by a notice: it comes only with TTLs of
-- QueueTTL or more, refreshed every third, so only a holder that stopped
-- refreshing expires within the second before the keep-alive tells, and
-- the contended release, the hot path, reads nothing more.
local WOKEN_MS = 200
local function pass_on(keys, now_ms, free, own, limit, g, moved)
  local mine = {}
  local granting = g ~= nil
  local newest, maxttl, granted_limit, zadd, zrem = 0, 0, nil, nil, nil
  local marks -- zadd, zrem, marks: made when first needed
  local fit, nxt = fitting(keys, now_ms, free, limit, moved)
  -- Paused: nobody is granted or woken; the head waiter's timer ends with
  -- the pause, and its grant passes the turn on. A new head takes the
  -- timer.
  if #fit > 0 then
    local paused = pause_left(keys, now_ms)
    if paused > 0 then
      if moved then tell(fit[1].channel, fit[1].id .. ' h' .. fmt(paused), own, mine) end
      return mine
    end
  end
  for _, f in ipairs(fit) do
    local wait, channel, fw, hand, fexp, own_limit, woken, fws = f.id, f.channel, f.w, f.hand, f.exp, f.own_limit, f.woken, f.ws
    local msg = wait
    own_limit = g and g.cap or own_limit
    granting = granting and hand > 0 and g.total + fw <= own_limit + 0
    -- Only a waiter not granted here needs its marker (walk_queue's lazy).
    if not granting and woken == UNREAD then
      woken = tonum(redis.call('HGET', keys[STATE], '!' .. wait) or '')
    end
    if granting then
      granted_limit = own_limit
      -- The clock's own string when the clock is the token (no
      -- formatting), as next_token does.
      local t
      if now_us() > g.token then
        g.token, t = now_us(), clock_string()
      else
        g.token = g.token + 1
        t = fmt(g.token)
      end
      g.token_s = t
      local exp = min(clock_ms() + hand, fexp)
      zadd, zrem = zadd or {}, zrem or {}
      zadd[#zadd + 1], zadd[#zadd + 2] = fmt(exp), wait
      zrem[#zrem + 1] = wait
      g.hdel[#g.hdel + 1], g.hdel[#g.hdel + 2] = '?' .. wait, '!' .. wait
      g.hset[#g.hset + 1], g.hset[#g.hset + 2] = ':' .. wait, lease_record(fws, t, owner_of(channel))
      g.total = g.total + fw
      newest, maxttl = max(newest, exp), max(maxttl, hand)
      msg = wait .. ' ' .. t
    elseif woken and clock_ms() - woken < WOKEN_MS then
      msg = nil -- woken just now: its attempt is on its way
    else
      marks = marks or {}
      marks[#marks + 1], marks[#marks + 2] = '!' .. wait, fmt(clock_ms())
    end
    if msg then tell(channel, msg, own, mine) end
  end
  if marks then
    if g then
      for _, v in ipairs(marks) do g.hset[#g.hset + 1] = v end
    else
      redis.call('HSET', keys[STATE], unpack(marks))
    end
  end
  if zadd then
    redis.call('ZADD', keys[LEASES], unpack(zadd))
    redis.call('ZREM', keys[QUEUE], unpack(zrem))
    local set = g.hset
    set[#set + 1], set[#set + 2] = 'token', g.token_s
    -- Like a grant by acquire: releases wake by the limit of the last.
    if granted_limit ~= g.limit then
      set[#set + 1], set[#set + 2] = 'limit', granted_limit
    end
    local at = next_keyexp(newest, maxttl, g.keyexp)
    if at then
      set[#set + 1], set[#set + 2] = 'keyexp', at
      expire_keys(keys, at)
    end
  end
  -- The new head: nobody ahead of nxt fitted (those woken would pass the
  -- turn on with their attempts), and it was not woken just now (its
  -- attempt, on its way, will tell it).
  if nxt and moved and #fit == 0
      and not (nxt.woken and clock_ms() - nxt.woken < WOKEN_MS) then
    local msg = head_message(keys, nxt.id)
    if msg then tell(nxt.channel, msg, own, mine) end
  end
  return mine
end

-- Takes wait out of the queue and passes its turn on to those behind that
-- fit in free; returns the own waiters woken (none when wait was not
-- queued).
local function dequeue(keys, wait, now_ms, free, own, limit)
  if redis.call('ZREM', keys[QUEUE], wait) == 0 then return {} end
  redis.call('HDEL', keys[STATE], '?' .. wait, '!' .. wait)
  return pass_on(keys, now_ms, free, own, limit, nil, true)
end

-- acquire.lua's helpers, here so that a library makes their closures once.
-- Sums the weights of the live waiters queued ahead of wait (of every
-- waiter when wait is not queued): those permits are spoken for, but for
-- those heavier than the limit, which can never be served. Returns nil
-- when the queue is too long to tell within one call's bound (then it is
-- not wait's turn).
local function queued_ahead(keys, now_ms, wait, limit)
  local sum = 0
  local told = walk_queue(keys, now_ms, function(id, w)
    if id == wait then return true end
    if w <= limit then sum = sum + w end
    return false
  end, wait)
  if told then return sum end
  return nil
end

-- Whether a live waiter is queued, for a newcomer that does not fit
-- anyway: true, false, or nil when the walk's bound ran out before it
-- could tell. A live head, the contended case, is told by its record's
-- expiry alone (an HGET and one capture, where the walk reads the marker
-- too and splits the whole record); any other head takes the walk, which
-- drops the dead on its way. A record either parse_waiter format reads
-- starts "w:exp:ttl:limit:".
local function live_ahead(keys, now_ms)
  local ids = redis.call('ZRANGE', keys[QUEUE], '0', '0')
  if #ids == 0 then
    queue_seen_empty = true
    return false
  end
  local v = redis.call('HGET', keys[STATE], '?' .. ids[1])
  local exp = v and string.match(v, '^%d+:(%d+):%d+:%d+:')
  if exp and exp + 0 > now_ms then return true end
  local live = false
  local told = walk_queue(keys, now_ms, function() live = true; return true end, nil, 1, true)
  if live then return true end
  if told then return false end
  return nil
end

-- Milliseconds until the earliest live lease expires (fallback when
-- none). One expired but not yet swept would say "now", and a waiter
-- would poll every millisecond until someone swept it. A sweep that found
-- nothing expired has read it already (first; nothing since changed the
-- leases).
local function earliest(keys, now_ms, fallback, first)
  first = first or redis.call('ZRANGEBYSCORE', keys[LEASES], '(' .. fmt(now_ms), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first == 0 or first[1] == '' then return fallback end
  return max(first[2] - now_ms, 0)
end

-- Milliseconds until this server is surely older than q (ms): a server
-- restarted empty forgot leases whose holders still believe in them for up
-- to their TTL (RestartQuarantine). Rounded up: a retry at the end is
-- granted.
local function quarantine_left(keys, q)
  local start = started_by(q * 1000, keys[LEASES])
  if not start then return 0 end
  return max(ceil((start + q * 1000 - now_us()) / 1000), 0)
end
