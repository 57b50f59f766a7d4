
local l, f, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local refused, fence = promote_check(l, f, r, token, tonumber(ARGV[3]), ARGV[4])
if refused then
  return refused
end
redis.call('DEL', r, rf)
redis.call('SET', l, token, 'PX', ttl)
return {1, fence}
