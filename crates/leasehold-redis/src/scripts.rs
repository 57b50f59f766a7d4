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
//!
//! # How the texts are assembled
//!
//! The Lua lives in `src/lua/`, none of it in Rust strings: each script is its `.lua` file, or
//! the `concat!` of `include_str!`s of its pieces, all at compile time. Every piece is valid Lua
//! on its own: a shared piece only defines `local function`s, and the script's own piece, last,
//! calls them (`tests/scripts_compile.rs` compiles each piece and each script with `luac5.1`, and
//! fails on any global a script reads or writes beyond those Redis gives it). The pieces shared
//! by several scripts are in `src/lua/shared/`, one file each, so that a helper is the same text
//! in every script that uses it (and is reviewed once); a script includes only the pieces it
//! calls, since Lua makes a closure for each `local function` it runs through, every call:
//!
//! - `prelude.lua`: the helpers most scripts start with (`clock`, `now_ms`, `fence_at`,
//!   `next_fence`, `current_fence` for Redlock's per-key counters, `draw_fence` and `held_fence`
//!   for one server's high-water, `live_head`, `wake`, `hand_over`). A waiter's signal list is
//!   `ARGV[sig_prefix] .. token .. ARGV[sig_suffix]`: the name is built from arguments, never
//!   from script text.
//! - `redlock_gate.lua`: Redlock's guard against a node that lost its data (see
//!   `redlock/gate.rs`), after the prelude. The node's stamp `g` (a hash) holds `horizon`, the
//!   server ms until which a lease granted or extended here may live, and `until`, before which
//!   this node grants nothing. It expires a fence retention after its horizon, as a key's fence
//!   counter does after its last lease.
//! - `share_helpers.lua`: `drop_expired_shares` and `fit_shares`, after the prelude. While
//!   shares exist the lock key holds `#shared` (see `kind_keys.rs`) and expires exactly with the
//!   last share, which is what lets the exclusive scripts stay as they are: they see a held key
//!   with a PTTL.
//! - `above_high_water.lua`: whether a fence key holds a value above the high-water (a 0.3
//!   client's counter drawn since), which the settle scripts then leave to its own expiry.
//! - `free_if_no_shares.lua`: the end of a shared acquire's look at a `#shared` key whose shares
//!   all expired: the key is freed.
//! - `join_or_renew.lua`: a refused `wait` attempt's place in a queue: it joins at the back, or
//!   renews its heartbeat if already in; both keys live twice the waiter's TTL.
//! - `queue_place.lua`: after `join_or_renew.lua`, the place of a refused shared or semaphore
//!   attempt: `wait` joins or renews, `last` leaves.
//! - `promote_check.lua`: the check of both promote scripts, after the prelude: the reply when
//!   the token holds nothing (`{-1, 0}`) or another live share is left (`{0, pttl}`), else the
//!   new fence (the current one when the token holds the lock already: a promote sent again).
//! - `claim_now.lua`: the server's clock in ms, for the claim scripts that check an expiry (they
//!   have no prelude).
//! - `claim_fence.lua`: Redlock's claim scripts' draw, once they found that the token holds the
//!   key on this node: the counter's next value, at least the fence asked for. A node whose
//!   counter already reached the fence asked for answers a value above it, never the fence
//!   itself: that value was drawn here for someone else, and raising a counter to it would let
//!   this node count for two holders (see `redlock/fence.rs`).
//!
//! A script whose common case returns before the helpers ([`ACQUIRE`], [`RELEASE`]) puts its fast
//! path first (`acquire.lua`), then the prelude, then the rest (`acquire_queued.lua`), so that the
//! fast path (nobody queued) skips the closures. Those two are the only scripts split at their
//! top level; each part is still whole statements.
//!
//! A lock's Redlock script takes its single-node twin's KEYS in the same order, those it has no
//! use for left off the end and its own (the node's stamp) added there: a key is at the same
//! index in both. (A Redlock semaphore keeps other keys, its slots.)
//!
//! The pieces are joined as they are, byte for byte: the texts (and so their SHA1s, which servers
//! and reviewers know them by) are exactly what the files hold, in order. So the `.lua` files
//! carry no comment about their KEYS and ARGV (that would change the text): those are documented
//! on the constants below.

