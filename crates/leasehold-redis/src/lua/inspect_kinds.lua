
local v = redis.call('GET', KEYS[1])
local fence = redis.call('GET', KEYS[2])
fence = fence and tonumber(fence) or -1
local pttl = redis.call('PTTL', KEYS[1])
local waiters = redis.call('ZCARD', KEYS[3])
if v == '#shared' then
  local n = redis.call('ZCOUNT', KEYS[4], '(' .. now_ms(), '+inf')
  return {pttl, fence, waiters, n, 1}
elseif v then
  return {pttl, fence, waiters, 1, 0}
end
return {pttl, fence, waiters, 0, 0}
