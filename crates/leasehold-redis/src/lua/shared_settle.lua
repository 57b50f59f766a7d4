
local l, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl = ARGV[1], tonumber(ARGV[2])
if redis.call('GET', l) ~= '#shared' then
  return 0
end
local now = now_ms()
local ours = tonumber(redis.call('ZSCORE', r, token) or '0') > now
if ours then
  if ttl > 0 then
    redis.call('ZADD', r, now + ttl, token)
  else
    redis.call('ZREM', r, token)
    redis.call('HDEL', rf, token)
  end
end
drop_expired_shares(r, rf, now)
local before, left = fit_shares(l, r, rf, now)
if KEYS[6] and not above_high_water(KEYS[6], KEYS[7]) then
  if left > 0 then
    redis.call('PEXPIRE', KEYS[6], left)
  else
    redis.call('DEL', KEYS[6])
  end
end
if left < before and redis.call('EXISTS', q) == 1 then
  local head = live_head(q, h, now)
  if head then
    wake(head, ARGV[3], ARGV[4], ARGV[5])
  end
end
if ours then
  return 1
end
return 0
