-- KEYS[1] rate HASH, KEYS[2] pause STRING (see reserve.lua)
-- Returns {tat ('' when none), events, per_us, burst (the fleet rate, or
-- ''), µs paused from now (0: not paused), now µs}.
local st = redis.call('HMGET', KEYS[1], 'tat', 'events', 'per', 'burst')
local now = now_us()
local paused = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') - now, 0)
return {st[1] or '', st[2] or '', st[3] or '', st[4] or '', fmt(paused), fmt(now)}
