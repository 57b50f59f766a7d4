//! Leases: the raw record a backend works on, and the guard users hold.

use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::keepalive::{self, Entry, Next};
use crate::key::Key;
use crate::stats::{Event, Stats};
use crate::token::Token;
use crate::ttl::Ttl;
use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
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

    /// Sets the deadline directly, for backends that compute validity themselves (Redlock).
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
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

/// A deadline readable without the lease's lock, so `remaining()` never waits behind a renewal that
/// is talking to the backend. Stored as nanoseconds after a process-wide base instant; 0 = expired.
struct PublishedDeadline(AtomicU64);

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(|| Instant::now() - Duration::from_secs(1))
}

impl PublishedDeadline {
    fn set(&self, deadline: Option<Instant>) {
        let nanos = deadline.map_or(0, |d| {
            u64::try_from(d.saturating_duration_since(base()).as_nanos()).unwrap_or(u64::MAX)
        });
        self.0.store(nanos, Ordering::Release);
    }

    fn remaining(&self) -> Duration {
        let nanos = self.0.load(Ordering::Acquire);
        let deadline = base()
            .checked_add(Duration::from_nanos(nanos))
            .unwrap_or_else(base);
        deadline.saturating_duration_since(Instant::now())
    }
}

pub(crate) struct LeaseCell {
    backend: Arc<dyn LockBackend>,
    stats: Arc<Stats>,
    key: Key,
    token: Token,
    fence: u64,
    acquired_at: Instant,
    deadline: PublishedDeadline,
    state: Mutex<LeaseState>,
}

struct LeaseState {
    raw: RawLease,
    ttl: Ttl,
    released: bool,
    keep_alive: bool,
    /// Whether the renewal thread has an entry for this lease.
    renewing: bool,
    keep_alive_error: Option<Error>,
    /// The loss was already counted and logged (by extend or a renewal); a later release that finds
    /// it lost again must not count it twice, nor call a deletion an expiry.
    loss_noted: bool,
}

impl LeaseCell {
    fn lock(&self) -> MutexGuard<'_, LeaseState> {
        // A panic inside a backend call must not make the lease unusable (or unreleasable) forever.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, state: &LeaseState) {
        self.deadline
            .set((!state.released).then(|| state.raw.deadline()));
    }

    /// Counts a lost lease once, and whether it was lost because its time ran out while held.
    fn note_lost(&self, state: &mut LeaseState, what: &str) {
        if std::mem::replace(&mut state.loss_noted, true) {
            return;
        }
        let expired = state.raw.remaining().is_zero();
        if expired {
            self.stats.count(Event::Expired);
        }
        tracing::warn!(
            target: "leasehold",
            event = if expired { "expired_while_held" } else { "lost" },
            backend = self.backend.name(),
            key = %self.key,
            fence = self.fence,
            during = what,
            "lease lost"
        );
    }

    fn note_error(&self, error: &Error, what: &str) {
        self.stats.error(error.kind());
        tracing::warn!(target: "leasehold", event = "backend_error", backend = self.backend.name(),
            during = what, error = %error, "backend error");
    }

    fn extend_locked(&self, state: &mut LeaseState, ttl: Ttl, what: &str) -> Result<()> {
        let start = Instant::now();
        let result = self.backend.extend(&mut state.raw, ttl);
        self.stats.round_trip(start.elapsed());
        match &result {
            Ok(()) => state.ttl = ttl,
            Err(Error::Lost(_)) => {
                self.note_lost(state, what);
                state.raw.expire();
            }
            Err(e) => self.note_error(e, what),
        }
        self.publish(state);
        result
    }

    /// One keep-alive renewal, run by the shared thread.
    pub(crate) fn renew(&self) -> Next {
        let mut state = self.lock();
        if state.released || !state.keep_alive {
            state.renewing = false;
            return Next::Stop;
        }
        let ttl = state.ttl;
        match self.extend_locked(&mut state, ttl, "keep-alive") {
            Ok(()) => {
                self.stats.count(Event::KeepAliveRenewal);
                state.keep_alive_error = None;
                Next::At(Instant::now() + ttl.as_duration() / 3)
            }
            Err(e) => {
                self.stats.count(Event::KeepAliveFailure);
                let lost = matches!(e, Error::Lost(_));
                state.keep_alive_error = Some(e);
                if lost {
                    self.stats.count(Event::ExtendLost);
                    state.renewing = false;
                    Next::Stop
                } else {
                    // Try again soon: the lease may still be ours if the backend comes back in time.
                    let retry = (ttl.as_duration() / 10)
                        .clamp(Duration::from_millis(5), Duration::from_secs(1));
                    Next::At(Instant::now() + retry)
                }
            }
        }
    }
}

/// A held lease. Dropping it releases the key (errors are logged, not raised); call
/// [`Lease::release`] to see the outcome. A `Lease` keeps its backend alive.
#[must_use = "dropping a Lease releases the lock at once"]
pub struct Lease {
    cell: Arc<LeaseCell>,
}

