
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[4])
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 1
end
