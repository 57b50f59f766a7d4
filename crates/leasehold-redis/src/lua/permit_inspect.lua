
local now = now_ms()
local n = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local left = -2
if n > 0 and last[1] then
  left = tonumber(last[2]) - now
end
local fence = redis.call('GET', KEYS[2])
return {n, left, fence and tonumber(fence) or -1}
