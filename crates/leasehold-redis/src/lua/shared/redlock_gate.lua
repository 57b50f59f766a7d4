
-- nil: the node may grant. -1: it has no stamp (it is new, or lost its data): it grants nothing
-- until the client has stamped it. Otherwise the ms until it may grant again.
local function gate(g, now)
  if not redis.call('HGET', g, 'horizon') then
    return -1
  end
  local hold = tonumber(redis.call('HGET', g, 'until') or '0') - now
  if hold > 0 then
    return hold
  end
  return nil
end
-- Before granting or extending a lease for `ttl` ms from server ms `now`: the horizon covers it.
local function reach(g, now, ttl, retention)
  local ends = now + ttl
  if tonumber(redis.call('HGET', g, 'horizon') or '0') < ends then
    redis.call('HSET', g, 'horizon', string.format('%.0f', ends))
    redis.call('PEXPIRE', g, string.format('%.0f', ttl + tonumber(retention)))
  end
end
