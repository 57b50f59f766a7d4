//! Leasehold's Redis backends: `redis://` (and `rediss://`, the same over TLS), and
//! `redlock://h1,h2,h3[,…]` ([`RedlockBackend`]: one lease over a majority of N independent
//! masters, with a fence that keeps increasing while a majority keeps its data; see `redlock.rs`,
//! `fence.rs` and `fanout.rs`).
//!
//! A lease is a Redis key holding the owner's random token with a millisecond expiry. Acquire is
//! one Lua script (SET NX PX plus the per-key fence INCR, or the holder's PTTL on conflict),
//! release is compare-and-delete, extend is compare-and-PEXPIRE; scripts are loaded at connect,
//! sent by SHA (EVALSHA) and reloaded on NOSCRIPT. Keys and tokens travel only as KEYS/ARGV.
//!
//! Waiting is native and first come, first served: a waiting `acquire` joins the key's queue and
//! blocks in `BLPOP` on a list of its own; a release pushes one signal to the queue's head only,
//! and a free key goes to nobody else, so a handoff costs about one round trip and wakes one
//! waiter, and a holder that asks again at once goes to the back of the line. A waiter never blocks
//! past the holder's remaining TTL, so a crashed holder's expiry is noticed on time. See
//! `single.rs` and `scripts.rs` for the details.
//!
//! Layout, for reuse by Redlock (N independent [`node::Node`]s): [`keys`] (where a lease lives),
//! `scripts` (the Lua), `connection` (opening connections: timeouts, AUTH, db, TLS), [`node`] (one
//! server: pools and script calls, each bounded), `single` (the one-server backend), `redlock`
//! (Redlock's quorum rounds), `fence` (its fence), `fanout` (its parallel calls), `redlock_node`
//! (its own calls on one node) and `redlock_wait` (how its waiters pace their rounds).
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
//!   lock keys). Fence counters (`{prefix}f:{key}`) are kept forever so fences keep increasing: one
//!   small key per distinct lock key. A waiter's signal list (`{prefix}s:{token}:{key}`) holds at
//!   most one entry and expires after connect + I/O timeout.
//! - A waiter renews its queue place every heartbeat (250 ms, see
//!   [`RedisBackend::with_waiter_heartbeat`]); one that stops (a crashed process) is dropped 750 ms
//!   after its last renewal. A key it was due to get stays reserved for it meanwhile, so a crashed
//!   waiter can hold the line up for about 1 s; `try_acquire` too is refused while the key is
//!   reserved for a waiter. Queue keys (`{prefix}q:`, `{prefix}h:`) exist only while someone waits.
//! - Redis ≥ 6 is needed for native waiting (fractional `BLPOP` timeouts); with an older server
//!   `acquire` falls back to core's polling.
//! - `rediss://` verifies the server certificate against the system trust store (`SSL_CERT_FILE` /
//!   `SSL_CERT_DIR` override it), with rustls and the ring provider.

mod connection;
mod errors;
mod fanout;
mod fence;
pub mod keys;
pub mod node;
mod redlock;
mod redlock_node;
mod redlock_wait;
mod scripts;
mod single;

pub use connection::ConnectSettings;
pub use redlock::RedlockBackend;
pub use single::{RedisBackend, DEFAULT_WAITER_HEARTBEAT};
