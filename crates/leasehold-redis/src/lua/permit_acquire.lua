
local s, f, q, h, z = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl, mode, permits = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[9])
local us, now = clock()
redis.call('ZREMRANGEBYSCORE', s, '-inf', now)
local count = redis.call('ZCARD', s)
if count > 0 then
  local size = tonumber(redis.call('GET', z) or '0')
  if size > 0 and size ~= permits then
    if redis.call('ZSCORE', q, token) then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token)
    end
    return {-4, size}
  end
end
if redis.call('ZSCORE', s, token) then
  redis.call('ZADD', s, now + ttl, token)
  if redis.call('PTTL', s) < ttl then
    redis.call('PEXPIRE', s, ttl)
  end
  redis.call('SET', z, permits, 'PX', math.max(redis.call('PTTL', s), ttl))
  return {1, draw_fence(f, KEYS[6], us, redis.call('PTTL', s), ARGV[8])}
end
local head = nil
if redis.call('EXISTS', q) == 1 then
  head = live_head(q, h, now)
end
if count < permits then
  if head == nil or head == token then
    redis.call('ZADD', s, now + ttl, token)
    if redis.call('PTTL', s) < ttl then
      redis.call('PEXPIRE', s, ttl)
    end
    redis.call('SET', z, permits, 'PX', math.max(redis.call('PTTL', s), ttl))
    if head then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token)
      local after = live_head(q, h, now)
      if after and count + 1 < permits then
        wake(after, ARGV[5], ARGV[6], ARGV[7])
      end
    end
    return {1, draw_fence(f, KEYS[6], us, redis.call('PTTL', s), ARGV[8])}
  end
  wake(head, ARGV[5], ARGV[6], ARGV[7])
end
queue_place(q, h, token, mode, tonumber(ARGV[4]), now)
if count >= permits then
  local first = redis.call('ZRANGE', s, 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2]) - now, 0)}
end
return {0, -3}
