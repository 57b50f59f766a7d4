redis.call('DEL', r, rf)
redis.call('SET', l, token, 'PX', ttl)
return {1, fence}
