local F = KEYS[2]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