use redis::Script;
use std::sync::LazyLock;

/// KEYS: lock, fence, queue, heartbeats, fence high-water. ARGV: token, ttl ms, mode (`try`,
/// `wait` or `last`),
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
/// The fence is `max(high-water + 1, the key's stored fence + 1, server µs)`, kept in the fence key
/// for the lease's TTL: see `draw_fence` and the crate docs. With nobody
/// queued, the script makes the calls of a plain SET NX lock and its fence, and reads the clock
/// once (`acquire.lua`, before the prelude).
const ACQUIRE: &str = concat!(
    include_str!("lua/acquire.lua"),
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/acquire_queued.lua"),
);

/// KEYS: lock, queue, heartbeats, fence, fence high-water. ARGV: token, signal prefix, signal
/// suffix, signal ttl ms, fence retention ms. Compare-and-delete (the lock and its fence key, which
/// lives only with the lease); with someone queued, the key is handed over to the
/// queue's head (see `hand_over`). Nobody queued: three calls, no clock (`release.lua`, before
/// the prelude).
const RELEASE: &str = concat!(
    include_str!("lua/release.lua"),
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/release_hand_over.lua"),
);

/// KEYS: lock, queue, heartbeats, fence. ARGV: token, ttl ms, signal prefix, signal suffix, signal
/// ttl ms. Compare-and-PEXPIRE, of the fence key too (it lives as long as the lease). A shortened lease also wakes the head, which is blocked for the old, longer
/// remaining time and must learn the new one.
const EXTEND: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/extend.lua"),
);

/// Redlock's claim of a fence for an exclusive lock on one node. KEYS: lock, fence. ARGV: token,
/// a fence, fence retention ms. While the lock holds the token, draws `max(stored + 1, fence)`
/// from the counter and returns it; otherwise returns 0 and draws nothing, so that a node draws
/// only for the token holding the key there (see `redlock/fence.rs`).
const REDLOCK_CLAIM_FENCE: &str = concat!(
    include_str!("lua/shared/claim_fence.lua"),
    include_str!("lua/redlock_claim_fence.lua"),
);

/// [`REDLOCK_CLAIM_FENCE`] for a share. KEYS: lock, fence, shares, share fences. ARGV: as there.
/// Draws from the lock's counter while the token holds an unexpired share, and records the value
/// as the share's fence, which a retried acquire and a restore report.
const REDLOCK_CLAIM_SHARE_FENCE: &str = concat!(
    include_str!("lua/shared/claim_now.lua"),
    include_str!("lua/shared/claim_fence.lua"),
    include_str!("lua/redlock_claim_share_fence.lua"),
);

/// [`REDLOCK_CLAIM_FENCE`] for a permit. KEYS: slots, slot of, expiries, fence. ARGV: as there.
/// Draws from the semaphore's counter while the token holds an unexpired slot.
const REDLOCK_CLAIM_PERMIT_FENCE: &str = concat!(
    include_str!("lua/shared/claim_now.lua"),
    include_str!("lua/shared/claim_fence.lua"),
    include_str!("lua/redlock_claim_permit_fence.lua"),
);

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
const REDLOCK_ACQUIRE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/redlock_gate.lua"),
    include_str!("lua/shared/join_or_renew.lua"),
    include_str!("lua/redlock_acquire.lua"),
);

/// Redlock's release on one node. KEYS: lock, Redlock queue, Redlock heartbeats. ARGV: token,
/// `1` to leave the queue too (a lease's release) or `0` to keep the place (undoing a failed
/// round). Compare-and-delete; returns 1 if the key held the token.
const REDLOCK_RELEASE: &str = include_str!("lua/redlock_release.lua");

