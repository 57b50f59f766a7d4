local F, r, rf, token = KEYS[2], KEYS[3], KEYS[4], ARGV[1]
if redis.call('GET', KEYS[1]) ~= '#shared' or not redis.call('HGET', rf, token) then
  return 0
end
