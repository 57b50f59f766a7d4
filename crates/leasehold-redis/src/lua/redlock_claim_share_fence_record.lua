redis.call('HSET', rf, token, string.format('%.0f', fence))
return fence
