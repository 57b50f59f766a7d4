live_head(q, h, now)
local rank = redis.call('ZRANK', q, token) or 0
local theirs = redis.call('ZSCORE', q, holder)
if theirs and tonumber(theirs) < tonumber(redis.call('ZSCORE', q, token)) then
  rank = rank - 1
end
return {0, redis.call('PTTL', l), rank}
