
local l, f, r, rf, q, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local refused, fence, now = promote_check(l, f, r, token, 1, ARGV[3], KEYS[7], ttl)
if refused then
  return refused
end
local before = redis.call('PTTL', l)
-- No share is left behind: the lease's release and extend are the exclusive scripts' now.
redis.call('DEL', r, rf)
redis.call('SET', l, token, 'PX', ttl)
if before > ttl and redis.call('EXISTS', q) == 1 then
  local head = live_head(q, h, now)
  if head then
    wake(head, ARGV[4], ARGV[5], ARGV[6])
  end
end
return {1, fence}
