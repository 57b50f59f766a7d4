local fence = tonumber(redis.call('GET', F) or '0') + 1
local want = tonumber(ARGV[2])
if want > fence then
  fence = want
end
redis.call('SET', F, string.format('%.0f', fence), 'PX', ARGV[3])
