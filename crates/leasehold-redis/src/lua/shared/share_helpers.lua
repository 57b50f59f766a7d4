
-- Drops the shares whose expiry (server ms) has passed.
local function drop_expired_shares(r, rf, now)
  local gone = redis.call('ZRANGEBYSCORE', r, '-inf', now)
  for i = 1, #gone do
    redis.call('HDEL', rf, gone[i])
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', r, '-inf', now)
  end
end
-- Makes the lock key and the shares' keys expire with the last share, or deletes them when none
-- is left. Returns the lock's PTTL before and after (0: freed).
local function fit_shares(l, r, rf, now)
  local before = redis.call('PTTL', l)
  local last = redis.call('ZRANGE', r, -1, -1, 'WITHSCORES')
  if not last[1] then
    redis.call('DEL', l, r, rf)
    return before, 0
  end
  local left = math.max(tonumber(last[2]) - now, 1)
  redis.call('PEXPIRE', l, left)
  redis.call('PEXPIRE', r, left)
  redis.call('PEXPIRE', rf, left)
  return before, left
end
