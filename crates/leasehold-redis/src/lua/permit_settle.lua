
local s, q, h, z = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local exp = tonumber(redis.call('ZSCORE', s, token) or '0')
redis.call('ZREMRANGEBYSCORE', s, '-inf', now)
if exp <= now then
  return 0
end
if ttl > 0 then
  redis.call('ZADD', s, now + ttl, token)
  if redis.call('PTTL', s) < ttl then
    redis.call('PEXPIRE', s, ttl)
  end
  if redis.call('EXISTS', z) == 1 then
    redis.call('PEXPIRE', z, redis.call('PTTL', s))
  end
  if not above_high_water(KEYS[5], KEYS[6]) then
    redis.call('PEXPIRE', KEYS[5], redis.call('PTTL', s))
  end
end
if (ttl == 0 or now + ttl < exp) and redis.call('EXISTS', q) == 1 then
  if ttl == 0 then
    redis.call('ZREM', s, token)
  end
  local head = live_head(q, h, now)
  if head then
    wake(head, ARGV[3], ARGV[4], ARGV[5])
  end
elseif ttl == 0 then
  redis.call('ZREM', s, token)
end
if ttl == 0 and redis.call('EXISTS', s) == 0 then
  redis.call('DEL', z)
  if not above_high_water(KEYS[5], KEYS[6]) then
    redis.call('DEL', KEYS[5])
  end
end
return 1
