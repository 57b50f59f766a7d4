
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return claim_fence(KEYS[2], ARGV[2], ARGV[3])
