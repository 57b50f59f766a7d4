
-- The check both promote scripts start with. Returns the reply when the token's share cannot
-- become the lock: `{-1, 0}` when the token holds nothing, `{0, pttl}` while another live share
-- is left. Otherwise nil, the new fence (the current one when the token holds the lock already:
-- a promote sent again) and the server's ms. With a high-water `w` (one server) the fence is
-- drawn from it and kept in `f` for `keep` ms; without (Redlock), from `f`, the key's counter.
local function promote_check(l, f, r, token, granule, retention, w, keep)
  local holder = redis.call('GET', l)
  local us, now = clock()
  if holder == token then
    if w then
      return nil, held_fence(f, w, keep, retention), now
    end
    return nil, current_fence(f, retention), now
  end
  if holder ~= '#shared' or tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
    return {-1, 0}
  end
  if redis.call('ZCOUNT', r, '(' .. now, '+inf') > 1 then
    return {0, redis.call('PTTL', l)}
  end
  if w then
    return nil, draw_fence(f, w, us, keep, retention), now
  end
  return nil, fence_at(f, us, granule, retention), now
end
