
-- A `#shared` key `l` whose shares (`r`, share fences `rf`) all expired is freed. Returns whether
-- it was.
local function free_if_no_shares(l, r, rf)
  if redis.call('ZCARD', r) == 0 then
    redis.call('DEL', l, r, rf)
    return true
  end
  return false
end
