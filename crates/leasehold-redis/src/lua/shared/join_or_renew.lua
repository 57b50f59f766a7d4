if not redis.call('ZSCORE', q, token) then
  redis.call('ZADD', q, redis.call('HINCRBY', h, '#seq', 1), token)
end
redis.call('HSET', h, token, now + waiter_ttl)
redis.call('PEXPIRE', q, 2 * waiter_ttl)
redis.call('PEXPIRE', h, 2 * waiter_ttl)
