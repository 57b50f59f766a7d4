
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local before = redis.call('PTTL', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[4], ARGV[2])
if before > tonumber(ARGV[2]) and redis.call('EXISTS', KEYS[2]) == 1 then
  local head = live_head(KEYS[2], KEYS[3], now_ms())
  if head then
    wake(head, ARGV[3], ARGV[4], ARGV[5])
  end
end
return 1
