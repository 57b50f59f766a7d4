//! The contract every backend implements.

use crate::error::{Error, Result};
use crate::key::Key;
use crate::kind::LeaseKind;
use crate::raw_lease::RawLease;
use crate::request::Request;
use crate::token::Token;
use crate::ttl::Ttl;
use crate::wait::Waiter;
use std::fmt;
use std::time::{Duration, Instant};

/// A lock backend: blocking, object-safe, shared across threads.
///
/// Inputs arrive validated ([`Key`], [`Ttl`], a wait within [`crate::MAX_WAIT`]); users go through
/// [`crate::Client`], which validates and wraps results in a [`crate::Lease`] guard. Every call must
/// return within its bound: the wait (for `acquire`) plus one connect and one I/O timeout.
pub trait LockBackend: Send + Sync + fmt::Debug {
    /// A short name for logs and metrics: `local`, `redis`, `redlock`, `postgres-advisory`, …
    fn name(&self) -> &'static str;

    /// One attempt at what `request` asks for ([`Request::kind`]: exclusive, shared or a permit),
    /// held for [`Request::ttl`]; its wait is core's ([`crate::wait::acquire_request`]).
    /// `NotAcquired` if someone else holds the key (or every permit). A backend that does not
    /// offer a kind refuses it with [`unsupported`]; a lease of another kind than exclusive is
    /// marked with [`RawLease::with_kind`]. `release` and `extend` see the kind in the lease.
    fn try_acquire(&self, request: &Request) -> Result<RawLease>;

    /// Compare-and-delete: removes the key only while it still holds this lease's token; `Lost`
    /// otherwise.
    fn release(&self, lease: &mut RawLease) -> Result<()>;

    /// Owner only: the lease now ends `ttl` from now; `Lost` if the key is not ours any more.
    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()>;

    /// One attempt to turn a shared lease exclusive, keeping its token ([`crate::Lease::promote`]):
    /// atomically, when no other live shared holder is left, the key becomes this token's alone;
    /// the lease gets a new fence, larger than every earlier grant on the key
    /// ([`RawLease::set_fence`]), the kind `Exclusive` ([`RawLease::set_kind`]), and the key is held
    /// for `ttl` from this request. `NotAcquired` while another holder is left (nothing changed;
    /// a backend with writer preference lets the attempt hold new readers back, as a waiting
    /// writer does); `Lost` when the token no longer holds the key. Core owns the wait and the
    /// lease's validity. The default refuses: the backend does not offer it.
    fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let _ = (lease, ttl);
        Err(Error::invalid(format!(
            "the {} backend cannot promote a shared lease",
            self.name()
        )))
    }

    /// Turns an exclusive lease shared, keeping its token and fence, at once and atomically (no
    /// moment without a holder, in which a writer could get in): kind `Shared`, held for `ttl`
    /// from this request. `Lost` when the token no longer holds the key. The default refuses.
    fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let _ = (lease, ttl);
        Err(Error::invalid(format!(
            "the {} backend cannot demote an exclusive lease",
            self.name()
        )))
    }

    /// What the backend can tell about a key without taking it: as a lock (`Exclusive` or
    /// `Shared`, one namespace) or as a semaphore (`Permit`; a backend without semaphores refuses
    /// it with [`unsupported`]).
    fn inspect(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo>;

    /// Lets go of a lease without releasing it ([`crate::Lease::forget`], the C ABI's
    /// `leasehold_lease_detach`): the key stays held until its TTL runs out. Called once, by the
    /// process that acquired the lease, and never for a lease inherited across `fork()`. `ttl` is
    /// the TTL the lease was last granted or extended for.
    ///
    /// The default leaks whatever state the lease carries: dropping it could give the key back
    /// early (a closed session frees its locks), and a backend whose leases carry nothing loses
    /// nothing. A backend whose lease holds a connection out of a bounded pool overrides this, so
    /// that detached leases cannot use up the pool: it keeps the connection open, outside the pool,
    /// until the TTL, and then closes it.
    fn detach(&self, lease: &mut RawLease, ttl: Ttl) {
        let _ = ttl;
        if let Some(state) = lease.state.take() {
            std::mem::forget(state);
        }
    }

    /// A waiting acquire's [`Waiter`] for `request`, whose wait ends at `end`: one attempt and a
    /// way to block until woken. Every round trip of the waiter is bounded by `end` plus one call's
    /// connect + I/O, which the waiter works out once, here. The default polls
    /// [`LockBackend::try_acquire`] with backoff ([`crate::wait::Polling`]); a backend with a
    /// native way to wait (a queue, a wake-up) overrides it.
    fn waiter<'a>(&'a self, request: &'a Request, end: Instant) -> Result<Box<dyn Waiter + 'a>> {
        Ok(Box::new(crate::wait::Polling::new(self, request, end)))
    }

    /// The backend's store of small fenced records ([`crate::records`], what `once` remembers), or
    /// `None` when it keeps none.
    fn records(&self) -> Option<&dyn crate::records::RecordStore> {
        None
    }

    /// Where the backend's data lives now, for operators (`leasehold status`): for example which master
    /// a Sentinel names and how many replicas acknowledged the last write. Never a password.
    fn topology(&self) -> Option<String> {
        None
    }

    /// Judges the deployment this backend is connected to (`leasehold doctor`): its settings read
    /// over the backend's own connections, each promise of [`crate::doctor::Promise`] judged by
    /// them. Reports, never refuses: whatever `connect` would refuse is a fact here. Bounded like
    /// any call. The default judges nothing; [`crate::doctor::Diagnosis::complete`] then says so.
    fn diagnose(&self) -> Result<crate::doctor::Diagnosis> {
        Ok(crate::doctor::Diagnosis::new())
    }

    /// Picks up a lease taken elsewhere (another process, a queued job) by its key and token: one
    /// round trip confirms the token still holds the key and reads its fence and time left
    /// ([`RawLease::restored`]). `Lost` when it does not. A backend whose locks belong to a
    /// connection (PostgreSQL advisory) cannot, and says so with `InvalidArgument`.
    fn restore(&self, key: &Key, token: Token) -> Result<RawLease> {
        let _ = (key, token);
        Err(Error::invalid(format!(
            "the {} backend cannot restore a lease taken elsewhere",
            self.name()
        )))
    }

    /// The operator's escape hatch: frees the key whoever holds it. `Ok(true)` if a holder was
    /// removed, `Ok(false)` if the key was free. Fences keep rising across it.
    fn force_release(&self, key: &Key) -> Result<bool> {
        let _ = key;
        Err(Error::invalid(format!(
            "the {} backend cannot force a release",
            self.name()
        )))
    }
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
    /// How many leases hold it now (shared holders or permits; 1 for an exclusive holder), where
    /// the backend can tell.
    pub holders: Option<u32>,
    /// Whether the holders are shared (read) leases, where the backend can tell.
    pub shared: Option<bool>,
}

impl KeyInfo {
    pub fn new(held: bool, remaining: Option<Duration>, fence: Option<u64>) -> Self {
        KeyInfo {
            held,
            remaining,
            fence,
            holders: None,
            shared: None,
        }
    }

    /// Adds how many leases hold the key and whether they are shared.
    pub fn with_holders(mut self, holders: u32, shared: bool) -> Self {
        self.holders = Some(holders);
        self.shared = Some(shared);
        self
    }
}

/// The error of a backend that does not offer a kind of lease.
pub fn unsupported(backend: &str, kind: LeaseKind) -> Error {
    Error::invalid(format!(
        "the {backend} backend does not offer {} leases",
        kind.name()
    ))
}
