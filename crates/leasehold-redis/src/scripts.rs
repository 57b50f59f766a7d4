//! The Lua scripts that make each lease operation one atomic round trip. Keys and tokens travel
//! only as KEYS/ARGV, never inside the script text, so the text (and its SHA1) is fixed and user
//! input can never change what runs. `redis::Script` hashes each text once, calls it with EVALSHA,
//! and loads it again when the server answers NOSCRIPT (after a restart or `SCRIPT FLUSH`).
//!
//! Waiting is first come, first served: a waiting `acquire` enters the key's queue (a sorted set of
//! tokens by arrival, plus a hash of each waiter's heartbeat deadline on the server's clock, and
//! for an exclusive waiter its lease's TTL and its wait's end), and a free key goes only to the
//! queue's head. An exclusive lock is *handed over*: whatever frees it with someone queued (a
//! release, an expiry noticed by another waiter's attempt) sets the key to the head's token with
//! the head's TTL and fence, and pushes the grant onto the head's own list, on which that waiter
//! blocks in `BLPOP` — it wakes holding the lease, one message after the release. A head whose
//! wait has ended is dropped rather than granted. Shared locks and semaphores keep the wake-up:
//! one signal onto the head's list, and the head runs its acquire again. Waiters that stop
//! sending heartbeats (a crashed process) are dropped from the head of the queue. With nobody
//! queued, acquire and release return before the queue's helpers are even made: the calls of a
//! plain SET NX lock plus the fence, and one clock read.

use redis::Script;
use std::sync::LazyLock;

/// Shared by the scripts below. A waiter's signal list is `ARGV[sig_prefix] .. token ..
/// ARGV[sig_suffix]`: the name is built from arguments, never from script text.
macro_rules! helpers {
    () => {
        r"
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
local function hand_over(l, f, q, h, us, now, caller, sig_prefix, sig_suffix, sig_ttl, retention)
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
      local fence = fence_at(f, us, 1, retention)
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
"
    };
}

macro_rules! with_helpers {
    ($body:expr) => {
        concat!(helpers!(), $body)
    };
}

/// Redlock's guard against a node that lost its data (see `redlock/gate.rs`). The node's stamp
/// `g` (a hash) holds `horizon`, the server ms until which a lease granted or extended here may
/// live, and `until`, before which this node grants nothing. It expires a fence retention after
/// its horizon, as a key's fence counter does after its last lease.
macro_rules! redlock_gate {
    () => {
        r"
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
"
    };
}

macro_rules! with_gate {
    ($body:expr) => {
        with_helpers!(concat!(redlock_gate!(), $body))
    };
}

/// A script whose common case returns before the helpers: Lua makes a closure for each `local
/// function` it runs through, every call, so the fast path (nobody queued) skips that cost.
macro_rules! fast_path_then_helpers {
    ($fast:expr, $body:expr) => {
        concat!($fast, helpers!(), $body)
    };
}

/// KEYS: lock, fence, queue, heartbeats. ARGV: token, ttl ms, mode (`try`, `wait` or `last`),
/// waiter ttl ms, signal prefix, signal suffix, signal ttl ms, fence retention ms, and in `wait`
/// mode how many ms from now the caller still takes a grant (its wait's end less a margin; 0:
/// none, wake it instead).
///
/// Returns `{1, fence}` when taken; `{0, pttl}` when someone holds the key (so a waiter learns in
/// the same round trip how long it may block), `-1` meaning no expiry; `{0, -3}` when the key is
/// free but reserved for the queue's head. In `wait` mode a refused caller joins the queue (or,
/// already in it, renews its heartbeat), registering its TTL and its wait's end for a grant (see
/// `hand_over`); in `last` mode (a wait's final attempt) it leaves the queue. A free key with
/// someone else at the head is handed over to that head (the caller then finds it held).
///
/// A key already holding this very token counts as taken with the current fence, and its expiry is
/// reset to the new TTL (the client's deadline is counted from this send): the client may resend
/// the script after a connection dropped mid-call, and the first send may have run; and a waiter
/// that stopped listening may have been granted the key meanwhile.
///
/// The fence is `max(stored + 1, server µs)`: see `fence_at` and the crate docs. With nobody
/// queued, the script makes the calls of a plain SET NX lock and its fence, and reads the clock
/// once.
const ACQUIRE: &str = fast_path_then_helpers!(
    r"
local l, f, q, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, mode = ARGV[1], ARGV[3]
local holder = redis.call('GET', l)
if redis.call('EXISTS', q) == 0 then
  if not holder then
    -- Free and nobody waits: a plain SET NX lock and its fence (see `fence_at`), inline.
    redis.call('SET', l, token, 'PX', ARGV[2])
    local t = redis.call('TIME')
    local fence = tonumber(redis.call('GET', f) or '0') + 1
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if us > fence then
      fence = us
    end
    redis.call('SET', f, string.format('%.0f', fence), 'PX', ARGV[8])
    return {1, fence}
  end
  if holder ~= token and mode ~= 'wait' then
    return {0, redis.call('PTTL', l)}
  end
end
",
    r"
if holder == token then
  redis.call('PEXPIRE', l, ARGV[2])
  return {1, current_fence(f, ARGV[8])}
end
local us, now = clock()
if not holder then
  local head, granted = hand_over(l, f, q, h, us, now, token, ARGV[5], ARGV[6], ARGV[7], ARGV[8])
  if head == nil or head == token then
    redis.call('SET', l, token, 'PX', ARGV[2])
    if head then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token, token .. '#t', token .. '#w')
      live_head(q, h, now)
    end
    return {1, fence_at(f, us, 1, ARGV[8])}
  end
  if granted then
    holder = head
  end
