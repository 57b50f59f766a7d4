//! What a mode of the backend — named locks (`named.rs`) or a table of leases (`table.rs`) — is
//! to it: one type per mode, chosen once at connect, each implementing [`LockMode`] beside its own
//! code.
//!
//! The backend (`lib.rs`) keeps what both modes share: the pools and the prefix. Each call goes to
//! its mode without asking which mode it is. `prefixed` is `prefix ‖ key`, what every name and row
//! key is derived from; the calls on a held lease get the prefix instead, so that named mode, which
//! ends its session's lock without naming the key, builds nothing on its release or extend.

use crate::session::Pools;
use crate::Ask;
use leasehold_core::wait::Waiter;
use leasehold_core::{Key, KeyInfo, LeaseKind, RawLease, Result, Token, Ttl};
use std::time::Instant;

/// The lease operations of one mode.
pub(crate) trait LockMode: Send + Sync {
    fn name(&self) -> &'static str;
    /// Whether a lease lives in its session (so an ended session ends it).
    fn session_held(&self) -> bool;
    /// The table this mode's own rows live in: the records table is named after it.
    fn own_table(&self) -> (&str, &'static str);
    /// How an acquire attempts and waits, driven by core's one wait loop (a `try_acquire` is its
    /// final attempt).
    fn waiter<'a>(
        &'a self,
        pools: &'a Pools,
        ask: Ask<'a>,
        kind: LeaseKind,
        end: Instant,
    ) -> Result<Box<dyn Waiter + 'a>>;
    fn release(&self, pools: &Pools, prefix: &str, lease: &mut RawLease) -> Result<()>;
    fn extend(&self, pools: &Pools, prefix: &str, lease: &mut RawLease, ttl: Ttl) -> Result<()>;
    fn try_promote(
        &self,
        pools: &Pools,
        prefix: &str,
        lease: &mut RawLease,
        ttl: Ttl,
    ) -> Result<()>;
    fn demote(&self, pools: &Pools, prefix: &str, lease: &mut RawLease, ttl: Ttl) -> Result<()>;
    fn inspect(&self, pools: &Pools, prefixed: &[u8], kind: LeaseKind) -> Result<KeyInfo>;
    fn restore(&self, pools: &Pools, prefixed: &[u8], key: &Key, token: Token) -> Result<RawLease>;
    fn force_release(&self, pools: &Pools, prefixed: &[u8]) -> Result<bool>;
}
