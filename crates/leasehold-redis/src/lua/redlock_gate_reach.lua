
if not redis.call('HGET', KEYS[1], 'horizon') then
  return 0
end
reach(KEYS[1], now_ms(), tonumber(ARGV[1]), ARGV[2])
return 1