end
if mode == 'last' then
  redis.call('ZREM', q, token)
  redis.call('HDEL', h, token, token .. '#t', token .. '#w')
  if redis.call('ZCARD', q) == 0 then
    redis.call('DEL', q, h)
  end
elseif mode == 'wait' then
  local waiter_ttl = tonumber(ARGV[4])
  if not redis.call('ZSCORE', q, token) then
    redis.call('ZADD', q, redis.call('HINCRBY', h, '#seq', 1), token)
    -- A grant left from an earlier turn (the waiter had stopped listening, and that lease has
    -- ended since) must not be taken for a new one.
    redis.call('DEL', ARGV[5] .. token .. ARGV[6])
  end
  local grant_within = tonumber(ARGV[9] or '0')
  if grant_within > 0 then
    redis.call('HSET', h, token, now + waiter_ttl, token .. '#t', ARGV[2], token .. '#w',
      now + grant_within)
  else
    -- Takes no grant (its wait is about over, or replicas must confirm each acquire): woken.
    redis.call('HSET', h, token, now + waiter_ttl)
    redis.call('HDEL', h, token .. '#t', token .. '#w')
  end
  redis.call('PEXPIRE', q, 2 * waiter_ttl)
  redis.call('PEXPIRE', h, 2 * waiter_ttl)
end
if holder then
  return {0, redis.call('PTTL', l)}
end
return {0, -3}
"
);

