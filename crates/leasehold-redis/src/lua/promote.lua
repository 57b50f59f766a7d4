
local l, f, q, h, r = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local holder = redis.call('GET', l)
local us, now = clock()
local fence
if holder == token then
  -- Ours alone already: a promote sent again after its first send ran.
  fence = current_fence(f, ARGV[3])
elseif holder == '#shared' then
  if tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
    return {-1, 0}
  end
  if redis.call('ZCOUNT', r, '(' .. now, '+inf') > 1 then
    return {0, redis.call('PTTL', l)}
  end
  fence = fence_at(f, us, 1, ARGV[3])
else
  return {-1, 0}
end
local before = redis.call('PTTL', l)
-- No share is left behind: the lease's release and extend are the exclusive scripts' now.
redis.call('DEL', r, KEYS[6])
redis.call('SET', l, token, 'PX', ttl)
if before > ttl and redis.call('EXISTS', q) == 1 then
  local head = live_head(q, h, now)
  if head then
    wake(head, ARGV[4], ARGV[5], ARGV[6])
  end
end
return {1, fence}
