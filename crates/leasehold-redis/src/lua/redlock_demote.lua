
local l, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local holder = redis.call('GET', l)
local now = now_ms()
if holder == token then
  redis.call('DEL', r, rf)
  redis.call('SET', l, '#shared', 'PX', ttl)
  redis.call('HSET', rf, token, ARGV[3])
elseif holder ~= '#shared' or tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
  return 0
end
redis.call('ZREM', q, token)
redis.call('HDEL', h, token)
redis.call('ZADD', r, now + ttl, token)
fit_shares(l, r, rf, now)
return 1
