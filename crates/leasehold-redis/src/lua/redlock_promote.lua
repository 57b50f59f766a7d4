
local l, f, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local holder = redis.call('GET', l)
local us, now = clock()
local fence
if holder == token then
  fence = current_fence(f, ARGV[4])
elseif holder == '#shared' then
  if tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
    return {-1, 0}
  end
  if redis.call('ZCOUNT', r, '(' .. now, '+inf') > 1 then
    return {0, redis.call('PTTL', l)}
  end
  fence = fence_at(f, us, tonumber(ARGV[3]), ARGV[4])
else
  return {-1, 0}
end
redis.call('DEL', r, rf)
redis.call('SET', l, token, 'PX', ttl)
return {1, fence}
