-- Read-only. Returns {id, weight, token, ms left, ...} for every live lease.
local now_ms = math.floor(now_us() / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. fmt(now_ms), '+inf', 'WITHSCORES')
local out = {}
for i = 1, #live, 2 do
  local held = redis.call('HGET', KEYS[2], live[i])
  if held then
    local w, tok = parse(held)
    table.insert(out, live[i])
    table.insert(out, w)
    table.insert(out, tok)
    table.insert(out, tonumber(live[i + 1]) - now_ms)
  end
end
return out