/// KEYS: lock, queue, heartbeats, fence. ARGV: token, signal prefix, signal suffix, signal ttl ms,
/// fence retention ms. Compare-and-delete; with someone queued, the key is handed over to the
/// queue's head (see `hand_over`). Nobody queued: three calls, no clock.
const RELEASE: &str = fast_path_then_helpers!(
    r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 1
end
",
    r"
local us, now = clock()
hand_over(KEYS[1], KEYS[4], KEYS[2], KEYS[3], us, now, false, ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1
"
);

/// KEYS: lock, queue, heartbeats. ARGV: token, ttl ms, signal prefix, signal suffix, signal ttl ms.
/// Compare-and-PEXPIRE. A shortened lease also wakes the head, which is blocked for the old, longer
/// remaining time and must learn the new one.
const EXTEND: &str = with_helpers!(
    r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local before = redis.call('PTTL', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if before > tonumber(ARGV[2]) and redis.call('EXISTS', KEYS[2]) == 1 then
  local head = live_head(KEYS[2], KEYS[3], now_ms())
  if head then
    wake(head, ARGV[3], ARGV[4], ARGV[5])
  end
end
return 1
"
);

/// KEYS: lock, fence, queue. Returns `{pttl, last fence or -1, waiters}` read atomically.
const INSPECT: &str = r"
local fence = redis.call('GET', KEYS[2])
return {redis.call('PTTL', KEYS[1]), fence and tonumber(fence) or -1, redis.call('ZCARD', KEYS[3])}
";

/// The end of Redlock's claim scripts, once they found that the token (ARGV[1]) holds the key on
/// this node: draws the counter `F`'s next value, at least the fence asked for (ARGV[2]), keeps it
/// ARGV[3] ms, and leaves it in `fence`. A node whose counter already reached the fence asked for
/// answers a value above it, never the fence itself: that value was drawn here for someone else,
/// and raising a counter to it would let this node count for two holders (see `redlock/fence.rs`).
macro_rules! claim_fence {
    () => {
        r"local fence = tonumber(redis.call('GET', F) or '0') + 1
local want = tonumber(ARGV[2])
if want > fence then
  fence = want
end
redis.call('SET', F, string.format('%.0f', fence), 'PX', ARGV[3])
"
    };
}

/// The server's clock in ms, as `now`, for the claim scripts that check an expiry.
macro_rules! claim_now {
    () => {
        r"local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"
    };
}

/// Redlock's claim of a fence for an exclusive lock on one node. KEYS: lock, fence. ARGV: token,
/// a fence, fence retention ms. While the lock holds the token, draws `max(stored + 1, fence)`
/// from the counter and returns it; otherwise returns 0 and draws nothing, so that a node draws
/// only for the token holding the key there (see `redlock/fence.rs`).
const REDLOCK_CLAIM_FENCE: &str = concat!(
    r"local F = KEYS[2]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
",
    claim_fence!(),
    "return fence\n"
);

/// [`REDLOCK_CLAIM_FENCE`] for a share. KEYS: lock, fence, shares, share fences. ARGV: as there.
/// Draws from the lock's counter while the token holds an unexpired share, and records the value
/// as the share's fence, which a retried acquire and a restore report.
const REDLOCK_CLAIM_SHARE_FENCE: &str = concat!(
    r"local F, r, rf, token = KEYS[2], KEYS[3], KEYS[4], ARGV[1]
if redis.call('GET', KEYS[1]) ~= '#shared' or not redis.call('HGET', rf, token) then
  return 0
end
",
    claim_now!(),
    r"if tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
  return 0
end
",
    claim_fence!(),
    r"redis.call('HSET', rf, token, string.format('%.0f', fence))
return fence
"
);

/// [`REDLOCK_CLAIM_FENCE`] for a permit. KEYS: slots, slot of, expiries, fence. ARGV: as there.
/// Draws from the semaphore's counter while the token holds an unexpired slot.
const REDLOCK_CLAIM_PERMIT_FENCE: &str = concat!(
    r"local S, T, E, F, token = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local slot = redis.call('HGET', T, token)
if not slot or redis.call('HGET', S, slot) ~= token then
  return 0
end
",
    claim_now!(),
    r"if tonumber(redis.call('ZSCORE', E, token) or '0') <= now then
  return 0
end
",
    claim_fence!(),
    "return fence\n"
);

/// A refused `wait` attempt's place in queue `q` (heartbeats `h`): it joins at the back, or
/// renews its heartbeat if already in; both keys live twice the waiter's TTL. Needs `token`,
/// `now` and `waiter_ttl`.
macro_rules! join_or_renew {
    () => {
        r"if not redis.call('ZSCORE', q, token) then
  redis.call('ZADD', q, redis.call('HINCRBY', h, '#seq', 1), token)
end
redis.call('HSET', h, token, now + waiter_ttl)
redis.call('PEXPIRE', q, 2 * waiter_ttl)
redis.call('PEXPIRE', h, 2 * waiter_ttl)
"
    };
}

/// Redlock's acquire on one node. KEYS: lock, fence, Redlock queue, Redlock heartbeats, the
/// node's stamp. ARGV: token, ttl ms, mode (`try`, `wait` or `last`), waiter ttl ms, fence
/// granule µs, fence retention ms.
///
/// A node without its stamp answers `{-1, -1, -1}`, one that may not grant yet `{0, ms, -1}`
/// (see `redlock/gate.rs`); a grant first extends the stamp's horizon to the lease's end.
///
/// Like [`ACQUIRE`] for a free key or our own token (`{1, fence, 0}`; our own token's expiry is
/// reset to the new TTL, since the client counts this round's validity from now), except that the
/// clock part of the fence is rounded to a granule so that the nodes usually agree (see
/// `redlock/fence.rs`), and the queue never reserves
/// a key: with N nodes queueing independently, their heads can differ, and reserving would let a
/// key go to nobody. The queue only ranks: a refused `wait` attempt joins it (or renews its
/// heartbeat there) and learns how many live waiters came before it, not counting the holder
/// (`{0, pttl, rank}`), so the client can poll faster the nearer it is to the front. A waiter keeps
/// its place through a round that failed on other nodes; it leaves on its final release (or its
/// `last` attempt), or lapses with its heartbeat. `try` never queues (`rank` -1).
const REDLOCK_ACQUIRE: &str = with_gate!(concat!(
    r"
local l, f, q, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, mode = ARGV[1], ARGV[3]
local us, now = clock()
local held = gate(KEYS[5], now)
if held == -1 then
  return {-1, -1, -1}
elseif held then
  return {0, held, -1}
end
local holder = redis.call('GET', l)
if holder == token then
  reach(KEYS[5], now, tonumber(ARGV[2]), ARGV[6])
  redis.call('PEXPIRE', l, ARGV[2])
  return {1, current_fence(f, ARGV[6]), 0}
end
if not holder then
  reach(KEYS[5], now, tonumber(ARGV[2]), ARGV[6])
  redis.call('SET', l, token, 'PX', ARGV[2])
  return {1, fence_at(f, us, tonumber(ARGV[5]), ARGV[6]), 0}
end
if mode == 'last' then
  redis.call('ZREM', q, token)
  redis.call('HDEL', h, token)
end
if mode ~= 'wait' then
  return {0, redis.call('PTTL', l), -1}
end
local waiter_ttl = tonumber(ARGV[4])
",
    join_or_renew!(),
    r"live_head(q, h, now)
local rank = redis.call('ZRANK', q, token) or 0
local theirs = redis.call('ZSCORE', q, holder)
if theirs and tonumber(theirs) < tonumber(redis.call('ZSCORE', q, token)) then
  rank = rank - 1
end
return {0, redis.call('PTTL', l), rank}
"
));

/// Redlock's release on one node. KEYS: lock, Redlock queue, Redlock heartbeats. ARGV: token,
/// `1` to leave the queue too (a lease's release) or `0` to keep the place (undoing a failed
/// round). Compare-and-delete; returns 1 if the key held the token.
const REDLOCK_RELEASE: &str = r"
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  released = 1
end
if ARGV[2] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
end
return released
";

/// The share helpers of the shared-lock scripts, on top of [`with_helpers`]. While shares exist the
/// lock key holds `#shared` (see `kind_keys.rs`) and expires exactly with the last share, which
/// is what lets the exclusive scripts stay as they are: they see a held key with a PTTL.
macro_rules! with_share_helpers {
    ($body:expr) => {
        with_helpers!(concat!(
            r"
-- Drops the shares whose expiry (server ms) has passed.
local function drop_expired_shares(r, rf, now)
  local gone = redis.call('ZRANGEBYSCORE', r, '-inf', now)
  for i = 1, #gone do
    redis.call('HDEL', rf, gone[i])
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', r, '-inf', now)
  end
end
-- Makes the lock key and the shares' keys expire with the last share, or deletes them when none
-- is left. Returns the lock's PTTL before and after (0: freed).
local function fit_shares(l, r, rf, now)
  local before = redis.call('PTTL', l)
  local last = redis.call('ZRANGE', r, -1, -1, 'WITHSCORES')
  if not last[1] then
    redis.call('DEL', l, r, rf)
    return before, 0
  end
  local left = math.max(tonumber(last[2]) - now, 1)
  redis.call('PEXPIRE', l, left)
  redis.call('PEXPIRE', r, left)
  redis.call('PEXPIRE', rf, left)
  return before, left
end
-- A waiter's place in the FIFO queue: a refused `wait` attempt joins (or renews), a refused
-- `last` attempt leaves.
local function queue_place(q, h, token, mode, waiter_ttl, now)
  if mode == 'last' then
    redis.call('ZREM', q, token)
    redis.call('HDEL', h, token)
    if redis.call('ZCARD', q) == 0 then
      redis.call('DEL', q, h)
    end
  elseif mode == 'wait' then
",
            join_or_renew!(),
            r"  end
end
",
            $body
        ))
    };
}

/// The end of a shared acquire's look at a `#shared` key (`l`, shares `r`, share fences `rf`)
/// whose shares all expired: the key is freed, and `holder` with it.
macro_rules! free_if_no_shares {
    () => {
        r"  if redis.call('ZCARD', r) == 0 then
    redis.call('DEL', l, r, rf)
    holder = nil
  end
end
"
    };
}

/// KEYS: lock, fence, queue, heartbeats, shares, share fences. ARGV: token, ttl ms, mode, waiter
/// ttl ms, signal prefix, signal suffix, signal ttl ms, fence retention ms.
///
/// A shared grant when the key is free or shared and nobody is queued ahead (the queue is the
/// exclusive lock's, FIFO for both kinds: a queued writer makes new readers wait, so a stream of
/// readers never starves it). Replies as [`ACQUIRE`]. A reader granted from the queue's head
/// wakes the next head: another reader joins at once, a writer finds the key held and waits on.
/// The fence comes from the lock's own counter, so it orders readers and writers alike; it is kept
/// per share for restore. A resent attempt that finds its share draws a fresh fence (the first
/// send's was never seen).
const SHARED_ACQUIRE: &str = with_share_helpers!(concat!(
    r"
local l, f, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local us, now = clock()
-- GET gives false for a missing key: nil from here on, so `holder == nil` means free.
local holder = redis.call('GET', l) or nil
if holder == '#shared' then
  drop_expired_shares(r, rf, now)
  if redis.call('ZSCORE', r, token) then
    redis.call('ZADD', r, now + ttl, token)
    local fence = fence_at(f, us, 1, ARGV[8])
    redis.call('HSET', rf, token, string.format('%.0f', fence))
    fit_shares(l, r, rf, now)
    return {1, fence}
  end
",
    free_if_no_shares!(),
    r"local head = nil
if redis.call('EXISTS', q) == 1 then
  head = live_head(q, h, now)
end
if holder == nil or holder == '#shared' then
  if head == nil or head == token then
    if holder == nil then
      redis.call('DEL', r, rf)
      redis.call('SET', l, '#shared', 'PX', ttl)
    end
    redis.call('ZADD', r, now + ttl, token)
    local fence = fence_at(f, us, 1, ARGV[8])
    redis.call('HSET', rf, token, string.format('%.0f', fence))
    fit_shares(l, r, rf, now)
    if head then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token)
      local after = live_head(q, h, now)
      if after then
        wake(after, ARGV[5], ARGV[6], ARGV[7])
      end
    end
    return {1, fence}
  end
  if holder == nil then
    wake(head, ARGV[5], ARGV[6], ARGV[7])
  end
end
queue_place(q, h, token, mode, tonumber(ARGV[4]), now)
if holder then
  return {0, redis.call('PTTL', l)}
end
return {0, -3}
"
));

/// KEYS: lock, queue, heartbeats, shares, share fences. ARGV: token, ttl ms (`0`: release),
/// signal prefix, signal suffix, signal ttl ms. Release (ttl 0) or extend one share, only while it
/// is unexpired; returns 1 if it was. Expired shares go too, the lock key's expiry follows the
/// longest share left, and when that shortens (or the key is freed) the queue's head is woken,
/// which blocks for the old remaining time at most.
const SHARED_SETTLE: &str = with_share_helpers!(
    r"
local l, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl = ARGV[1], tonumber(ARGV[2])
if redis.call('GET', l) ~= '#shared' then
  return 0
end
local now = now_ms()
local ours = tonumber(redis.call('ZSCORE', r, token) or '0') > now
if ours then
  if ttl > 0 then
    redis.call('ZADD', r, now + ttl, token)
  else
    redis.call('ZREM', r, token)
    redis.call('HDEL', rf, token)
  end
end
drop_expired_shares(r, rf, now)
local before, left = fit_shares(l, r, rf, now)
if left < before and redis.call('EXISTS', q) == 1 then
  local head = live_head(q, h, now)
  if head then
    wake(head, ARGV[3], ARGV[4], ARGV[5])
  end
end
if ours then
  return 1
end
return 0
"
);

/// KEYS: lock, fence, shares, share fences. ARGV: token, fence retention ms. Whether the token
/// holds the lock: `{1, fence, pttl}` exclusively, `{2, fence, ms left}` as a share, `{0, 0, 0}`
/// not.
const RESTORE: &str = with_helpers!(
    r"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    return {1, current_fence(KEYS[2], ARGV[2]), left}
  end
elseif v == '#shared' then
  local exp = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]) or '0')
  local now = now_ms()
  local fence = redis.call('HGET', KEYS[4], ARGV[1])
  if exp > now and fence then
    return {2, tonumber(fence), exp - now}
  end
