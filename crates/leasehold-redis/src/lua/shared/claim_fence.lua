
-- Draws counter `F`'s next value, at least `want`, and keeps it `retention` ms. A counter that
-- already reached `want` answers a value above it, never `want` itself (see `redlock/fence.rs`).
local function claim_fence(F, want, retention)
  local fence = tonumber(redis.call('GET', F) or '0') + 1
  want = tonumber(want)
  if want > fence then
    fence = want
  end
  redis.call('SET', F, string.format('%.0f', fence), 'PX', retention)
  return fence
end
