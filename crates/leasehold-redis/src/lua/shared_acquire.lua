
local l, f, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local us, now = clock()
-- GET gives false for a missing key: nil from here on, so `holder == nil` means free.
local holder = redis.call('GET', l) or nil
if holder == '#shared' then
  drop_expired_shares(r, rf, now)
  if redis.call('ZSCORE', r, token) then
    redis.call('ZADD', r, now + ttl, token)
    local fence = fence_at(f, us, 1, ARGV[8])
    redis.call('HSET', rf, token, string.format('%.0f', fence))
    fit_shares(l, r, rf, now)
    return {1, fence}
  end
