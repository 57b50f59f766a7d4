
local fence = ARGV[2]
if not string.match(fence, '^[1-9]%d*$') or #fence > 20
    or (#fence == 20 and fence > '18446744073709551615') then
  return redis.error_reply('ERR leasehold fence gate: the fence must be a decimal number from 1 to 2^64-1')
end
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored then
  if not string.match(stored, '^[1-9]%d*$') then
    return redis.error_reply('ERR leasehold fence gate: the stored fence is not a decimal number')
  end
  if #stored > #fence or (#stored == #fence and stored > fence) then
    return {0, stored}
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'fence', fence)
return {1, fence}
