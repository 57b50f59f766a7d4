
-- A refused `wait` attempt's place in queue `q` (heartbeats `h`): it joins at the back, or renews
-- its heartbeat if already in; both keys live twice the waiter's TTL.
local function join_or_renew(q, h, token, now, waiter_ttl)
  if not redis.call('ZSCORE', q, token) then
    redis.call('ZADD', q, redis.call('HINCRBY', h, '#seq', 1), token)
  end
  redis.call('HSET', h, token, now + waiter_ttl)
  redis.call('PEXPIRE', q, 2 * waiter_ttl)
  redis.call('PEXPIRE', h, 2 * waiter_ttl)
end
