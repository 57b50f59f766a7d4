
-- A waiter's place in the FIFO queue: a refused `wait` attempt joins (or renews), a refused
-- `last` attempt leaves.
local function queue_place(q, h, token, mode, waiter_ttl, now)
  if mode == 'last' then
    redis.call('ZREM', q, token)
    redis.call('HDEL', h, token)
    if redis.call('ZCARD', q) == 0 then
      redis.call('DEL', q, h)
    end
  elseif mode == 'wait' then
    join_or_renew(q, h, token, now, waiter_ttl)
  end
end
