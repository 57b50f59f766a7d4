
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    return {1, held_fence(KEYS[2], KEYS[5], left, ARGV[2]), left}
  end
elseif v == '#shared' then
  local exp = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]) or '0')
  local now = now_ms()
  local fence = redis.call('HGET', KEYS[4], ARGV[1])
  if exp > now and fence then
    return {2, tonumber(fence), exp - now}
  end
end
return {0, 0, 0}
