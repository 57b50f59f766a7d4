if holder and holder ~= '#shared' then
  return {0, redis.call('PTTL', l)}
end
if redis.call('EXISTS', q) == 1 and live_head(q, h, now) then
  if holder then
    return {0, redis.call('PTTL', l)}
  end
  return {0, -3}
end
if not holder then
  redis.call('DEL', r, rf)
  redis.call('SET', l, '#shared', 'PX', ttl)
end
reach(KEYS[7], now, ttl, ARGV[4])
redis.call('ZADD', r, now + ttl, token)
local fence = fence_at(f, us, tonumber(ARGV[3]), ARGV[4])
redis.call('HSET', rf, token, string.format('%.0f', fence))
fit_shares(l, r, rf, now)
return {1, fence}