impl Lease {
    pub(crate) fn new(
        backend: Arc<dyn LockBackend>,
        stats: Arc<Stats>,
        raw: RawLease,
        ttl: Ttl,
    ) -> Self {
        let cell = LeaseCell {
            backend,
            stats,
            key: raw.key().clone(),
            token: raw.token(),
            fence: raw.fence(),
            acquired_at: Instant::now(),
            deadline: PublishedDeadline(AtomicU64::new(0)),
            state: Mutex::new(LeaseState {
                raw,
                ttl,
                released: false,
                keep_alive: false,
                renewing: false,
                keep_alive_error: None,
                loss_noted: false,
            }),
        };
        cell.publish(&cell.lock());
        Lease {
            cell: Arc::new(cell),
        }
    }

    pub fn key(&self) -> &Key {
        &self.cell.key
    }

    pub fn token(&self) -> Token {
        self.cell.token
    }

    /// The fencing token: strictly increasing per key. Hand it to the store you protect.
    pub fn fence(&self) -> u64 {
        self.cell.fence
    }

    /// Time left on the monotonic clock minus the drift allowance; zero once expired, lost or
    /// released. Makes no network call and never waits.
    pub fn remaining(&self) -> Duration {
        self.cell.deadline.remaining()
    }

    /// True until the lease is released, lost, or its local deadline has passed.
    pub fn is_held(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// True once release was called successfully (or found the lease lost).
    pub fn is_released(&self) -> bool {
        self.cell.lock().released
    }

    /// Makes the lease end `ttl` from now. Owner only: `Lost` if the key is not ours any more.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let ttl = Ttl::new(ttl).inspect_err(|e| self.cell.stats.error(e.kind()))?;
        let mut state = self.cell.lock();
        if state.released {
            return Err(Error::invalid("lease already released"));
        }
        let result = self.cell.extend_locked(&mut state, ttl, "extend");
        match &result {
            Ok(()) => self.cell.stats.count(Event::ExtendOk),
            Err(Error::Lost(_)) => self.cell.stats.count(Event::ExtendLost),
            Err(_) => {}
        }
        result
    }

    /// Turns background renewal on or off. While on, a shared thread extends the lease by its TTL
    /// every third of the TTL. A renewal that finds the lease lost stops renewing, drops
    /// [`Lease::remaining`] to zero and leaves the error in [`Lease::keep_alive_error`] (and a
    /// `tracing` warning); the next release or extend then gives `Lost`.
    pub fn keep_alive(&self, enabled: bool) -> Result<()> {
        let mut state = self.cell.lock();
        if state.released {
            return Err(Error::invalid("lease already released"));
        }
        state.keep_alive = enabled;
        if enabled && !state.renewing {
            state.renewing = true;
            let due = Instant::now() + state.ttl.as_duration() / 3;
            keepalive::registry().add(Entry {
                lease: Arc::downgrade(&self.cell),
                due,
            });
        }
        Ok(())
    }

    /// Whether background renewal is on.
    pub fn keeps_alive(&self) -> bool {
        self.cell.lock().keep_alive
    }

    /// The last renewal failure, if the most recent renewal failed. Never silent: also counted in the
    /// client's stats and logged through `tracing`.
    pub fn keep_alive_error(&self) -> Option<Error> {
        self.cell.lock().keep_alive_error.clone()
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
        let cell = &self.cell;
        let mut state = cell.lock();
        if state.released {
            return Err(Error::invalid("lease already released"));
        }
        let start = Instant::now();
        let result = cell.backend.release(&mut state.raw);
        cell.stats.round_trip(start.elapsed());
        match &result {
            Ok(()) => {
                cell.stats.count(Event::ReleaseOk);
                cell.stats.hold(cell.acquired_at.elapsed());
                tracing::debug!(target: "leasehold", event = "released", backend = cell.backend.name(),
                    key = %cell.key, fence = cell.fence);
            }
            Err(Error::Lost(_)) => {
                cell.stats.count(Event::ReleaseLost);
                cell.note_lost(&mut state, "release");
            }
            Err(e) => cell.note_error(e, "release"),
        }
        if !matches!(result, Err(Error::Unavailable(_)) | Err(Error::Internal(_))) {
            state.released = true;
            state.keep_alive = false;
            state.raw.expire();
        }
        cell.publish(&state);
        result
    }

    /// Gives up the handle without releasing the key: the lease runs out at its TTL. For a process
    /// that must not touch a lease it inherited (a `fork()` child) and for tests that simulate a crash.
    /// Backend state (a connection) is leaked, not closed: it may be shared with another process.
    pub fn forget(self) {
        {
            let mut state = self.cell.lock();
            state.released = true;
            state.keep_alive = false;
            if let Some(s) = state.raw.state.take() {
                std::mem::forget(s);
            }
            self.cell.publish(&state);
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
                tracing::debug!(target: "leasehold", error = %e, "release on drop failed");
            }
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("backend", &self.cell.backend.name())
            .field("key", &self.cell.key)
            .field("fence", &self.cell.fence)
            .field("remaining", &self.remaining())
            .finish()
    }
}
