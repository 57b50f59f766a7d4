//! The user-facing handle over any backend.

use crate::backend::{KeyInfo, LockBackend};
use crate::error::Result;
use crate::key::Key;
use crate::lease::Lease;
use crate::ttl::{check_wait, Ttl};
use std::sync::Arc;
use std::time::Duration;

/// A handle on one backend: validates inputs and hands out [`Lease`] guards. Cheap to clone and safe to
/// share across threads.
#[derive(Clone, Debug)]
pub struct Client {
    backend: Arc<dyn LockBackend>,
}

impl Client {
    pub fn new(backend: impl LockBackend + 'static) -> Self {
        Client {
            backend: Arc::new(backend),
        }
    }

    pub fn from_arc(backend: Arc<dyn LockBackend>) -> Self {
        Client { backend }
    }

    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    /// One attempt; `NotAcquired` if someone else holds the key.
    pub fn try_acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<Lease> {
        let key = Key::new(key)?;
        let ttl = Ttl::new(ttl)?;
        let raw = self.backend.try_acquire(&key, ttl)?;
        Ok(Lease::new(self.backend.clone(), raw))
    }

    /// Waits up to `wait` for the key; `NotAcquired` when the wait runs out. Returns no later than
    /// `wait` plus one I/O timeout.
    pub fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration, wait: Duration) -> Result<Lease> {
        let key = Key::new(key)?;
        let ttl = Ttl::new(ttl)?;
        let wait = check_wait(wait)?;
        let raw = if wait.is_zero() {
            self.backend.try_acquire(&key, ttl)?
        } else {
            self.backend.acquire(&key, ttl, wait)?
        };
        Ok(Lease::new(self.backend.clone(), raw))
    }

    /// What the backend can tell about a key: held or free, time left, last fence.
    pub fn inspect(&self, key: impl AsRef<[u8]>) -> Result<KeyInfo> {
        self.backend.inspect(&Key::new(key)?)
    }

    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }
}
