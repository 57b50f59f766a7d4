
local S, T, E, F = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, permits, hint = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local us, now = clock()
local held = gate(KEYS[5], now)
if held == -1 then
  return {-1, -1, -1}
elseif held then
  return {0, held, -1}
end
local X = KEYS[6]
local gone = redis.call('ZRANGEBYSCORE', E, '-inf', now)
for i = 1, #gone do
  local slot = redis.call('HGET', T, gone[i])
  if slot and redis.call('HGET', S, slot) == gone[i] then
    redis.call('HDEL', S, slot)
    redis.call('ZREM', X, slot)
  end
  redis.call('HDEL', T, gone[i])
end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', E, '-inf', now)
end
local Z = KEYS[7]
if redis.call('HLEN', S) > 0 then
  local size = tonumber(redis.call('GET', Z) or '0')
  if size > 0 and size ~= permits then
    return {-4, size, -1}
  end
end
local function rebuild()
  redis.call('DEL', X)
  local held = redis.call('HKEYS', S)
  for i = 1, #held do
    redis.call('ZADD', X, tonumber(held[i]), held[i])
  end
end
local function lowest_free()
  local lo, hi = 0, redis.call('ZCARD', X)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local at = redis.call('ZRANGE', X, mid, mid, 'WITHSCORES')
    if tonumber(at[2]) > mid then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end
local function stretch()
  for _, k in ipairs({S, T, E, X}) do
    if redis.call('PTTL', k) < ttl then
      redis.call('PEXPIRE', k, ttl)
    end
  end
  redis.call('SET', Z, permits, 'PX', math.max(redis.call('PTTL', E), ttl))
end
local mine = redis.call('HGET', T, token)
if mine then
  reach(KEYS[5], now, ttl, ARGV[6])
  redis.call('ZADD', E, now + ttl, token)
  stretch()
  return {1, fence_at(F, us, tonumber(ARGV[5]), ARGV[6]), tonumber(mine)}
end
local slot = nil
if hint >= 0 then
  if hint < permits and redis.call('HEXISTS', S, hint) == 0 then
    slot = hint
  end
elseif redis.call('HLEN', S) < permits then
  -- Fewer than `permits` slots are taken, so the lowest free one is below `permits`.
  if redis.call('ZCARD', X) ~= redis.call('HLEN', S) then
    rebuild()
  end
  slot = lowest_free()
  if redis.call('HEXISTS', S, slot) == 1 then
    rebuild()
    slot = lowest_free()
  end
end
if not slot then
  local first = redis.call('ZRANGE', E, 0, 0, 'WITHSCORES')
  if first[1] then
    return {0, math.max(tonumber(first[2]) - now, 0), -1}
  end
  return {0, -3, -1}
end
reach(KEYS[5], now, ttl, ARGV[6])
redis.call('HSET', S, slot, token)
redis.call('ZADD', X, slot, slot)
redis.call('HSET', T, token, slot)
redis.call('ZADD', E, now + ttl, token)
stretch()
return {1, fence_at(F, us, tonumber(ARGV[5]), ARGV[6]), slot}
