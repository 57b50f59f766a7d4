
local l, f, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local us, now = clock()
local held = gate(KEYS[7], now)
if held == -1 then
  return {-1, -1}
elseif held then
  return {0, held}
end
local holder = redis.call('GET', l)
if holder == '#shared' then
  drop_expired_shares(r, rf, now)
  local fence = redis.call('HGET', rf, token)
  if redis.call('ZSCORE', r, token) and fence then
    reach(KEYS[7], now, ttl, ARGV[4])
    redis.call('ZADD', r, now + ttl, token)
    fit_shares(l, r, rf, now)
    return {1, tonumber(fence)}
  end
  if free_if_no_shares(l, r, rf) then
    holder = nil
  end
end
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
