//! The Lua scripts that make each lease operation one atomic round trip. Keys and tokens travel
//! only as KEYS/ARGV, never inside the script text, so the text (and its SHA1) is fixed and user
//! input can never change what runs. `redis::Script` hashes each text once, calls it with EVALSHA,
//! and loads it again when the server answers NOSCRIPT (after a restart or `SCRIPT FLUSH`).
//!
//! Waiting is first come, first served: a waiting `acquire` enters the key's queue (a sorted set of
//! tokens by arrival, plus a hash of each waiter's heartbeat deadline on the server's clock), and a
//! free key goes only to the queue's head. Whatever frees the key or changes the head while it is
//! free (release, a waiter's final attempt, the head found dead) pushes one wake-up signal onto the
//! head's own list, on which that waiter blocks in `BLPOP`. Waiters that stop sending heartbeats (a
//! crashed process) are dropped from the head of the queue. With nobody queued, every script takes
//! the same short path as a plain SET NX lock.

use redis::Script;
use std::sync::LazyLock;

/// Shared by the scripts below. A waiter's signal list is `ARGV[sig_prefix] .. token ..
/// ARGV[sig_suffix]`: the name is built from arguments, never from script text.
macro_rules! with_helpers {
    ($body:expr) => {
        concat!(
            r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
    redis.call('HDEL', h, first)
  end
end
-- One wake-up signal for one waiter: its list never holds more than one, and expires.
local function wake(token, sig_prefix, sig_suffix, sig_ttl)
  local s = sig_prefix .. token .. sig_suffix
  redis.call('RPUSH', s, '1')
  redis.call('LTRIM', s, 0, 0)
  redis.call('PEXPIRE', s, sig_ttl)
end
",
            $body
        )
    };
}

/// KEYS: lock, fence, queue, heartbeats. ARGV: token, ttl ms, mode (`try`, `wait` or `last`),
/// waiter ttl ms, signal prefix, signal suffix, signal ttl ms.
///
/// Returns `{1, fence}` when taken; `{0, pttl}` when someone holds the key (so a waiter learns in
/// the same round trip how long it may block), `-1` meaning no expiry; `{0, -3}` when the key is
/// free but reserved for the queue's head. In `wait` mode a refused caller joins the queue (or,
/// already in it, renews its heartbeat); in `last` mode (a wait's final attempt) it leaves the
/// queue.
///
/// A key already holding this very token counts as taken with the current fence: the client may
/// resend the script after a connection dropped mid-call, and the first send may have run.
const ACQUIRE: &str = with_helpers!(
    r"
local l, f, q, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, mode, waiter_ttl = ARGV[1], ARGV[3], tonumber(ARGV[4])
local holder = redis.call('GET', l)
if holder == token then
  return {1, tonumber(redis.call('GET', f) or '0')}
end
local now, head = nil, nil
if redis.call('EXISTS', q) == 1 then
  now = now_ms()
  head = live_head(q, h, now)
end
if not holder then
  if head == nil or head == token then
    redis.call('SET', l, token, 'PX', ARGV[2])
    if head then
      redis.call('ZREM', q, token)
      redis.call('HDEL', h, token)
      live_head(q, h, now)
    end
    return {1, redis.call('INCR', f)}
  end
  -- Free, but the head's turn: make sure it knows.
  wake(head, ARGV[5], ARGV[6], ARGV[7])
end
if mode == 'last' then
  redis.call('ZREM', q, token)
  redis.call('HDEL', h, token)
  if redis.call('ZCARD', q) == 0 then
    redis.call('DEL', q, h)
  end
elseif mode == 'wait' then
  now = now or now_ms()
  if not redis.call('ZSCORE', q, token) then
    redis.call('ZADD', q, redis.call('HINCRBY', h, '#seq', 1), token)
  end
  redis.call('HSET', h, token, now + waiter_ttl)
  redis.call('PEXPIRE', q, 2 * waiter_ttl)
  redis.call('PEXPIRE', h, 2 * waiter_ttl)
end
if holder then
  return {0, redis.call('PTTL', l)}
end
return {0, -3}
"
);

/// KEYS: lock, queue, heartbeats. ARGV: token, signal prefix, signal suffix, signal ttl ms.
/// Compare-and-delete, then a wake-up for the queue's head, if anyone waits.
const RELEASE: &str = with_helpers!(
    r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  local head = live_head(KEYS[2], KEYS[3], now_ms())
  if head then
    wake(head, ARGV[2], ARGV[3], ARGV[4])
  end
end
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

/// KEYS: fence. ARGV: a fence. Raises the counter to at least that fence (never lowers it) and
/// returns the counter: Redlock's write-back of the quorum's highest fence (see `fence.rs`).
const RAISE_FENCE: &str = r"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if want > cur then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return cur
";

/// Redlock's acquire on one node. KEYS: lock, fence, Redlock queue, Redlock heartbeats. ARGV:
/// token, ttl ms, mode (`try`, `wait` or `last`), waiter ttl ms.
///
/// Like [`ACQUIRE`] for a free key or our own token (`{1, fence, 0}`), but the queue never reserves
/// a key: with N nodes queueing independently, their heads can differ, and reserving would let a
/// key go to nobody. The queue only ranks: a refused `wait` attempt joins it (or renews its
/// heartbeat there) and learns how many live waiters came before it, not counting the holder
/// (`{0, pttl, rank}`), so the client can poll faster the nearer it is to the front. A waiter keeps
/// its place through a round that failed on other nodes; it leaves on its final release (or its
/// `last` attempt), or lapses with its heartbeat. `try` never queues (`rank` -1).
const REDLOCK_ACQUIRE: &str = with_helpers!(
    r"
local l, f, q, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, mode = ARGV[1], ARGV[3]
local holder = redis.call('GET', l)
if holder == token then
  return {1, tonumber(redis.call('GET', f) or '0'), 0}
end
if not holder then
  redis.call('SET', l, token, 'PX', ARGV[2])
  return {1, redis.call('INCR', f), 0}
end
if mode == 'last' then
  redis.call('ZREM', q, token)
  redis.call('HDEL', h, token)
end
if mode ~= 'wait' then
  return {0, redis.call('PTTL', l), -1}
end
local waiter_ttl = tonumber(ARGV[4])
local now = now_ms()
if not redis.call('ZSCORE', q, token) then
  redis.call('ZADD', q, redis.call('HINCRBY', h, '#seq', 1), token)
end
redis.call('HSET', h, token, now + waiter_ttl)
redis.call('PEXPIRE', q, 2 * waiter_ttl)
redis.call('PEXPIRE', h, 2 * waiter_ttl)
live_head(q, h, now)
local rank = redis.call('ZRANK', q, token) or 0
local theirs = redis.call('ZSCORE', q, holder)
if theirs and tonumber(theirs) < tonumber(redis.call('ZSCORE', q, token)) then
  rank = rank - 1
end
return {0, redis.call('PTTL', l), rank}
"
);

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

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
pub(crate) static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND));
pub(crate) static INSPECT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT));

pub(crate) static RAISE_FENCE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RAISE_FENCE));

pub(crate) static REDLOCK_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_ACQUIRE));
pub(crate) static REDLOCK_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_RELEASE));

pub(crate) static ALL: [&LazyLock<Script>; 7] = [
    &ACQUIRE_SCRIPT,
    &RELEASE_SCRIPT,
    &EXTEND_SCRIPT,
    &INSPECT_SCRIPT,
    &RAISE_FENCE_SCRIPT,
    &REDLOCK_ACQUIRE_SCRIPT,
    &REDLOCK_RELEASE_SCRIPT,
];
