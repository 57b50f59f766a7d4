
-- The server's clock, read once per script (TIME is the dearest call a short script makes): in
-- microseconds, and in milliseconds.
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end
local function now_ms()
  local _, ms = clock()
  return ms
end
-- The next fence of counter `f` at server time `us`, a hybrid logical clock: above the stored value
-- (so it rises while the counter lives) and at least the server's clock in microseconds, rounded
-- down to `granule` (so a counter lost with the data, or expired, is replaced by a larger one).
-- Kept `retention` ms after the last acquisition. The values stay below 2^53, exact in Lua's
-- doubles, and are written with %.0f, never in exponent form.
local function fence_at(f, us, granule, retention)
  us = us - us % granule
  local fence = tonumber(redis.call('GET', f) or '0') + 1
  if us > fence then
    fence = us
  end
  redis.call('SET', f, string.format('%.0f', fence), 'PX', retention)
  return fence
end
local function next_fence(f, granule, retention)
  return fence_at(f, (clock()), granule, retention)
end
-- The fence of a key that already holds our token (a resent or retried attempt whose first send
-- ran): the counter's value, or a new one if it expired meanwhile.
local function current_fence(f, retention)
  local cur = redis.call('GET', f)
  if cur then
    return tonumber(cur)
  end
  return next_fence(f, 1, retention)
end
-- The next fence of a lease on one server (one Cluster slot) at server time `us`: above the
-- high-water `w` (the last fence drawn there, kept `retention` ms after each draw), above the
-- key's own fence `f` (its live lease's, or a counter a 0.3 client left), and at least the clock
-- in µs. `f` is set to it for `keep` ms, the lease's life (false: left as it is), so a key keeps
-- nothing once its lease is over; the high-water alone carries the order from lease to lease.
local function draw_fence(f, w, us, keep, retention)
  local fence = tonumber(redis.call('GET', w) or '0') + 1
  local own = tonumber(redis.call('GET', f) or '0') + 1
  if own > fence then
    fence = own
  end
  if us > fence then
    fence = us
  end
  local text = string.format('%.0f', fence)
  redis.call('SET', w, text, 'PX', retention)
  if keep then
    redis.call('SET', f, text, 'PX', keep)
  end
  return fence
end
-- The fence of the lease a key holds for us (a resent or retried attempt whose first send ran),
-- kept `keep` ms from now with the lease; a new one if it is gone.
local function held_fence(f, w, keep, retention)
  local cur = redis.call('GET', f)
  if cur then
    redis.call('PEXPIRE', f, keep)
    return tonumber(cur)
  end
  return draw_fence(f, w, (clock()), keep, retention)
end
-- The first waiter whose heartbeat has not lapsed, dropping lapsed ones on the way.
local function live_head(q, h, now)
  while true do
    local first = redis.call('ZRANGE', q, 0, 0)[1]
    if not first then
      redis.call('DEL', q, h)
      return nil
    end
    if tonumber(redis.call('HGET', h, first) or '0') > now then
      return first
    end
    redis.call('ZREM', q, first)
    redis.call('HDEL', h, first, first .. '#t', first .. '#w')
  end
end
-- One wake-up signal for one waiter: its list never holds more than one, and expires.
local function wake(token, sig_prefix, sig_suffix, sig_ttl)
  local s = sig_prefix .. token .. sig_suffix
  redis.call('RPUSH', s, '1')
  redis.call('LTRIM', s, 0, 0)
  redis.call('PEXPIRE', s, sig_ttl)
end
-- Gives the free key `l` to the queue's first live waiter, unless that is `caller` (who is
-- taking it itself). A waiter that registered a grant (`#t`: its lease's TTL, `#w`: its wait's
-- end on this clock) gets the key at once: the lock set to its token with its TTL, a fence, and
-- the grant `g<fence>` on its signal list, where it is blocked in BLPOP; it leaves the queue. A
-- head whose wait has ended is dropped instead (it is giving up, and must never be left holding
-- a key), and the next one is tried. A head that takes no grant (a shared lock's waiter) is woken
-- to try for itself. Returns the head and whether it was granted; no head: nil.
local function hand_over(l, f, w, q, h, us, now, caller, sig_prefix, sig_suffix, sig_ttl, retention)
  while true do
    local head = live_head(q, h, now)
    if head == nil or head == caller then
      return head, false
    end
    -- HGET twice rather than HMGET: the README's ACL line grants the commands used so far.
    local ttl = redis.call('HGET', h, head .. '#t')
    if not ttl then
      wake(head, sig_prefix, sig_suffix, sig_ttl)
      return head, false
    end
    local wait_end = tonumber(redis.call('HGET', h, head .. '#w') or '0')
    redis.call('ZREM', q, head)
    redis.call('HDEL', h, head, head .. '#t', head .. '#w')
    if wait_end > now then
      redis.call('SET', l, head, 'PX', ttl)
      local fence = draw_fence(f, w, us, ttl, retention)
      local s = sig_prefix .. head .. sig_suffix
      redis.call('DEL', s)
      redis.call('RPUSH', s, 'g' .. string.format('%.0f', fence))
      redis.call('PEXPIRE', s, sig_ttl)
      if redis.call('ZCARD', q) == 0 then
        redis.call('DEL', q, h)
      end
      return head, true
    end
  end
end