/// KEYS: lock, fence, queue, heartbeats, shares, share fences, fence high-water. ARGV: token, ttl
/// ms, mode, waiter ttl ms, signal prefix, signal suffix, signal ttl ms, fence retention ms.
///
/// A shared grant when the key is free or shared and nobody is queued ahead (the queue is the
/// exclusive lock's, FIFO for both kinds: a queued writer makes new readers wait, so a stream of
/// readers never starves it). Replies as [`ACQUIRE`]. A reader granted from the queue's head
/// wakes the next head: another reader joins at once, a writer finds the key held and waits on.
/// The fence is drawn as an exclusive acquire draws it (`draw_fence`), so it orders readers and
/// writers alike; it is kept per share for restore, and in the fence key for the share's TTL. A resent attempt that finds its share draws a fresh fence (the first
/// send's was never seen).
const SHARED_ACQUIRE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/share_helpers.lua"),
    include_str!("lua/shared/free_if_no_shares.lua"),
    include_str!("lua/shared/join_or_renew.lua"),
    include_str!("lua/shared/queue_place.lua"),
    include_str!("lua/shared_acquire.lua"),
);

/// KEYS: lock, queue, heartbeats, shares, share fences, and on one server (not Redlock, whose
/// fence keys are per-key counters) fence, fence high-water. ARGV: token, ttl ms (`0`: release),
/// signal prefix, signal suffix, signal ttl ms. Release (ttl 0) or extend one share, only while it
/// is unexpired; returns 1 if it was. Expired shares go too, the lock key's expiry follows the
/// longest share left, and when that shortens (or the key is freed) the queue's head is woken,
/// which blocks for the old remaining time at most. The fence key follows the lock key (unless it
/// holds a 0.3 client's counter above the high-water, see `above_high_water.lua`).
const SHARED_SETTLE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/share_helpers.lua"),
    include_str!("lua/shared/above_high_water.lua"),
    include_str!("lua/shared_settle.lua"),
);

/// KEYS: lock, fence, shares, share fences, queue, heartbeats, fence high-water. ARGV: token, ttl
/// ms, fence retention ms, signal prefix, signal suffix, signal ttl ms.
///
/// Promotes the token's share to the exclusive lock when no other unexpired share is left: the
/// lock key goes from `#shared` to the token with the TTL, the shares' keys are deleted (so the
/// exclusive release and extend leave none behind), and a fence is drawn as an exclusive acquire
/// draws it (`draw_fence`), above every earlier grant. Returns `{1, fence}`; `{0, pttl}` while
/// another share lives (nothing changed); `{-1, 0}` when the token holds no live share. A key
/// already holding the token (a promote sent again after its first send ran) counts as promoted,
/// with the current fence. When the key's expiry comes sooner than before, the queue's head is
/// woken, as by an extend.
const PROMOTE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/promote_check.lua"),
    include_str!("lua/promote.lua"),
);

/// KEYS: lock, queue, heartbeats, shares, share fences. ARGV: token, ttl ms, the lease's fence,
/// signal prefix, signal suffix, signal ttl ms.
///
/// Demotes the exclusive lock the token holds to a share of it, in one step (the key is never
/// free for a writer to take): the lock key becomes `#shared`, the token's share expires after the
/// TTL and keeps the lease's fence (for restore). The queue's head is woken: queued readers join
/// (a reader granted from the head wakes the next), a queued writer keeps waiting, and new
/// readers still queue behind it. Returns 1, or 0 when the token does not hold the key. A
/// `#shared` key with the token's live share (a demote sent again after its first send ran) is
/// renewed and counts as demoted.
const DEMOTE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/share_helpers.lua"),
    include_str!("lua/demote.lua"),
);

/// KEYS: lock, fence, shares, share fences, fence high-water. ARGV: token, fence retention ms.
/// Whether the token holds the lock: `{1, fence, pttl}` exclusively, `{2, fence, ms left}` as a
/// share, `{0, 0, 0}` not. (An exclusive lease whose fence key is gone, as after a 0.3 client's
/// extend, gets a new fence from the high-water.)
const RESTORE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/restore.lua"),
);

