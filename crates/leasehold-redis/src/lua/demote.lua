
local l, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local holder = redis.call('GET', l)
local now = now_ms()
if holder == token then
  redis.call('DEL', r, rf)
  redis.call('SET', l, '#shared', 'PX', ttl)
elseif holder ~= '#shared' or tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
  return 0
end
-- (A `#shared` key with our live share: a demote sent again after its first send ran.)
redis.call('ZADD', r, now + ttl, token)
redis.call('HSET', rf, token, ARGV[3])
fit_shares(l, r, rf, now)
if redis.call('EXISTS', q) == 1 then
  local head = live_head(q, h, now)
  if head then
    wake(head, ARGV[4], ARGV[5], ARGV[6])
  end
end
return 1
