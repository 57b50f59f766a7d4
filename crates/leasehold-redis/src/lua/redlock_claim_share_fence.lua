
local F, r, rf, token = KEYS[2], KEYS[3], KEYS[4], ARGV[1]
if redis.call('GET', KEYS[1]) ~= '#shared' or not redis.call('HGET', rf, token) then
  return 0
end
local now = claim_now()
if tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
  return 0
end
local fence = claim_fence(F, ARGV[2], ARGV[3])
redis.call('HSET', rf, token, string.format('%.0f', fence))
return fence
