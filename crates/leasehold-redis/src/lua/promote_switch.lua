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