/// KEYS: lock, queue, heartbeats, shares, share fences. ARGV: signal prefix, signal suffix, signal
/// ttl ms. Deletes the lock and every share (never the fence counter), wakes the queue's head;
/// returns 1 if the key was held.
const FORCE_RELEASE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/force_release.lua"),
);

/// KEYS: lock, fence, queue, shares. Returns `{pttl, the live lease's fence (or a 0.3 client's
/// counter) or -1, waiters, holders, shared}`.
const INSPECT_KINDS: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/inspect_kinds.lua"),
);

/// KEYS: holders, fence, queue, heartbeats, size, fence high-water. ARGV: token, ttl ms, mode,
/// waiter ttl ms, signal prefix, signal suffix, signal ttl ms, fence retention ms, permits. The
/// fence is drawn as a lock's (`draw_fence`), kept in the fence key as long as the holders' key.
///
/// A permit when fewer than `permits` (the caller's own) unexpired holders remain and nobody is
/// queued ahead; expired holders (by the server's clock) are dropped first. Replies as
/// [`ACQUIRE`], except that a full semaphore reports the time until its first permit expires.
/// A head granted with permits still free wakes the next head. The size key keeps the `permits`
/// the live holders were granted under (set with each grant, expiring with the holders' key):
/// while holders live, another size is refused with `{-4, size}` (not queued). A size key missing
/// beside live holders (granted by an older version) lets any size in and takes its size.
const PERMIT_ACQUIRE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/join_or_renew.lua"),
    include_str!("lua/shared/queue_place.lua"),
    include_str!("lua/permit_acquire.lua"),
);

/// KEYS: holders, queue, heartbeats, size, fence, fence high-water. ARGV: token, ttl ms (`0`:
/// release), signal prefix, signal suffix, signal ttl ms. Release or extend one permit while it is
/// unexpired (1), else 0. A release, or an extend that brings the permit's expiry forward, wakes
/// the queue's head. The size key and the fence key live as long as the holders' key, and go with
/// the last holder's release (a fence key above the high-water, a 0.3 client's counter, keeps its
/// own expiry: see `above_high_water.lua`).
const PERMIT_SETTLE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/above_high_water.lua"),
    include_str!("lua/permit_settle.lua"),
);

/// KEYS: holders, fence. Returns `{holders, ms until the last expires or -2, last fence (while a
/// holder it was drawn for may live) or -1}`.
const PERMIT_INSPECT: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/permit_inspect.lua"),
);

/// Redlock's shared acquire on one node. KEYS: lock, fence, Redlock queue, Redlock heartbeats,
/// shares, share fences, the node's stamp. ARGV: token, ttl ms, fence granule µs, fence retention
/// ms. Returns `{1, fence}` or `{0, pttl or -3}`; `{-1, -1}` or `{0, ms}` from the node's gate
/// (see [`REDLOCK_ACQUIRE`]). Like [`SHARED_ACQUIRE`] without a reserving queue (see
/// [`REDLOCK_ACQUIRE`]): a live exclusive waiter ranked in the node's Redlock queue makes new
/// readers give way, so a writer polling behind readers gets the key once they drain. A share
/// already held by this token (a retry after a failed round) keeps its fence, as the exclusive
/// script keeps its counter (see `redlock/fence.rs`).
const REDLOCK_SHARED_ACQUIRE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/share_helpers.lua"),
    include_str!("lua/shared/free_if_no_shares.lua"),
    include_str!("lua/shared/redlock_gate.lua"),
    include_str!("lua/redlock_shared_acquire.lua"),
);

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
const REDLOCK_PERMIT_ACQUIRE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/redlock_gate.lua"),
    include_str!("lua/redlock_permit_acquire.lua"),
);

