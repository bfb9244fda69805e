-- KEYS[1] rate, KEYS[2] pause, KEYS[3] fleet (see reserve.lua)
-- Returns {tat ('' when none), fleet rate ('' when none), µs paused from
-- now (0: not paused), now µs}.
local st = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
local now = now_us()
local paused = math.max(tonumber(st[2] or '0') - now, 0)
return {st[1] or '', st[3] or '', fmt(paused), fmt(now)}