end
return {0, 0, 0}
"
);

/// KEYS: lock, queue, heartbeats, shares, share fences. ARGV: signal prefix, signal suffix, signal
/// ttl ms. Deletes the lock and every share (never the fence counter), wakes the queue's head;
/// returns 1 if the key was held.
const FORCE_RELEASE: &str = with_helpers!(
    r"
local held = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[4], KEYS[5])
if held == 1 and redis.call('EXISTS', KEYS[2]) == 1 then
  local head = live_head(KEYS[2], KEYS[3], now_ms())
  if head then
    wake(head, ARGV[1], ARGV[2], ARGV[3])
  end
end
return held
"
);

/// KEYS: lock, fence, queue, shares. Returns `{pttl, last fence or -1, waiters, holders, shared}`.
const INSPECT_KINDS: &str = with_helpers!(
    r"
local v = redis.call('GET', KEYS[1])
local fence = redis.call('GET', KEYS[2])
fence = fence and tonumber(fence) or -1
local pttl = redis.call('PTTL', KEYS[1])
local waiters = redis.call('ZCARD', KEYS[3])
if v == '#shared' then
  local n = redis.call('ZCOUNT', KEYS[4], '(' .. now_ms(), '+inf')
  return {pttl, fence, waiters, n, 1}
elseif v then
  return {pttl, fence, waiters, 1, 0}
end
return {pttl, fence, waiters, 0, 0}
"
);

