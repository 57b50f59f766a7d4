
local S, T, E, F, token = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local slot = redis.call('HGET', T, token)
if not slot or redis.call('HGET', S, slot) ~= token then
  return 0
end
local now = claim_now()
if tonumber(redis.call('ZSCORE', E, token) or '0') <= now then
  return 0
end
return claim_fence(F, ARGV[2], ARGV[3])
