
local held = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[4], KEYS[5])
if held == 1 and redis.call('EXISTS', KEYS[2]) == 1 then
  local head = live_head(KEYS[2], KEYS[3], now_ms())
  if head then
    wake(head, ARGV[1], ARGV[2], ARGV[3])
  end
end
return held