/// KEYS: holders, fence, queue, heartbeats, size. ARGV: token, ttl ms, mode, waiter ttl ms, signal
/// prefix, signal suffix, signal ttl ms, fence retention ms, permits.
///
/// A permit when fewer than `permits` (the caller's own) unexpired holders remain and nobody is
/// queued ahead; expired holders (by the server's clock) are dropped first. Replies as
/// [`ACQUIRE`], except that a full semaphore reports the time until its first permit expires.
/// A head granted with permits still free wakes the next head. The size key keeps the `permits`
/// the live holders were granted under (set with each grant, expiring with the holders' key):
/// while holders live, another size is refused with `{-4, size}` (not queued). A size key missing
/// beside live holders (granted by an older version) lets any size in and takes its size.
const PERMIT_ACQUIRE: &str = with_share_helpers!(
    r"
local s, f, q, h, z = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl, mode, permits = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[9])
local us, now = clock()
redis.call('ZREMRANGEBYSCORE', s, '-inf', now)
local count = redis.call('ZCARD', s)
if count > 0 then
  local size = tonumber(redis.call('GET', z) or '0')
  if size > 0 and size ~= permits then
    if redis.call('ZSCORE', q, token) then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token)
    end
    return {-4, size}
  end
end
if redis.call('ZSCORE', s, token) then
  redis.call('ZADD', s, now + ttl, token)
  if redis.call('PTTL', s) < ttl then
    redis.call('PEXPIRE', s, ttl)
  end
  redis.call('SET', z, permits, 'PX', redis.call('PTTL', s))
  return {1, fence_at(f, us, 1, ARGV[8])}
end
local head = nil
if redis.call('EXISTS', q) == 1 then
  head = live_head(q, h, now)
end
if count < permits then
  if head == nil or head == token then
    redis.call('ZADD', s, now + ttl, token)
    if redis.call('PTTL', s) < ttl then
      redis.call('PEXPIRE', s, ttl)
    end
    redis.call('SET', z, permits, 'PX', redis.call('PTTL', s))
    if head then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token)
      local after = live_head(q, h, now)
      if after and count + 1 < permits then
        wake(after, ARGV[5], ARGV[6], ARGV[7])
      end
    end
    return {1, fence_at(f, us, 1, ARGV[8])}
  end
  wake(head, ARGV[5], ARGV[6], ARGV[7])
end
queue_place(q, h, token, mode, tonumber(ARGV[4]), now)
if count >= permits then
  local first = redis.call('ZRANGE', s, 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2]) - now, 0)}
end
return {0, -3}
"
);

