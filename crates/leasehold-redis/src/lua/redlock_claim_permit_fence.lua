local S, T, E, F, token = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local slot = redis.call('HGET', T, token)
if not slot or redis.call('HGET', S, slot) ~= token then
  return 0
end
