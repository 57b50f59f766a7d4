
local horizon = redis.call('HGET', KEYS[1], 'horizon')
if not horizon then
  return {0, 0}
end
return {1, math.max(tonumber(horizon) - now_ms(), 0)}