/// KEYS: holders, queue, heartbeats, size. ARGV: token, ttl ms (`0`: release), signal prefix,
/// signal suffix, signal ttl ms. Release or extend one permit while it is unexpired (1), else 0. A
/// release, or an extend that brings the permit's expiry forward, wakes the queue's head. The size
/// key lives as long as the holders' key, and goes with the last holder's release.
const PERMIT_SETTLE: &str = with_helpers!(
    r"
local s, q, h, z = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local exp = tonumber(redis.call('ZSCORE', s, token) or '0')
redis.call('ZREMRANGEBYSCORE', s, '-inf', now)
if exp <= now then
  return 0
end
if ttl > 0 then
  redis.call('ZADD', s, now + ttl, token)
  if redis.call('PTTL', s) < ttl then
    redis.call('PEXPIRE', s, ttl)
  end
  if redis.call('EXISTS', z) == 1 then
    redis.call('PEXPIRE', z, redis.call('PTTL', s))
  end
end
if (ttl == 0 or now + ttl < exp) and redis.call('EXISTS', q) == 1 then
  if ttl == 0 then
    redis.call('ZREM', s, token)
  end
  local head = live_head(q, h, now)
  if head then
    wake(head, ARGV[3], ARGV[4], ARGV[5])
  end
elseif ttl == 0 then
  redis.call('ZREM', s, token)
end
if ttl == 0 and redis.call('EXISTS', s) == 0 then
  redis.call('DEL', z)
end
return 1
"
);

/// KEYS: holders, fence. Returns `{holders, ms until the last expires or -2, last fence or -1}`.
const PERMIT_INSPECT: &str = with_helpers!(
    r"
local now = now_ms()
local n = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local left = -2
if n > 0 and last[1] then
  left = tonumber(last[2]) - now
end
local fence = redis.call('GET', KEYS[2])
return {n, left, fence and tonumber(fence) or -1}
"
);

/// Redlock's shared acquire on one node. KEYS: lock, fence, Redlock queue, Redlock heartbeats,
/// shares, share fences, the node's stamp. ARGV: token, ttl ms, fence granule µs, fence retention
/// ms. Returns `{1, fence}` or `{0, pttl or -3}`; `{-1, -1}` or `{0, ms}` from the node's gate
/// (see [`REDLOCK_ACQUIRE`]). Like [`SHARED_ACQUIRE`] without a reserving queue (see
/// [`REDLOCK_ACQUIRE`]): a live exclusive waiter ranked in the node's Redlock queue makes new
/// readers give way, so a writer polling behind readers gets the key once they drain. A share
/// already held by this token (a retry after a failed round) keeps its fence, as the exclusive
/// script keeps its counter (see `redlock/fence.rs`).
const REDLOCK_SHARED_ACQUIRE: &str = with_share_helpers!(concat!(
    redlock_gate!(),
    r"
local l, f, q, h, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local us, now = clock()
local held = gate(KEYS[7], now)
if held == -1 then
  return {-1, -1}
elseif held then
  return {0, held}
end
local holder = redis.call('GET', l)
if holder == '#shared' then
  drop_expired_shares(r, rf, now)
  local fence = redis.call('HGET', rf, token)
  if redis.call('ZSCORE', r, token) and fence then
    reach(KEYS[7], now, ttl, ARGV[4])
    redis.call('ZADD', r, now + ttl, token)
    fit_shares(l, r, rf, now)
    return {1, tonumber(fence)}
  end
",
    free_if_no_shares!(),
    r"if holder and holder ~= '#shared' then
  return {0, redis.call('PTTL', l)}
end
if redis.call('EXISTS', q) == 1 and live_head(q, h, now) then
  if holder then
    return {0, redis.call('PTTL', l)}
  end
  return {0, -3}
end
if not holder then
  redis.call('DEL', r, rf)
  redis.call('SET', l, '#shared', 'PX', ttl)
end
reach(KEYS[7], now, ttl, ARGV[4])
redis.call('ZADD', r, now + ttl, token)
local fence = fence_at(f, us, tonumber(ARGV[3]), ARGV[4])
redis.call('HSET', rf, token, string.format('%.0f', fence))
fit_shares(l, r, rf, now)
return {1, fence}
"
));

