
if redis.call('HGET', KEYS[1], 'horizon') then
  return 0
end
local hold = tonumber(ARGV[1])
local at = string.format('%.0f', now_ms() + hold)
redis.call('HSET', KEYS[1], 'horizon', at)
redis.call('HSET', KEYS[1], 'until', at)
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', hold + tonumber(ARGV[2])))
return 1
