//! Leasehold's Redis backends: `redis://` (and `rediss://`, the same over TLS), and
//! `redlock://h1,h2,h3[,…]` ([`RedlockBackend`]: one lease over a majority of N independent
//! masters, with a fence that keeps increasing while a majority keeps its data; see `redlock/mod.rs`,
//! `redlock/fence.rs` and `redlock/fanout.rs`).
//!
//! A lease is a Redis key holding the owner's random token with a millisecond expiry. Acquire is
//! one Lua script (SET NX PX plus the lease's fence, or the holder's PTTL on conflict),
//! release is compare-and-delete, extend is compare-and-PEXPIRE; scripts are loaded at connect,
//! sent by SHA (EVALSHA) and reloaded on NOSCRIPT. Keys and tokens travel only as KEYS/ARGV.
//!
//! Promote and demote are one script each (`lua/promote.lua`, `lua/demote.lua`), atomic because a
//! script runs alone on the server: promote turns the lock key from `#shared` into the token only
//! while no other share is live, with a new fence drawn as an exclusive acquire draws one; demote
//! turns the token into `#shared` with its share and the same fence, so the key is never free in
//! between. Redlock does not offer them yet.
//!
//! Waiting is native and first come, first served: a waiting `acquire` joins the key's queue and
//! blocks in `BLPOP` on a list of its own; a release hands an exclusive lock straight to the
//! queue's live head (its token, TTL and fence written by the release script, the grant pushed
//! onto its list), so the waiter wakes holding the lease one message after the release, nobody
//! races for the key, and a holder that asks again at once goes to the back of the line. Shared
//! locks and semaphores wake their head to try again instead. A waiter never blocks
//! past the holder's remaining TTL, so a crashed holder's expiry is noticed on time. See
//! `single.rs` and `scripts.rs` for the details.
//!
//! Fences: a hybrid logical clock per server (per hash slot on a Cluster), drawn inside the acquire
//! script: `fence = max(high-water + 1, the key's own fence + 1, server time in µs)` (from `TIME`).
//! The high-water `{prefix}{fences}` (on a Cluster one per slot, `{prefix}{fences:N}` with `N`
//! chosen so that it hashes to the slot, see `keys.rs`) is set to every fence drawn there and kept
//! for the retention after the last draw, so it lives as long as the server is in use. The key's own
//! fence `{prefix}{h}f:{key}` lives only with its lease: written with the lease's expiry, extended
//! with it, deleted on release (a force-release leaves it to expire with the lease; for a shared
//! lock or a semaphore, it follows the lock key or the holders' key); a resent acquire, restore, inspect and the grant to a waiter read it. A released
//! key leaves nothing behind, so the fence state is one key per server (per slot), not one per
//! key ever locked. The key's own fence is still read when drawing: a counter a 0.3 client left
//! under that name (same name, kept 24 h) is respected, so fences keep rising across an upgrade.
//!
//! While the high-water lives, fences rise by `+ 1` whatever the clock does. When it is lost —
//! the server restarted without persistence, a failover to a replica that missed the last write,
//! an eviction — or has expired, the server's clock takes over, and it is past every fence the
//! lost high-water held: a fence is never ahead of the clock that made it (a script cannot run
//! twice in one microsecond). Fences are about 1.7 × 10^15 today (µs since 1970): never 0, not
//! consecutive, far inside `u64` (and exact in Lua's doubles until the year 2255).
//!
//! The high-water expires 24 h after the last acquisition on the server (the retention,
//! [`RedisBackend::with_fence_retention`]). The bound, in full: **fences keep increasing as long
//! as the server's clock never steps back by more than the time since the key's last fence when
//! the high-water is lost (a restart takes seconds) or expires (a day without any acquisition on
//! the server, or the slot).** That is at least 0.3's tolerance, whose counter per key expired 24 h
//! after that key's last acquisition: the high-water is refreshed by every key's. On failover, the
//! promoted replica's clock must agree with the old master's to within the failover time. Clocks
//! kept by NTP (which slews rather than steps) are far inside both.
//!
//! Redlock keeps a fence counter per key on each node (`f:`, kept the retention after the key's
//! last acquisition) and rounds the clock part to 10 ms so its nodes agree (see
//! `redlock/fence.rs`): its claim rule is per key (a node whose counter already reached the fence
//! asked for answers a value above it, never that fence), and a node-wide high-water would be
//! moved past the asked fence by every other key's draws there, so nodes would seldom agree and
//! rounds would be repeated.
//!
//! Layout, for reuse by Redlock (N independent nodes, `node.rs`): [`keys`] (where a lease lives),
//! `scripts` (the Lua), `connection` (opening connections: timeouts, AUTH, db, TLS), `node` (one
//! server: pools and script calls, each bounded), `single` (the backend of one server, a Cluster
//! or a Sentinel service, which `topology` routes to: `cluster`, `sentinel`, and what those two
//! share in `routing`), `redlock`
//! (Redlock: the backend in `mod.rs`, one quorum round in `round.rs` counted by `tally.rs`, its
//! fence in `fence.rs`, its parallel calls in `fanout.rs` and `pipeline.rs`, its own calls on one
//! node in `node.rs` and `kinds.rs`, how its waiters pace their rounds in `wait.rs`, and in
//! `gate.rs` how a node that lost its data is kept from granting until its leases are over), promote
//! and demote over a quorum in `swap.rs`); shared locks, semaphores, restore and force-release in
//! `kinds` (routed like every call, through `topology`) and `kind_keys` (their key names).
//!
//! Operational notes:
//! - Connections: up to `pool_size` for lease operations plus up to `pool_size` for blocked
//!   waiters, made on demand. A connection that failed mid-call is dropped; when the server is
//!   found gone, every older pooled connection is dropped too, and a call that met a stale pooled
//!   connection is sent once more on a fresh one (so a restart during idle time costs no failed
//!   call). A release resent that way after its first send did run reports `Lost`, never a false
//!   success.
//! - A call that timed out against a hung server may still run when the server wakes up: a late
//!   acquire then holds the key under a token nobody has, until its TTL.
//! - Run Redis with `maxmemory-policy noeviction` (an evicting policy drops exactly the expiring
//!   lock keys): a node whose `INFO memory` shows another policy under a memory limit is refused
//!   (`eviction.rs`) unless the URL says `allow_eviction=true`. Fence state is the high-water,
//!   one small key per server (per Cluster slot used), expiring after the fence retention; a key's
//!   own fence goes with its lease (Redlock nodes keep a counter per key locked in the last 24 h).
//!   A waiter's signal list (`{prefix}s:{token}:{key}`) holds at
//!   most one entry (a wake-up or a grant) and expires after connect + I/O timeout.
//! - Bounds: each operation has one deadline (`acquire`: wait + connect + I/O; the others:
//!   connect and I/O), and its pool checkout, connect, name lookup, resend on a stale connection, commands
//!   and (Redlock) rounds, give-backs and fence claims all draw on it. Host names are resolved
//!   under that deadline (redis-rs's own lookup has no bound); for `rediss://` with a host name the
//!   TLS connect runs on a short-lived thread the caller stops waiting for at the deadline, so the
//!   certificate is still verified against the name.
//! - A waiter renews its queue place every heartbeat (250 ms, see
//!   [`RedisBackend::with_waiter_heartbeat`]); one that stops (a crashed process) is dropped 750 ms
//!   after its last renewal. A key it was due to get stays reserved for it meanwhile, so a crashed
//!   waiter can hold the line up for about 1 s; `try_acquire` too is refused while the key is
//!   reserved for a waiter. Queue keys (`{prefix}q:`, `{prefix}h:`) exist only while someone waits.
//! - Redis ≥ 6 is needed for native waiting (fractional `BLPOP` timeouts); with an older server
//!   `acquire` falls back to core's polling.
//! - `rediss://` verifies the server certificate against the system trust store (`SSL_CERT_FILE` /
//!   `SSL_CERT_DIR` override it), with rustls and the ring provider.

mod bounds;
mod cluster;
mod connection;
mod doctor;
mod errors;
mod eviction;
pub mod fence_gate;
pub mod keys;
mod kind_keys;
mod kinds;
mod node;
mod pause;
mod records;
mod redlock;
mod routing;
mod scripts;
mod sentinel;
mod single;
mod topology;
mod versions;
mod wire;

pub use connection::ConnectSettings;
pub use redlock::RedlockBackend;
pub use single::{RedisBackend, DEFAULT_WAITER_HEARTBEAT};

/// Every Lua script the backend runs, by name, with its text exactly as sent to the server (the
/// pieces in `src/lua/` joined): for `tests/scripts_compile.rs`, which compiles each with
/// `luac5.1`. Not part of the API.
#[doc(hidden)]
pub fn script_texts() -> &'static [(&'static str, &'static str)] {
    &scripts::TEXTS
}
