
local fence = redis.call('GET', KEYS[2])
return {redis.call('PTTL', KEYS[1]), fence and tonumber(fence) or -1, redis.call('ZCARD', KEYS[3])}
