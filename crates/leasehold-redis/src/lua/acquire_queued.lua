
if holder == token then
  redis.call('PEXPIRE', l, ARGV[2])
  return {1, held_fence(f, KEYS[5], ARGV[2], ARGV[8])}
end
local us, now = clock()
if not holder then
  local head, granted = hand_over(l, f, KEYS[5], q, h, us, now, token, ARGV[5], ARGV[6], ARGV[7], ARGV[8])
  if head == nil or head == token then
    redis.call('SET', l, token, 'PX', ARGV[2])
    if head then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token, token .. '#t', token .. '#w')
      live_head(q, h, now)
    end
    return {1, draw_fence(f, KEYS[5], us, ARGV[2], ARGV[8])}
  end
  if granted then
    holder = head
  end
end
if mode == 'last' then
  redis.call('ZREM', q, token)
  redis.call('HDEL', h, token, token .. '#t', token .. '#w')
  if redis.call('ZCARD', q) == 0 then
    redis.call('DEL', q, h)
  end
elseif mode == 'wait' then
  local waiter_ttl = tonumber(ARGV[4])
  if not redis.call('ZSCORE', q, token) then
    redis.call('ZADD', q, redis.call('HINCRBY', h, '#seq', 1), token)
    -- A grant left from an earlier turn (the waiter had stopped listening, and that lease has
    -- ended since) must not be taken for a new one.
    redis.call('DEL', ARGV[5] .. token .. ARGV[6])
  end
  local grant_within = tonumber(ARGV[9] or '0')
  if grant_within > 0 then
    redis.call('HSET', h, token, now + waiter_ttl, token .. '#t', ARGV[2], token .. '#w',
      now + grant_within)
  else
    -- Takes no grant (its wait is about over, or replicas must confirm each acquire): woken.
    redis.call('HSET', h, token, now + waiter_ttl)
    redis.call('HDEL', h, token .. '#t', token .. '#w')
  end
  redis.call('PEXPIRE', q, 2 * waiter_ttl)
  redis.call('PEXPIRE', h, 2 * waiter_ttl)
end
if holder then
  return {0, redis.call('PTTL', l)}
end
return {0, -3}
