
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored and not string.match(stored, '^%d+$') then
  return redis.error_reply('ERR leasehold record: the stored fence is not a decimal number')
end
if ARGV[1] == 'get' then
  if not stored then
    return {}
  end
  local value = redis.call('HGET', KEYS[1], 'value') or ''
  return {stored, value, redis.call('HGET', KEYS[1], 'stamp') or '0'}
end
local fence = ARGV[2]
if stored and (#stored > #fence or (#stored == #fence and stored > fence)) then
  return {0, stored}
end
redis.call('HSET', KEYS[1], 'fence', fence, 'value', ARGV[3], 'stamp', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, fence}
