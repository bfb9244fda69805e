-- KEYS[1] rate: STRING tat (see reserve.lua)
-- KEYS[2] pause: STRING µs until which the name grants nothing
-- KEYS[3] fleet: STRING "events per_ns burst" (see reserve.lua)
-- KEYS[4] moved: a pause's move of tat (unused; see reserve.lua)
-- KEYS[5] adapt: the learned rate's state (adapt.lua)
-- No ARGV.
-- Returns {tat ('' when none), fleet rate ('' when none), µs paused from
-- now (0: not paused), now µs, learned state ('' when none)}.
local st = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3], KEYS[5])
local now = now_us()
local paused = math.max(tonumber(st[2] or '0') - now, 0)
return {st[1] or '', st[3] or '', fmt(paused), fmt(now), st[4] or ''}
