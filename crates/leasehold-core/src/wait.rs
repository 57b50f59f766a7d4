//! Bounded waiting: the polling acquire backends fall back on, the backoff it uses, and the helpers
//! native waits share.

use crate::backend::LockBackend;
use crate::backoff::poll;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::kind::LeaseKind;
use crate::raw_lease::RawLease;
use crate::ttl::Ttl;
use std::time::{Duration, Instant};

pub use crate::backoff::Backoff;

/// The deadline `wait` from now. Waits are bounded by [`crate::MAX_WAIT`], so this cannot overflow;
/// saturate anyway rather than panic.
pub fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait).unwrap_or(now)
}

/// Acquire by polling `try_acquire` until `wait` runs out. Errors other than `NotAcquired` end the wait
/// at once: a caller must be able to tell contention from a broken backend.
pub fn poll_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    key: &Key,
    ttl: Ttl,
    wait: Duration,
) -> Result<RawLease> {
    poll(wait, || backend.try_acquire(key, ttl))
}

/// [`poll_acquire`] for a lease of any kind.
pub fn poll_acquire_as<B: LockBackend + ?Sized>(
    backend: &B,
    key: &Key,
    kind: LeaseKind,
    ttl: Ttl,
    wait: Duration,
) -> Result<RawLease> {
    poll(wait, || backend.try_acquire_as(key, kind, ttl))
}

/// The `NotAcquired` error every backend gives for a key held by someone else.
pub fn held_elsewhere(key: &Key) -> Error {
    Error::NotAcquired(format!("key \"{key}\" is held by another owner"))
}