/// Redlock's permit acquire on one node. KEYS: slots (slot → token), slot of (token → slot),
/// expiries (token → server ms), fence, the node's stamp, taken slots (a sorted set, each slot
/// scored by its number), size (the `permits` the live holders were granted under). ARGV: token,
/// ttl ms, permits, slot hint (`-1`: none), fence granule µs, fence retention ms. Returns
/// `{1, fence, slot}` or `{0, ms until the first expiry or -3, -1}`; `{-1, -1, -1}` or
/// `{0, ms, -1}` from the node's gate (see [`REDLOCK_ACQUIRE`]); `{-4, size, -1}` while live
/// holders were granted under another size than `permits` (a size key missing beside live
/// holders, granted by an older version, lets any size in and takes its size). The size key is set
/// with each grant and expires with the holders' keys.
///
/// Permits are numbered slots `0 .. permits-1`, each one a mutex, so that a quorum of nodes
/// granting the same slot bounds the holders to `permits` (see `redlock/kinds.rs`). Without a
/// hint the node grants its lowest free slot (nodes in step agree on it); with one, that slot or
/// nothing. A token already holding a slot keeps it (a retry after a failed round), with a fence
/// drawn afresh: the counter is shared by the semaphore's holders, so its current value may have
/// been drawn for another holder, and a fence counts only where it was drawn for this token (see
/// `redlock/fence.rs`).
///
/// The lowest free slot is found by bisecting the taken slots by rank (the slot at rank `r` is
/// `r` while no slot below it is free): O(log² holders) however many permits are held, where a
/// scan cost a script of ~100 ms on a semaphore with 65,535 live holders and blocked the node
/// meanwhile. The sorted set is rebuilt from the slots when the two disagree (a release by a
/// client that predates it, keys that expired apart).
const REDLOCK_PERMIT_ACQUIRE: &str = with_gate!(
    r"
local S, T, E, F = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, permits, hint = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local us, now = clock()
local held = gate(KEYS[5], now)
if held == -1 then
  return {-1, -1, -1}
elseif held then
  return {0, held, -1}
end
local X = KEYS[6]
local gone = redis.call('ZRANGEBYSCORE', E, '-inf', now)
for i = 1, #gone do
  local slot = redis.call('HGET', T, gone[i])
  if slot and redis.call('HGET', S, slot) == gone[i] then
    redis.call('HDEL', S, slot)
    redis.call('ZREM', X, slot)
  end
  redis.call('HDEL', T, gone[i])
end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', E, '-inf', now)
end
local Z = KEYS[7]
if redis.call('HLEN', S) > 0 then
  local size = tonumber(redis.call('GET', Z) or '0')
  if size > 0 and size ~= permits then
    return {-4, size, -1}
  end
end
local function rebuild()
  redis.call('DEL', X)
  local held = redis.call('HKEYS', S)
  for i = 1, #held do
    redis.call('ZADD', X, tonumber(held[i]), held[i])
  end
end
local function lowest_free()
  local lo, hi = 0, redis.call('ZCARD', X)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local at = redis.call('ZRANGE', X, mid, mid, 'WITHSCORES')
    if tonumber(at[2]) > mid then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end
local function stretch()
  for _, k in ipairs({S, T, E, X}) do
    if redis.call('PTTL', k) < ttl then
      redis.call('PEXPIRE', k, ttl)
    end
  end
  redis.call('SET', Z, permits, 'PX', redis.call('PTTL', E))
end
local mine = redis.call('HGET', T, token)
if mine then
  reach(KEYS[5], now, ttl, ARGV[6])
  redis.call('ZADD', E, now + ttl, token)
  stretch()
  return {1, fence_at(F, us, tonumber(ARGV[5]), ARGV[6]), tonumber(mine)}
end
local slot = nil
if hint >= 0 then
  if hint < permits and redis.call('HEXISTS', S, hint) == 0 then
    slot = hint
  end
elseif redis.call('HLEN', S) < permits then
  -- Fewer than `permits` slots are taken, so the lowest free one is below `permits`.
  if redis.call('ZCARD', X) ~= redis.call('HLEN', S) then
    rebuild()
  end
  slot = lowest_free()
  if redis.call('HEXISTS', S, slot) == 1 then
    rebuild()
    slot = lowest_free()
  end
end
if not slot then
  local first = redis.call('ZRANGE', E, 0, 0, 'WITHSCORES')
  if first[1] then
    return {0, math.max(tonumber(first[2]) - now, 0), -1}
  end
  return {0, -3, -1}
end
reach(KEYS[5], now, ttl, ARGV[6])
redis.call('HSET', S, slot, token)
redis.call('ZADD', X, slot, slot)
redis.call('HSET', T, token, slot)
redis.call('ZADD', E, now + ttl, token)
stretch()
return {1, fence_at(F, us, tonumber(ARGV[5]), ARGV[6]), slot}
"
);

/// KEYS: slots, slot of, expiries, taken slots, size. ARGV: token, ttl ms (`0`: release). Release or extend a
/// Redlock permit on one node while it is unexpired, else 0; a release frees the slot even if
/// expired. A release answers 1, an extend the slot the node holds the token in, plus 1: a
/// permit is a quorum of nodes holding the same slot, so the client counts an extend by slot.
const REDLOCK_PERMIT_SETTLE: &str = with_helpers!(
    r"
local S, T, E, X, Z = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local slot = redis.call('HGET', T, token)
if not slot then
  return 0
end
local now = now_ms()
local live = tonumber(redis.call('ZSCORE', E, token) or '0') > now
  and redis.call('HGET', S, slot) == token
if ttl > 0 and live then
  redis.call('ZADD', E, now + ttl, token)
  for _, k in ipairs({S, T, E, X}) do
    if redis.call('PTTL', k) < ttl then
      redis.call('PEXPIRE', k, ttl)
    end
  end
  if redis.call('EXISTS', Z) == 1 then
    redis.call('PEXPIRE', Z, redis.call('PTTL', E))
  end
  return tonumber(slot) + 1
end
if ttl == 0 or not live then
  if redis.call('HGET', S, slot) == token then
    redis.call('HDEL', S, slot)
    redis.call('ZREM', X, slot)
  end
  redis.call('HDEL', T, token)
  redis.call('ZREM', E, token)
  if redis.call('HLEN', S) == 0 then
    redis.call('DEL', Z)
  end
end
if live then
  return 1
end
return 0
"
);

/// KEYS: a Redlock node's stamp. Returns `{0, 0}` when the node has none, else `{1, ms}`: how long
/// a lease granted or extended on it may still live (see `redlock/gate.rs`).
const REDLOCK_GATE_READ: &str = with_helpers!(
    r"
local horizon = redis.call('HGET', KEYS[1], 'horizon')
if not horizon then
  return {0, 0}
end
return {1, math.max(tonumber(horizon) - now_ms(), 0)}
"
);

