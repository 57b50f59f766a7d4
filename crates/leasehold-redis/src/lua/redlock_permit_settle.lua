
local S, T, E, X, Z = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local slot = redis.call('HGET', T, token)
if not slot then
  return 0
end
local now = now_ms()
local live = tonumber(redis.call('ZSCORE', E, token) or '0') > now
  and redis.call('HGET', S, slot) == token
if ttl > 0 and live then
  redis.call('ZADD', E, now + ttl, token)
  for _, k in ipairs({S, T, E, X}) do
    if redis.call('PTTL', k) < ttl then
      redis.call('PEXPIRE', k, ttl)
    end
  end
  if redis.call('EXISTS', Z) == 1 then
    redis.call('PEXPIRE', Z, redis.call('PTTL', E))
  end
  return tonumber(slot) + 1
end
if ttl == 0 or not live then
  if redis.call('HGET', S, slot) == token then
    redis.call('HDEL', S, slot)
    redis.call('ZREM', X, slot)
  end
  redis.call('HDEL', T, token)
  redis.call('ZREM', E, token)
  if redis.call('HLEN', S) == 0 then
    redis.call('DEL', Z)
  end
end
if live then
  return 1
end
return 0
