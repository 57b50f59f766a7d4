
local l, f, q, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, mode = ARGV[1], ARGV[3]
local us, now = clock()
local held = gate(KEYS[5], now)
if held == -1 then
  return {-1, -1, -1}
elseif held then
  return {0, held, -1}
end
local holder = redis.call('GET', l)
if holder == token then
  reach(KEYS[5], now, tonumber(ARGV[2]), ARGV[6])
  redis.call('PEXPIRE', l, ARGV[2])
  return {1, current_fence(f, ARGV[6]), 0}
end
if not holder then
  reach(KEYS[5], now, tonumber(ARGV[2]), ARGV[6])
  redis.call('SET', l, token, 'PX', ARGV[2])
  return {1, fence_at(f, us, tonumber(ARGV[5]), ARGV[6]), 0}
end
if mode == 'last' then
  redis.call('ZREM', q, token)
  redis.call('HDEL', h, token)
end
if mode ~= 'wait' then
  return {0, redis.call('PTTL', l), -1}
end
join_or_renew(q, h, token, now, tonumber(ARGV[4]))
live_head(q, h, now)
local rank = redis.call('ZRANK', q, token) or 0
local theirs = redis.call('ZSCORE', q, holder)
if theirs and tonumber(theirs) < tonumber(redis.call('ZSCORE', q, token)) then
  rank = rank - 1
end
return {0, redis.call('PTTL', l), rank}
