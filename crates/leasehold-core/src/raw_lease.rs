//! What a backend hands out on acquisition and works on for release and extend.

use crate::clock::BootTime;
use crate::key::Key;
use crate::kind::LeaseKind;
use crate::session_watch::SessionWatch;
use crate::token::Token;
use crate::ttl::Ttl;
use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a backend hands out on acquisition and later works on for release and extend: key, token, fence,
/// the conservative local deadline, and any state the backend keeps per lease (such as a held session).
///
/// The deadline is kept on the boot clock ([`crate::clock`]), which counts while the host is suspended
/// as the backends' own TTLs do; the `Instant`-speaking methods convert.
pub struct RawLease {
    key: Key,
    token: Token,
    fence: u64,
    deadline: BootTime,
    kind: LeaseKind,
    /// For a lease held by a database session: how core tells, between calls, that the session
    /// may have ended ([`RawLease::watch_session`]).
    session: Option<Arc<SessionWatch>>,
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
            deadline: BootTime::from_instant(ttl.deadline_from(sent)),
            kind: LeaseKind::Exclusive,
            session: None,
            state: None,
        }
    }

    /// A lease found held by `token` with `remaining` left on the backend's clock, read by a request
    /// sent at `sent` (for [`LockBackend::restore`]). The drift allowance is that of a TTL equal to
    /// what was left.
    pub fn restored(
        key: Key,
        token: Token,
        fence: u64,
        remaining: Duration,
        sent: Instant,
    ) -> Self {
        let ttl = Ttl::new(remaining).unwrap_or(Ttl::MIN);
        let valid = remaining.saturating_sub(ttl.drift());
        RawLease {
            key,
            token,
            fence,
            deadline: BootTime::from_instant(sent.checked_add(valid).unwrap_or(sent)),
            kind: LeaseKind::Exclusive,
            session: None,
            state: None,
        }
    }

    /// Marks a shared or permit lease (leases are exclusive unless a backend says otherwise).
    pub fn with_kind(mut self, kind: LeaseKind) -> Self {
        self.kind = kind;
        self
    }

    pub fn kind(&self) -> LeaseKind {
        self.kind
    }

    /// The kind after a promote or demote ([`crate::LockBackend::try_promote`]).
    pub fn set_kind(&mut self, kind: LeaseKind) {
        self.kind = kind;
    }

    /// The fence of a promotion's grant.
    pub fn set_fence(&mut self, fence: u64) {
        self.fence = fence;
    }

    /// For a lease that a database session holds (the server frees the key when the session
    /// ends): the watch on that session's socket, which [`crate::Lease::remaining`] and
    /// [`crate::Lease::checkpoint`] ask before relying on the deadline, so that the holder stops
    /// relying on the lease as soon as the session's end reaches its socket, with no round trip
    /// (see [`SessionWatch`]). Attached before the lease is handed out; core reads it once then.
    pub fn watch_session(mut self, watch: Arc<SessionWatch>) -> Self {
        self.session = Some(watch);
        self
    }

    /// The watch on the session that holds the lease, if the backend attached one.
    pub fn session_watch(&self) -> Option<&Arc<SessionWatch>> {
        self.session.as_ref()
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

    /// The deadline as an `Instant` (exact unless the host suspends before it is used).
    pub fn deadline(&self) -> Instant {
        self.deadline.to_instant()
    }

    /// The deadline on the boot clock.
    pub fn boot_deadline(&self) -> BootTime {
        self.deadline
    }

    /// Moves the deadline after a successful extend sent at `sent`.
    pub fn renewed(&mut self, ttl: Ttl, sent: Instant) {
        self.deadline = BootTime::from_instant(ttl.deadline_from(sent));
    }

    /// Sets the deadline directly, for backends that compute validity themselves (Redlock).
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = BootTime::from_instant(deadline);
    }

    /// Caps the deadline at what a request sent at `sent` (on the boot clock) for `ttl` could have
    /// given. Core calls this after every confirmed grant or extend with the time it sent the first
    /// request, so that neither a backend's retry nor a host suspended during the round trip can
    /// date the lease later than its first send.
    pub fn cap_from(&mut self, ttl: Ttl, sent: BootTime) {
        let valid = ttl.as_duration().saturating_sub(ttl.drift());
        self.deadline = self.deadline.min(sent.saturating_add(valid));
    }

    /// Relies on the lease no later than `at`, whatever its TTL: for a backend that knows the key
    /// may be freed sooner (PostgreSQL advisory: a session silent for so long is ended by the
    /// server, freeing its locks).
    pub fn cap_at(&mut self, at: Instant) {
        self.deadline = self.deadline.min(BootTime::from_instant(at));
    }

    /// Relies on the lease `by` less than its deadline: what the backend was asked to hold past
    /// the holder's TTL (a lock-delay), the holder does not count on.
    pub fn shorten(&mut self, by: Duration) {
        self.deadline = self.deadline.saturating_sub(by);
    }

    /// Marks the lease as expired now (it was found lost).
    pub fn expire(&mut self) {
        self.deadline = self.deadline.min(BootTime::now());
    }

    /// Time left, conservatively; zero once expired. The deadline only: the holder's view, with
    /// the session watch, is [`crate::Lease::remaining`].
    pub fn remaining(&self) -> Duration {
        self.deadline.remaining()
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
            .field("kind", &self.kind)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}