/// KEYS: slots, slot of, expiries, taken slots, size. ARGV: token, ttl ms (`0`: release). Release or extend a
/// Redlock permit on one node while it is unexpired, else 0; a release frees the slot even if
/// expired. A release answers 1, an extend the slot the node holds the token in, plus 1: a
/// permit is a quorum of nodes holding the same slot, so the client counts an extend by slot.
const REDLOCK_PERMIT_SETTLE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/redlock_permit_settle.lua"),
);

/// Redlock's promote on one node. KEYS: lock, fence, shares, share fences. ARGV: token, ttl ms,
/// fence granule µs, fence retention ms. [`PROMOTE`] without the single node's queue (Redlock's
/// queue only ranks, nobody blocks on it) and with Redlock's fence granule: returns `{1, fence}`
/// when the token's share became the exclusive lock (the only live share, or the token holds the
/// lock already: a promote sent again), `{0, pttl}` while other shares live, `{-1, 0}` when the
/// token holds nothing here. The client counts a quorum of grants and settles one fence for them
/// (see `redlock/swap.rs`); the node's horizon is moved before the call, as for an extend.
const REDLOCK_PROMOTE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/promote_check.lua"),
    include_str!("lua/redlock_promote.lua"),
);

/// Redlock's demote on one node. KEYS: lock, Redlock queue, Redlock heartbeats, shares, share
/// fences. ARGV: token, ttl ms, the lease's fence. [`DEMOTE`] without waking anyone: the lock
/// the token holds becomes its share, with the lease's fence as the share's record, and the token
/// leaves the node's Redlock queue (a lease granted to a waiter keeps its place there until its
/// release, and a ranked place makes new readers give way to a writer that no longer waits). A `#shared` key with the token's live share (a demote
/// sent again, or a node where the promote left the share as it was) is renewed and keeps its
/// record, the value that node drew for the token. Returns 1, or 0 when the token holds nothing
/// here.
const REDLOCK_DEMOTE: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/share_helpers.lua"),
    include_str!("lua/redlock_demote.lua"),
);

/// KEYS: a Redlock node's stamp. Returns `{0, 0}` when the node has none, else `{1, ms}`: how long
/// a lease granted or extended on it may still live (see `redlock/gate.rs`).
const REDLOCK_GATE_READ: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/redlock_gate_read.lua"),
);

/// KEYS: a Redlock node's stamp. ARGV: ms, fence retention ms. Stamps a node that has no stamp:
/// it grants nothing for `ms` (how long a lease it may have granted before it lost its data can
/// still live), and its horizon starts there. Returns 1 if it stamped, 0 if a stamp was there
/// already.
const REDLOCK_GATE_INIT: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/redlock_gate_init.lua"),
);

/// KEYS: a Redlock node's stamp. ARGV: ms, fence retention ms. Before an extend: the node's
/// horizon reaches at least `ms` from now. A node without a stamp is left so (it must be stamped by the client first, see
/// [`REDLOCK_GATE_INIT`]). Returns 1 if the stamp is there.
const REDLOCK_GATE_REACH: &str = concat!(
    include_str!("lua/shared/prelude.lua"),
    include_str!("lua/shared/redlock_gate.lua"),
    include_str!("lua/redlock_gate_reach.lua"),
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
const RECORD: &str = include_str!("lua/record.lua");

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
pub(crate) static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND));

pub(crate) static REDLOCK_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_ACQUIRE));
pub(crate) static REDLOCK_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_RELEASE));

pub(crate) static SHARED_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(SHARED_ACQUIRE));
pub(crate) static SHARED_SETTLE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(SHARED_SETTLE));
pub(crate) static RESTORE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RESTORE));
pub(crate) static PROMOTE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PROMOTE));
pub(crate) static DEMOTE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(DEMOTE));
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
pub(crate) static REDLOCK_PROMOTE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_PROMOTE));
pub(crate) static REDLOCK_DEMOTE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_DEMOTE));

