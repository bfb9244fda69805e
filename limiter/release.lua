-- ARGV: id, token ('' = any), notify command ('', 'PUBLISH', 'SPUBLISH'), channel
-- Returns the permits the lease held, or 0 when it was not held (already
-- expired, released, or another incarnation of the same id).
local id, want = ARGV[1], ARGV[2]
local now_ms = math.floor(now_us() / 1000)
local freed = sweep(now_ms)
local w = 0
local held = redis.call('HGET', KEYS[2], id)
if held then
  local hw, tok = parse(held)
  if want == '' or tok == want then
    w = hw
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[1], id)
    redis.call('HINCRBY', KEYS[3], 'total', -w)
  end
end
if freed + w > 0 then touch() end
notify(ARGV[3], ARGV[4], freed + w)
return w
