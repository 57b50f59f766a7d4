
local l, f, q, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, mode = ARGV[1], ARGV[3]
local holder = redis.call('GET', l)
if redis.call('EXISTS', q) == 0 then
  if not holder then
    -- Free and nobody waits: a plain SET NX lock and its fence (see `draw_fence`), inline.
    redis.call('SET', l, token, 'PX', ARGV[2])
    local t = redis.call('TIME')
    local fence = tonumber(redis.call('GET', KEYS[5]) or '0') + 1
    local own = tonumber(redis.call('GET', f) or '0') + 1
    if own > fence then
      fence = own
    end
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if us > fence then
      fence = us
    end
    local text = string.format('%.0f', fence)
    redis.call('SET', KEYS[5], text, 'PX', ARGV[8])
    redis.call('SET', f, text, 'PX', ARGV[2])
    return {1, fence}
  end
  if holder ~= token and mode ~= 'wait' then
    return {0, redis.call('PTTL', l)}
  end
end