pub(crate) static REDLOCK_GATE_READ_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_GATE_READ));
pub(crate) static REDLOCK_GATE_INIT_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_GATE_INIT));
pub(crate) static REDLOCK_GATE_REACH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_GATE_REACH));

pub(crate) static RECORD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RECORD));

pub(crate) static ALL: [&LazyLock<Script>; 27] = [
    &SHARED_ACQUIRE_SCRIPT,
    &SHARED_SETTLE_SCRIPT,
    &PROMOTE_SCRIPT,
    &DEMOTE_SCRIPT,
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
    &REDLOCK_PROMOTE_SCRIPT,
    &REDLOCK_DEMOTE_SCRIPT,
    &ACQUIRE_SCRIPT,
    &RELEASE_SCRIPT,
    &EXTEND_SCRIPT,
    &REDLOCK_ACQUIRE_SCRIPT,
    &REDLOCK_RELEASE_SCRIPT,
    &REDLOCK_GATE_READ_SCRIPT,
    &REDLOCK_GATE_INIT_SCRIPT,
    &REDLOCK_GATE_REACH_SCRIPT,
    &RECORD_SCRIPT,
];

/// Every script's name and text, as the server gets them: what `tests/scripts_compile.rs` compiles
/// (through `leasehold_redis::script_texts`).
pub(crate) static TEXTS: [(&str, &str); 27] = [
    ("SHARED_ACQUIRE", SHARED_ACQUIRE),
    ("SHARED_SETTLE", SHARED_SETTLE),
    ("PROMOTE", PROMOTE),
    ("DEMOTE", DEMOTE),
    ("RESTORE", RESTORE),
    ("FORCE_RELEASE", FORCE_RELEASE),
    ("INSPECT_KINDS", INSPECT_KINDS),
    ("PERMIT_ACQUIRE", PERMIT_ACQUIRE),
    ("PERMIT_SETTLE", PERMIT_SETTLE),
    ("PERMIT_INSPECT", PERMIT_INSPECT),
    ("REDLOCK_SHARED_ACQUIRE", REDLOCK_SHARED_ACQUIRE),
    ("REDLOCK_CLAIM_FENCE", REDLOCK_CLAIM_FENCE),
    ("REDLOCK_CLAIM_SHARE_FENCE", REDLOCK_CLAIM_SHARE_FENCE),
    ("REDLOCK_CLAIM_PERMIT_FENCE", REDLOCK_CLAIM_PERMIT_FENCE),
    ("REDLOCK_PERMIT_ACQUIRE", REDLOCK_PERMIT_ACQUIRE),
    ("REDLOCK_PERMIT_SETTLE", REDLOCK_PERMIT_SETTLE),
    ("REDLOCK_PROMOTE", REDLOCK_PROMOTE),
    ("REDLOCK_DEMOTE", REDLOCK_DEMOTE),
    ("ACQUIRE", ACQUIRE),
    ("RELEASE", RELEASE),
    ("EXTEND", EXTEND),
    ("REDLOCK_ACQUIRE", REDLOCK_ACQUIRE),
    ("REDLOCK_RELEASE", REDLOCK_RELEASE),
    ("REDLOCK_GATE_READ", REDLOCK_GATE_READ),
    ("REDLOCK_GATE_INIT", REDLOCK_GATE_INIT),
    ("REDLOCK_GATE_REACH", REDLOCK_GATE_REACH),
    ("RECORD", RECORD),
];

#[cfg(test)]
mod tests {
    use super::{ALL, TEXTS};
    use redis::Script;

    /// `TEXTS` lists what runs: every script in `ALL`, each once.
    #[test]
    fn texts_are_the_scripts_that_run() {
        let mut run: Vec<String> = ALL.iter().map(|s| s.get_hash().to_owned()).collect();
        let mut listed: Vec<String> = TEXTS
            .iter()
            .map(|(_, text)| Script::new(text).get_hash().to_owned())
            .collect();
        run.sort();
        listed.sort();
        listed.dedup();
        assert_eq!(run, listed);
    }
}
