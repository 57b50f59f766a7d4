
local l, f, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local us, now = clock()
-- GET gives false for a missing key: nil from here on, so `holder == nil` means free.
local holder = redis.call('GET', l) or nil
if holder == '#shared' then
  drop_expired_shares(r, rf, now)
  if redis.call('ZSCORE', r, token) then
    redis.call('ZADD', r, now + ttl, token)
    local fence = draw_fence(f, KEYS[7], us, ttl, ARGV[8])
    redis.call('HSET', rf, token, string.format('%.0f', fence))
    local _, left = fit_shares(l, r, rf, now)
    redis.call('PEXPIRE', f, left)
    return {1, fence}
  end
  if free_if_no_shares(l, r, rf) then
    holder = nil
  end
end
local head = nil
if redis.call('EXISTS', q) == 1 then
  head = live_head(q, h, now)
end
if holder == nil or holder == '#shared' then
  if head == nil or head == token then
    if holder == nil then
      redis.call('DEL', r, rf)
      redis.call('SET', l, '#shared', 'PX', ttl)
    end
    redis.call('ZADD', r, now + ttl, token)
    local fence = draw_fence(f, KEYS[7], us, ttl, ARGV[8])
    redis.call('HSET', rf, token, string.format('%.0f', fence))
    local _, left = fit_shares(l, r, rf, now)
    redis.call('PEXPIRE', f, left)
    if head then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token)
      local after = live_head(q, h, now)
      if after then
        wake(after, ARGV[5], ARGV[6], ARGV[7])
      end
    end
    return {1, fence}
  end
  if holder == nil then
    wake(head, ARGV[5], ARGV[6], ARGV[7])
  end
end
queue_place(q, h, token, mode, tonumber(ARGV[4]), now)
if holder then
  return {0, redis.call('PTTL', l)}
end
return {0, -3}
