//! Leases: the raw record a backend works on, and the guard users hold.

use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::token::Token;
use crate::ttl::Ttl;
use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a backend hands out on acquisition and later works on for release and extend: key, token, fence,
/// the conservative local deadline, and any state the backend keeps per lease (such as a held session).
pub struct RawLease {
    key: Key,
    token: Token,
    fence: u64,
    deadline: Instant,
    /// Backend-specific state, for example the database session that holds an advisory lock.
    pub state: Option<Box<dyn Any + Send>>,
}

impl RawLease {
    /// A lease granted for `ttl` by a request that was sent at `sent`.
    pub fn new(key: Key, token: Token, fence: u64, ttl: Ttl, sent: Instant) -> Self {
        RawLease {
            key,
            token,
            fence,
            deadline: ttl.deadline_from(sent),
            state: None,
        }
    }

    pub fn with_state(mut self, state: impl Any + Send) -> Self {
        self.state = Some(Box::new(state));
        self
    }

    pub fn key(&self) -> &Key {
        &self.key
    }

    pub fn token(&self) -> Token {
        self.token
    }

    pub fn fence(&self) -> u64 {
        self.fence
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Moves the deadline after a successful extend sent at `sent`.
    pub fn renewed(&mut self, ttl: Ttl, sent: Instant) {
        self.deadline = ttl.deadline_from(sent);
    }

    /// Marks the lease as expired now (it was found lost).
    pub fn expire(&mut self) {
        self.deadline = self.deadline.min(Instant::now());
    }

    /// Time left, conservatively; zero once expired.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    pub fn state_mut<T: 'static>(&mut self) -> Option<&mut T> {
        self.state.as_mut()?.downcast_mut()
    }

    pub fn take_state<T: 'static>(&mut self) -> Option<T> {
        let boxed = self.state.take()?;
        match boxed.downcast::<T>() {
            Ok(t) => Some(*t),
            Err(other) => {
                self.state = Some(other);
                None
            }
        }
    }
}

impl fmt::Debug for RawLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawLease")
            .field("key", &self.key)
            .field("fence", &self.fence)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

pub(crate) struct LeaseCell {
    backend: Arc<dyn LockBackend>,
    state: Mutex<LeaseState>,
}

struct LeaseState {
    raw: RawLease,
    released: bool,
}

impl LeaseCell {
    fn lock(&self) -> MutexGuard<'_, LeaseState> {
        // A panic inside a backend call must not make the lease unusable (or unreleasable) forever.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A held lease. Dropping it releases the key (errors are logged, not raised); call
/// [`Lease::release`] to see the outcome. A `Lease` keeps its backend alive.
#[must_use = "dropping a Lease releases the lock at once"]
pub struct Lease {
    cell: Arc<LeaseCell>,
}

impl Lease {
    pub(crate) fn new(backend: Arc<dyn LockBackend>, raw: RawLease) -> Self {
        Lease {
            cell: Arc::new(LeaseCell {
                backend,
                state: Mutex::new(LeaseState {
                    raw,
                    released: false,
                }),
            }),
        }
    }

    pub fn key(&self) -> Key {
        self.cell.lock().raw.key.clone()
    }

    pub fn token(&self) -> Token {
        self.cell.lock().raw.token
    }

    /// The fencing token: strictly increasing per key. Hand it to the store you protect.
    pub fn fence(&self) -> u64 {
        self.cell.lock().raw.fence
    }

    /// Time left on the monotonic clock minus the drift allowance; zero once expired or released.
    /// Makes no network call.
    pub fn remaining(&self) -> Duration {
        let state = self.cell.lock();
        if state.released {
            Duration::ZERO
        } else {
            state.raw.remaining()
        }
    }

    /// True until the lease is released, or its local deadline has passed.
    pub fn is_held(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// True once release was called successfully (or found the lease lost).
    pub fn is_released(&self) -> bool {
        self.cell.lock().released
    }

    /// Makes the lease end `ttl` from now. Owner only: `Lost` if the key is not ours any more.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let ttl = Ttl::new(ttl)?;
        let mut state = self.cell.lock();
        if state.released {
            return Err(Error::invalid("lease already released"));
        }
        let result = self.cell.backend.extend(&mut state.raw, ttl);
        if matches!(result, Err(Error::Lost(_))) {
            state.raw.expire();
        }
        result
    }

    /// Releases the key if it still holds this lease's token. `Lost` if it does not (the current
    /// holder keeps it).
    pub fn release(mut self) -> Result<()> {
        self.release_in_place()
    }

    /// Like [`Lease::release`] but keeps the handle, for callers (the C ABI) that free it separately.
    /// A second call gives `InvalidArgument` ("already released"). After `Unavailable` the lease is still
    /// held and the release may be tried again.
    pub fn release_in_place(&mut self) -> Result<()> {
        let mut state = self.cell.lock();
        if state.released {
            return Err(Error::invalid("lease already released"));
        }
        let result = self.cell.backend.release(&mut state.raw);
        if !matches!(result, Err(Error::Unavailable(_)) | Err(Error::Internal(_))) {
            state.released = true;
            state.raw.expire();
        }
        result
    }

    /// Gives up the handle without releasing the key: the lease runs out at its TTL. For a process
    /// that must not touch a lease it inherited (a `fork()` child), and for tests that simulate a crash.
    pub fn forget(self) {
        {
            let mut state = self.cell.lock();
            state.released = true;
            // The backend state (a connection shared with the parent, say) must not be closed here.
            if let Some(s) = state.raw.state.take() {
                std::mem::forget(s);
            }
        }
        drop(self);
    }

    /// The name of the backend that granted this lease (`local`, `redis`, …).
    pub fn backend_name(&self) -> &'static str {
        self.cell.backend.name()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let held = !self.cell.lock().released;
        if held {
            if let Err(e) = self.release_in_place() {
                tracing::debug!(error = %e, "release on drop failed");
            }
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.cell.lock();
        f.debug_struct("Lease")
            .field("backend", &self.cell.backend.name())
            .field("key", &state.raw.key)
            .field("fence", &state.raw.fence)
            .field("released", &state.released)
            .field("remaining", &state.raw.remaining())
            .finish()
    }
}
