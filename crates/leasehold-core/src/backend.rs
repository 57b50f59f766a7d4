//! The contract every backend implements.

use crate::error::Result;
use crate::key::Key;
use crate::lease::RawLease;
use crate::ttl::Ttl;
use std::fmt;
use std::time::Duration;

/// A lock backend: blocking, object-safe, shared across threads.
///
/// Inputs arrive validated ([`Key`], [`Ttl`], a wait within [`crate::MAX_WAIT`]); users go through
/// [`crate::Client`], which validates and wraps results in a [`crate::Lease`] guard. Every call must
/// return within its bound: the wait (for `acquire`) plus one connect and one I/O timeout.
pub trait LockBackend: Send + Sync + fmt::Debug {
    /// A short name for logs and metrics: `local`, `redis`, `redlock`, `postgres-advisory`, …
    fn name(&self) -> &'static str;

    /// One attempt. `NotAcquired` if someone else holds the key.
    fn try_acquire(&self, key: &Key, ttl: Ttl) -> Result<RawLease>;

    /// Waits up to `wait` for the key. The default polls [`LockBackend::try_acquire`] with capped,
    /// jittered exponential backoff ([`crate::wait::poll_acquire`]); backends with a native way to wait
    /// override it.
    fn acquire(&self, key: &Key, ttl: Ttl, wait: Duration) -> Result<RawLease> {
        crate::wait::poll_acquire(self, key, ttl, wait)
    }

    /// Compare-and-delete: removes the key only while it still holds this lease's token; `Lost`
    /// otherwise.
    fn release(&self, lease: &mut RawLease) -> Result<()>;

    /// Owner only: the lease now ends `ttl` from now; `Lost` if the key is not ours any more.
    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()>;

    /// What the backend can tell about a key without taking it.
    fn inspect(&self, key: &Key) -> Result<KeyInfo>;
}

/// The state of a key as a backend sees it. Fields a backend cannot know are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyInfo {
    /// Whether someone holds the key now.
    pub held: bool,
    /// The holder's time left, as the backend's clock sees it.
    pub remaining: Option<Duration>,
    /// The last fence handed out for this key.
    pub fence: Option<u64>,
}

impl KeyInfo {
    pub fn new(held: bool, remaining: Option<Duration>, fence: Option<u64>) -> Self {
        KeyInfo {
            held,
            remaining,
            fence,
        }
    }
}
