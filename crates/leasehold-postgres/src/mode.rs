//! What a mode of the backend — advisory locks (`advisory.rs`) or a table of leases (`table/`) —
//! is to it: one type per mode, chosen once at connect, each implementing [`LockMode`] beside its
//! own code.
//!
//! The backend (`lib.rs`) keeps what both modes share: the pools, the prefix, the pooler and its
//! refusals. Each call goes to its mode without asking which mode it is, and the mode branches on
//! the lease's kind once.

use crate::ask::Ask;
use crate::session::Pools;
use leasehold_core::wait::Waiter;
use leasehold_core::{Key, KeyInfo, LeaseKind, RawLease, Result, Token, Ttl};
use std::time::Instant;

/// The lease operations of one mode. `prefixed` is `prefix ‖ key`, the bytes every lock id, row
/// key and queue is derived from.
pub(crate) trait LockMode: Send + Sync {
    fn name(&self) -> &'static str;
    /// The table of leases, in the mode that keeps one.
    fn table(&self) -> Option<&str>;
    fn try_acquire(&self, ask: &Ask, kind: LeaseKind) -> Result<RawLease>;
    /// How a waiting acquire waits, driven by core's one wait loop.
    fn waiter<'a>(
        &'a self,
        ask: Ask<'a>,
        kind: LeaseKind,
        end: Instant,
    ) -> Result<Box<dyn Waiter + 'a>>;
    fn inspect(&self, pools: &Pools, prefixed: &[u8], kind: LeaseKind) -> Result<KeyInfo>;
    fn restore(&self, pools: &Pools, prefixed: &[u8], key: &Key, token: Token) -> Result<RawLease>;
    fn force_release(&self, pools: &Pools, prefixed: &[u8]) -> Result<bool>;
    fn release(&self, pools: &Pools, lease: &mut RawLease) -> Result<()>;
    fn extend(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()>;
    fn try_promote(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()>;
    fn demote(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()>;
    fn detach(&self, lease: &mut RawLease, ttl: Ttl);
}