/// KEYS: a Redlock node's stamp. ARGV: ms, fence retention ms. Stamps a node that has no stamp:
/// it grants nothing for `ms` (how long a lease it may have granted before it lost its data can
/// still live), and its horizon starts there. Returns 1 if it stamped, 0 if a stamp was there
/// already.
const REDLOCK_GATE_INIT: &str = with_helpers!(
    r"
if redis.call('HGET', KEYS[1], 'horizon') then
  return 0
end
local hold = tonumber(ARGV[1])
local at = string.format('%.0f', now_ms() + hold)
redis.call('HSET', KEYS[1], 'horizon', at)
redis.call('HSET', KEYS[1], 'until', at)
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', hold + tonumber(ARGV[2])))
return 1
"
);

/// KEYS: a Redlock node's stamp. ARGV: ms, fence retention ms. Before an extend: the node's
/// horizon reaches at least `ms` from now. A node without a stamp is left so (it must be stamped by the client first, see
/// [`REDLOCK_GATE_INIT`]). Returns 1 if the stamp is there.
const REDLOCK_GATE_REACH: &str = with_gate!(
    r"
if not redis.call('HGET', KEYS[1], 'horizon') then
  return 0
end
reach(KEYS[1], now_ms(), tonumber(ARGV[1]), ARGV[2])
return 1
"
);

/// A record (`records.rs`): the hash `KEYS[1]` of `fence`, `value` and `stamp` (when the writer
/// wrote it, µs on its clock: Redlock's reads take the newest of equal fences), expiring `keep` ms
/// after its last write. ARGV: `get`; or `put`, fence, value, keep ms, stamp. `get` returns
/// `{fence, value, stamp}`, or `{}` when there is no record. `put` writes iff no record of a higher
/// fence is there (an equal fence is the same holder writing again) and returns `{1, fence}`, or
/// `{0, stored fence}` when refused, changing nothing. Fences travel and are stored as decimal
/// strings (no sign, no leading zero) and compare by length, then byte by byte, never as Lua
/// numbers, which are exact only up to 2^53 (as in `fence_gate.rs`). A resent put (a dropped
/// connection) finds its own fence and writes again: harmless.
const RECORD: &str = r"
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
";

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
pub(crate) static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND));
pub(crate) static INSPECT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT));

pub(crate) static REDLOCK_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_ACQUIRE));
pub(crate) static REDLOCK_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_RELEASE));

pub(crate) static SHARED_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(SHARED_ACQUIRE));
pub(crate) static SHARED_SETTLE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(SHARED_SETTLE));
pub(crate) static RESTORE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RESTORE));
pub(crate) static FORCE_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(FORCE_RELEASE));
pub(crate) static INSPECT_KINDS_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(INSPECT_KINDS));
pub(crate) static PERMIT_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(PERMIT_ACQUIRE));
pub(crate) static PERMIT_SETTLE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(PERMIT_SETTLE));
pub(crate) static PERMIT_INSPECT_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(PERMIT_INSPECT));
pub(crate) static REDLOCK_SHARED_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_SHARED_ACQUIRE));
pub(crate) static REDLOCK_CLAIM_FENCE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_CLAIM_FENCE));
pub(crate) static REDLOCK_CLAIM_SHARE_FENCE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_CLAIM_SHARE_FENCE));
pub(crate) static REDLOCK_CLAIM_PERMIT_FENCE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_CLAIM_PERMIT_FENCE));
pub(crate) static REDLOCK_PERMIT_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_PERMIT_ACQUIRE));
pub(crate) static REDLOCK_PERMIT_SETTLE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_PERMIT_SETTLE));

pub(crate) static REDLOCK_GATE_READ_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_GATE_READ));
pub(crate) static REDLOCK_GATE_INIT_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_GATE_INIT));
pub(crate) static REDLOCK_GATE_REACH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_GATE_REACH));

pub(crate) static RECORD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RECORD));

pub(crate) static ALL: [&LazyLock<Script>; 24] = [
    &SHARED_ACQUIRE_SCRIPT,
    &SHARED_SETTLE_SCRIPT,
    &RESTORE_SCRIPT,
    &FORCE_RELEASE_SCRIPT,
    &INSPECT_KINDS_SCRIPT,
    &PERMIT_ACQUIRE_SCRIPT,
    &PERMIT_SETTLE_SCRIPT,
    &PERMIT_INSPECT_SCRIPT,
    &REDLOCK_SHARED_ACQUIRE_SCRIPT,
    &REDLOCK_CLAIM_FENCE_SCRIPT,
    &REDLOCK_CLAIM_SHARE_FENCE_SCRIPT,
    &REDLOCK_CLAIM_PERMIT_FENCE_SCRIPT,
    &REDLOCK_PERMIT_ACQUIRE_SCRIPT,
    &REDLOCK_PERMIT_SETTLE_SCRIPT,
    &ACQUIRE_SCRIPT,
    &RELEASE_SCRIPT,
    &EXTEND_SCRIPT,
    &INSPECT_SCRIPT,
    &REDLOCK_ACQUIRE_SCRIPT,
    &REDLOCK_RELEASE_SCRIPT,
    &REDLOCK_GATE_READ_SCRIPT,
    &REDLOCK_GATE_INIT_SCRIPT,
    &REDLOCK_GATE_REACH_SCRIPT,
    &RECORD_SCRIPT,
];
