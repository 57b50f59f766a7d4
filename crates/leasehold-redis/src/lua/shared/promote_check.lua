local holder = redis.call('GET', l)
local us, now = clock()
local fence
if holder == token then
  fence = current_fence(f, retention)
elseif holder == '#shared' then
  if tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
    return {-1, 0}
  end
  if redis.call('ZCOUNT', r, '(' .. now, '+inf') > 1 then
    return {0, redis.call('PTTL', l)}
  end
  fence = fence_at(f, us, granule, retention)
else
  return {-1, 0}
end
