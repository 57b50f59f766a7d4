//! The lease guard users hold, over the [`RawLease`] its backend works on.

use crate::backend::LockBackend;
use crate::clock::BootTime;
use crate::error::{Error, Result};
use crate::fork;
use crate::interrupt::{Interruptible, Watch};
use crate::keepalive::{self, Entry, Next, Renew};
use crate::key::Key;
use crate::kind::LeaseKind;
use crate::raw_lease::RawLease;
use crate::session_watch::SessionWatch;
use crate::stats::{Event, Stats};
use crate::token::Token;
use crate::ttl::Ttl;
use crate::wait::{Pause, Turn, Waiter, Wake, Woken};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// A deadline readable without the lease's lock, so `remaining()` never waits behind a renewal that
/// is talking to the backend. Stored as nanoseconds on the boot clock; 0 = expired.
struct PublishedDeadline(AtomicU64);

impl PublishedDeadline {
    fn set(&self, deadline: Option<BootTime>) {
        self.0
            .store(deadline.map_or(0, BootTime::as_nanos), Ordering::Release);
    }

    fn remaining(&self) -> Duration {
        BootTime::from_nanos(self.0.load(Ordering::Acquire)).remaining()
    }
}

pub(crate) struct LeaseCell {
    /// The process that acquired the lease; only it may release, extend or renew it (see
    /// [`Lease::check_owner`]).
    pid: u32,
    backend: Arc<dyn LockBackend>,
    stats: Arc<Stats>,
    key: Key,
    token: Token,
    /// The fence of the latest grant: the acquisition's, or a promotion's.
    fence: AtomicU64,
    kind: LeaseKind,
    /// The kind since the latest promote or demote ([`SWAPPED_EXCLUSIVE`], [`SWAPPED_SHARED`]), or
    /// 0 while it is `kind`. Readable without the state's lock, as the fence is.
    swapped: AtomicU8,
    acquired_at: Instant,
    /// The client's lock-delay: every extend asks the backend for the TTL plus this.
    lock_delay: Duration,
    /// What ends a promote's wait early: the client's interrupt switch and signals.
    waits: Interruptible,
    deadline: PublishedDeadline,
    /// The watch on the database session that holds the lease, for the modes where one does
    /// (PostgreSQL advisory, MySQL named): asked by every read of the remaining time, so that a
    /// session ended by the server or an administrator is not relied on for a moment longer than
    /// its goodbye takes to arrive.
    session: Option<Arc<SessionWatch>>,
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
    /// The shortest TTL asked for by an extend whose outcome is unknown. Such a request may still
    /// reach the server after a later extend has been confirmed, and then set the key's expiry to
    /// its own TTL from that moment: so from then on a confirmed extend sent at `t` proves the key
    /// only until `t` plus the shorter of the two TTLs. Kept for the lease's life, since nothing
    /// bounds how late a request held in the network may arrive.
    unknown_extend: Option<Ttl>,
    /// Set when a release's outcome is unknown: the lease is over for its holder (the release may
    /// run later). A retried release is still allowed, to free the key before its TTL.
    ending: bool,
    /// Told of every failed renewal ([`Lease::on_keep_alive_failure`]).
    on_failure: Option<KeepAliveHook>,
}

const SWAPPED_EXCLUSIVE: u8 = 1;
const SWAPPED_SHARED: u8 = 2;

/// What [`Lease::on_keep_alive_failure`] registers.
pub type KeepAliveHook = Arc<dyn Fn(&Error) + Send + Sync>;

/// Why an extend after a release of unknown outcome is refused: the release may still reach the
/// server after the extend and free the key under a holder who believes it holds.
const ENDED_BY_RELEASE: &str =
    "a release of this lease did not answer; the lease is over (the release may still take effect)";

impl LeaseCell {
    fn lock(&self) -> MutexGuard<'_, LeaseState> {
        // A panic inside a backend call must not make the lease unusable (or unreleasable) forever.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, state: &LeaseState) {
        self.deadline
            .set((!state.released).then(|| state.raw.boot_deadline()));
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
            fence = self.fence.load(Ordering::Acquire),
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
        if state.ending {
            return Err(Error::Lost(ENDED_BY_RELEASE.into()));
        }
        let held = ttl.held_with(self.lock_delay)?;
        // Dated before anything is sent, on the clock that counts a suspended host: whatever the
        // backend does inside the call (retries, a reconnect), the key is only proven ours from here.
        let sent = BootTime::now();
        // Once sent, a shorter extend may run at any moment and end the key sooner than the lease
        // said: it is relied on only until the shorter end while the call is in flight.
        state.raw.cap_from(ttl, sent);
        self.publish(state);
        let start = Instant::now();
        let result = self.backend.extend(&mut state.raw, held);
        self.stats.round_trip(start.elapsed());
        self.settle(state, &result, ttl, sent, what);
        result
    }

    /// Judges a call that renews the lease (extend, promote, demote), sent at `sent` for `ttl`,
    /// and publishes what the holder may now believe.
    fn settle(
        &self,
        state: &mut LeaseState,
        result: &Result<()>,
        ttl: Ttl,
        sent: BootTime,
        what: &str,
    ) {
        match result {
            Ok(()) => {
                state.ttl = ttl;
                let proven = state.unknown_extend.map_or(ttl, |late| late.min(ttl));
                state.raw.cap_from(proven, sent);
            }
            Err(Error::Lost(_)) => {
                self.note_lost(state, what);
                state.raw.expire();
            }
            // Refused before anything was sent, or (promote) another holder is left: nothing
            // changed on the server.
            Err(Error::InvalidArgument(_)) | Err(Error::NotAcquired(_)) => {}
            Err(e) => {
                self.note_error(e, what);
                // The call may or may not have run (a reply lost, a call that timed out), and a
                // server that did not answer in time may have let the key expire: until a later
                // extend is confirmed, nothing proves the key is still ours.
                state.unknown_extend = Some(state.unknown_extend.map_or(ttl, |t| t.min(ttl)));
                state.raw.expire();
            }
        }
        self.publish(state);
    }
}

/// When keep-alive renews a lease next: at a third of its TTL, or sooner when the backend relies on
/// the lease for less than its TTL (PostgreSQL advisory: only as long as the session is proven
/// alive), so the holder's belief never lapses between two renewals.
fn renew_after(state: &LeaseState) -> Duration {
    let third = (state.ttl.as_duration() / 3).min(state.raw.remaining() / 3);
    third.max(Duration::from_millis(5))
}

impl Renew for LeaseCell {
    /// One keep-alive renewal, run by the shared thread.
    fn renew(&self) -> Next {
        let mut state = self.lock();
        if state.released || !state.keep_alive || state.ending {
            state.renewing = false;
            return Next::Stop;
        }
        let ttl = state.ttl;
        match self.extend_locked(&mut state, ttl, "keep-alive") {
            Ok(()) => {
                self.stats.count(Event::KeepAliveRenewal);
                state.keep_alive_error = None;
                Next::At(Instant::now() + renew_after(&state))
            }
            Err(e) => {
                self.stats.count(Event::KeepAliveFailure);
                let lost = matches!(e, Error::Lost(_));
                let hook = state.on_failure.clone();
                state.keep_alive_error = Some(e.clone());
                let next = if lost {
                    self.stats.count(Event::ExtendLost);
                    state.renewing = false;
                    Next::Stop
                } else {
                    // Try again soon: the lease may still be ours if the backend comes back in time.
                    let retry = (ttl.as_duration() / 10)
                        .clamp(Duration::from_millis(5), Duration::from_secs(1));
                    Next::At(Instant::now() + retry)
                };
                // Told without the lease's lock held, so the hook may look at the lease.
                drop(state);
                if let Some(hook) = hook {
                    hook(&e);
                }
                next
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
        lock_delay: Duration,
        waits: Interruptible,
    ) -> Self {
        let cell = LeaseCell {
            waits,
            pid: fork::pid(),
            backend,
            stats,
            key: raw.key().clone(),
            token: raw.token(),
            fence: AtomicU64::new(raw.fence()),
            kind: raw.kind(),
            swapped: AtomicU8::new(0),
            acquired_at: Instant::now(),
            lock_delay,
            deadline: PublishedDeadline(AtomicU64::new(0)),
            session: raw.session_watch().cloned(),
            state: Mutex::new(LeaseState {
                raw,
                ttl,
                released: false,
                keep_alive: false,
                renewing: false,
                keep_alive_error: None,
                loss_noted: false,
                unknown_extend: None,
                ending: false,
                on_failure: None,
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

    /// The backend that granted the lease.
    pub(crate) fn backend(&self) -> &std::sync::Arc<dyn crate::LockBackend> {
        &self.cell.backend
    }

    pub fn token(&self) -> Token {
        self.cell.token
    }

    /// The fencing token: strictly increasing per key. Hand it to the store you protect.
    pub fn fence(&self) -> u64 {
        self.cell.fence.load(Ordering::Acquire)
    }

    /// Exclusive, shared, or a semaphore permit (after [`Lease::promote`] or [`Lease::demote`],
    /// what it is now).
    pub fn kind(&self) -> LeaseKind {
        match self.cell.swapped.load(Ordering::Acquire) {
            SWAPPED_EXCLUSIVE => LeaseKind::Exclusive,
            SWAPPED_SHARED => LeaseKind::Shared,
            _ => self.cell.kind,
        }
    }

    /// Time left on the monotonic clock minus the drift allowance; zero once expired, lost or
    /// released, and for a lease held by a database session (PostgreSQL advisory, MySQL named)
    /// also while anything that arrived unasked on that session's connection, or its close, has
    /// not been followed by an answered call (see [`crate::session_watch`]). Makes no network
    /// call and never waits (for such a lease it polls the session's socket: one system call).
    pub fn remaining(&self) -> Duration {
        let left = self.cell.deadline.remaining();
        match &self.cell.session {
            Some(session) if !left.is_zero() && !session.quiet() => Duration::ZERO,
            _ => left,
        }
    }

    /// Why the session watch makes the lease unproven now, if it does.
    fn session_unproven(&self) -> Option<&'static str> {
        let session = self.cell.session.as_ref()?;
        if session.quiet() {
            return None;
        }
        Some(if session.is_closed() {
            "the connection of the session that holds it closed (the server frees the key with it)"
        } else {
            "something arrived unasked on the connection of the session that holds it (the server              or an administrator may have ended the session, which frees the key): it is not              relied on until a call on the session is answered"
        })
    }

    /// True until the lease is released, lost, or its local deadline has passed (and, for a lease
    /// held by a database session, while [`Lease::remaining`] says the session is not in doubt).
    pub fn is_held(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// A long job's checkpoint between two steps: `Ok` while the lease is held with at least
    /// `margin` left; `Lost` when it was lost or released, when its latest keep-alive renewal failed
    /// (the lease may be gone: stop before relying on it), when the database session that holds it
    /// may have ended (see [`Lease::remaining`]), or when less than `margin` is left, so the job
    /// stops before the lease runs out rather than after. Makes no network call.
    /// `InvalidArgument` in a fork() child for a lease the parent took.
    pub fn checkpoint(&self, margin: Duration) -> Result<()> {
        self.check_owner()?;
        let state = self.cell.lock();
        if state.released {
            return Err(Error::Lost("the lease was released".into()));
        }
        if let Some(error) = &state.keep_alive_error {
            return Err(Error::Lost(format!(
                "its keep-alive renewal failed: {error}"
            )));
        }
        drop(state);
        let left = self.cell.deadline.remaining();
        if !left.is_zero() {
            if let Some(why) = self.session_unproven() {
                return Err(Error::Lost(format!("lease not proven: {why}")));
            }
        }
        if left.is_zero() {
            return Err(Error::Lost(
                "the lease has run out, or a call found it lost or of unknown outcome".into(),
            ));
        }
        if left < margin {
            return Err(Error::Lost(format!(
                "only {} ms of the lease are left, less than the margin of {} ms",
                left.as_millis(),
                margin.as_millis()
            )));
        }
        Ok(())
    }

    /// Whether [`Lease::checkpoint`] with this margin would fail: the lease is lost, released, its
    /// keep-alive failed, or less than `margin` is left.
    pub fn at_risk(&self, margin: Duration) -> bool {
        self.checkpoint(margin).is_err()
    }

    /// True once release was called successfully (or found the lease lost).
    pub fn is_released(&self) -> bool {
        if self.is_inherited() {
            return true;
        }
        self.cell.lock().released
    }

    /// Makes the lease end `ttl` from now. Owner only: `Lost` if the key is not ours any more.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let ttl = Ttl::new(ttl).inspect_err(|e| self.cell.stats.error(e.kind()))?;
        self.check_owner()?;
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

    /// Turns a shared lease exclusive, keeping its token: waits up to `wait` until no other
    /// shared holder is left, then the lease is the key's only holder, with a new fence (larger
    /// than every earlier grant on the key) and its TTL renewed from this call. `NotAcquired` when
    /// the wait runs out (the lease stays shared, as it was); `Interrupted`, the lease still
    /// shared, when SIGTERM, SIGINT or [`crate::Client::interrupt`] ends the wait (as an acquire's,
    /// see [`crate::interrupt`]); `Lost` when it is not ours any more.
    /// Two holders promoting at once wait for each other until one's wait ends: keep waits short,
    /// or release and acquire instead. An outcome the backend did not confirm (a timeout) counts
    /// as a loss, as for [`Lease::extend`]. `InvalidArgument` for a lease that is not shared.
    pub fn promote(&mut self, wait: Duration) -> Result<()> {
        let wait = crate::ttl::check_wait(wait).inspect_err(|e| self.cell.stats.error(e.kind()))?;
        self.check_owner()?;
        if self.kind() != LeaseKind::Shared {
            return Err(Error::invalid(format!(
                "only a shared lease can be promoted; this one is {}",
                self.kind().name()
            )));
        }
        let end = crate::wait::deadline_after(wait);
        // As an acquire's wait: SIGTERM, SIGINT and the client's switch end it, the lease left
        // shared; nothing is watched for a single attempt.
        let watch = if wait.is_zero() {
            Watch::none()
        } else {
            self.cell.waits.watch()
        };
        let mut promotion = Promotion {
            lease: self,
            pause: Pause::new(),
        };
        crate::wait::acquire(
            &mut promotion,
            &self.cell.key,
            LeaseKind::Exclusive,
            end,
            &watch,
        )
    }

    /// Turns an exclusive lease shared, keeping its token and fence, at once: readers may join
    /// from now on. Its TTL is renewed from this call. `Lost` when it is not ours any more;
    /// `InvalidArgument` for a lease that is not exclusive.
    pub fn demote(&mut self) -> Result<()> {
        self.check_owner()?;
        if self.kind() != LeaseKind::Exclusive {
            return Err(Error::invalid(format!(
                "only an exclusive lease can be demoted; this one is {}",
                self.kind().name()
            )));
        }
        self.swap_kind(LeaseKind::Shared, "demote")
    }

    /// One promote or demote attempt, dated and judged as an extend: the lease is proven only
    /// from this send, and an unconfirmed outcome leaves it at zero.
    fn swap_kind(&self, to: LeaseKind, what: &str) -> Result<()> {
        let cell = &self.cell;
        let mut state = cell.lock();
        if state.released {
            return Err(Error::invalid("lease already released"));
        }
        if state.ending {
            return Err(Error::Lost(ENDED_BY_RELEASE.into()));
        }
        let ttl = state.ttl;
        let held = ttl.held_with(cell.lock_delay)?;
        let sent = BootTime::now();
        let start = Instant::now();
        let result = match to {
            LeaseKind::Exclusive => cell.backend.try_promote(&mut state.raw, held),
            _ => cell.backend.demote(&mut state.raw, held),
        };
        cell.stats.round_trip(start.elapsed());
        if result.is_ok() {
            cell.fence.store(state.raw.fence(), Ordering::Release);
            let swapped = match to {
                LeaseKind::Exclusive => SWAPPED_EXCLUSIVE,
                _ => SWAPPED_SHARED,
            };
            cell.swapped.store(swapped, Ordering::Release);
            tracing::debug!(target: "leasehold", event = what, backend = cell.backend.name(),
                key = %cell.key, fence = state.raw.fence());
        }
        cell.settle(&mut state, &result, ttl, sent, what);
        result
    }

    /// Turns background renewal on or off. While on, a shared thread extends the lease by its TTL
    /// every third of the TTL. A renewal that finds the lease lost stops renewing, drops
    /// [`Lease::remaining`] to zero and leaves the error in [`Lease::keep_alive_error`] (and a
    /// `tracing` warning); the next release or extend then gives `Lost`.
    pub fn keep_alive(&self, enabled: bool) -> Result<()> {
        self.check_owner()?;
        let mut state = self.cell.lock();
        if state.released {
            return Err(Error::invalid("lease already released"));
        }
        if enabled && state.ending {
            return Err(Error::Lost(ENDED_BY_RELEASE.into()));
        }
        state.keep_alive = enabled;
        if enabled && !state.renewing {
            state.renewing = true;
            let due = Instant::now() + renew_after(&state);
            keepalive::registry().add(Entry {
                lease: Arc::downgrade(&self.cell) as Weak<dyn Renew>,
                due,
            });
        }
        Ok(())
    }

    /// Calls `hook` on the keep-alive thread each time a renewal fails: with `Lost` once the lease is
    /// lost (renewal then stops), or with the backend's error when a renewal could not reach it (the
    /// lease may be gone; renewal tries again soon). For a program that must stop its work at
    /// once rather than at its next [`Lease::checkpoint`]. The hook must be quick and must not block;
    /// replacing it, or `None`, takes effect for the next failure.
    pub fn on_keep_alive_failure(&self, hook: Option<KeepAliveHook>) -> Result<()> {
        self.check_owner()?;
        self.cell.lock().on_failure = hook;
        Ok(())
    }

    /// Whether background renewal is on.
    pub fn keeps_alive(&self) -> bool {
        !self.is_inherited() && self.cell.lock().keep_alive
    }

    /// The last renewal failure, if the most recent renewal failed. Never silent: also counted in the
    /// client's stats and logged through `tracing`.
    pub fn keep_alive_error(&self) -> Option<Error> {
        if self.is_inherited() {
            return None;
        }
        self.cell.lock().keep_alive_error.clone()
    }

    /// Releases the key if it still holds this lease's token. `Lost` if it does not (the current
    /// holder keeps it).
    ///
    /// The handle is gone afterwards, also when the backend could not be reached (`Unavailable`): no
    /// second attempt is made on drop, so the call stays within its bound; the key then runs out at its
    /// TTL. Use [`Lease::release_in_place`] to keep the handle and retry.
    pub fn release(mut self) -> Result<()> {
        let result = self.release_in_place();
        if result.is_err() && !self.is_inherited() {
            let mut state = self.cell.lock();
            state.released = true;
            state.keep_alive = false;
            self.cell.publish(&state);
        }
        result
    }

    /// Like [`Lease::release`] but keeps the handle, for callers (the C ABI) that free it separately.
    /// A second call gives `InvalidArgument` ("already released").
    ///
    /// After `Unavailable` the release may or may not have run, so the lease is over for its holder:
    /// `remaining()` is zero, keep-alive stops and `extend` gives `Lost`. The release may be tried
    /// again, to free the key before its TTL; a retry that finds the key gone says `Lost` (the first
    /// release may have run, or a session the backend closed may have freed it).
    pub fn release_in_place(&mut self) -> Result<()> {
        self.check_owner()?;
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
                    key = %cell.key, fence = cell.fence.load(Ordering::Acquire));
            }
            Err(Error::Lost(_)) => {
                cell.stats.count(Event::ReleaseLost);
                cell.note_lost(&mut state, "release");
            }
            Err(e) => cell.note_error(e, "release"),
        }
        state.keep_alive = false;
        state.raw.expire();
        if matches!(result, Err(Error::Unavailable(_)) | Err(Error::Internal(_))) {
            state.ending = true;
        } else {
            state.released = true;
        }
        cell.publish(&state);
        result
    }

    /// Gives up the handle without releasing the key (detach): the key stays held until its TTL, and
    /// keep-alive renewal stops. For frameworks whose locks outlive the object that took them (the C
    /// ABI's `leasehold_lease_detach`), a process that must not touch a lease it inherited (a
    /// `fork()` child) and tests that simulate a crash. What the lease holds on the client side (a
    /// PostgreSQL advisory lease's session) is the backend's to keep until the TTL and then close
    /// ([`LockBackend::detach`]); it no longer counts against the client's `pool_size`.
    pub fn forget(self) {
        if self.is_inherited() {
            return; // Drop leaves an inherited lease alone.
        }
        {
            let mut state = self.cell.lock();
            if !state.released {
                // The backend keeps the key through the lock-delay too.
                let ttl = state.ttl;
                let held = ttl.held_with(self.cell.lock_delay).unwrap_or(ttl);
                self.cell.backend.detach(&mut state.raw, held);
            }
            state.released = true;
            state.keep_alive = false;
            self.cell.publish(&state);
        }
        drop(self);
    }

    /// Whether this lease was acquired by another process (this is a `fork()` child that inherited
    /// it). Such a lease belongs to the parent: the child can read its key, token and fence, but
    /// release and extend refuse, and dropping it leaves the parent's lock (and connection) alone.
    pub fn is_inherited(&self) -> bool {
        self.cell.pid != fork::pid()
    }

    /// `Ok` when this process may release, extend or keep the lease alive; otherwise the
    /// InvalidArgument error those calls give (see [`Lease::is_inherited`]).
    pub fn check_owner(&self) -> Result<()> {
        if self.is_inherited() {
            return Err(Error::invalid(
                "lease belongs to another process (it was inherited across fork(); only the \
                 process that acquired it may release, extend or keep it alive)",
            ));
        }
        Ok(())
    }

    /// The name of the backend that granted this lease (`local`, `redis`, …).
    pub fn backend_name(&self) -> &'static str {
        self.cell.backend.name()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.is_inherited() {
            // The parent's lease: releasing would free the parent's lock, and even dropping the
            // backend state could close the parent's connection. Its lock may also be held forever
            // by the parent's renewal thread, which did not survive the fork. Keep it all, untouched.
            fork::keep_forever(self.cell.clone());
            return;
        }
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
            .field("fence", &self.fence())
            .field("remaining", &self.remaining())
            .finish()
    }
}

/// A promote's wait, run by core's one wait loop: each attempt asks the backend to turn the lease
/// exclusive, and a refused attempt pauses with backoff (no backend wakes a promoting reader). The
/// lease stays shared until an attempt succeeds.
struct Promotion<'l> {
    lease: &'l Lease,
    pause: Pause,
}

impl Waiter<()> for Promotion<'_> {
    fn attempt(&mut self, _last: bool, _block_until: Instant) -> Result<Turn<()>> {
        self.lease
            .swap_kind(LeaseKind::Exclusive, "promote")
            .map(Turn::Granted)
    }

    fn block(&mut self, wake: Wake) -> Result<Woken<()>> {
        Ok(self.pause.sleep(wake))
    }

    /// Only an interrupt is new here: an attempt's own error was counted by the attempt.
    fn give_up(&mut self, error: Error) -> Result<()> {
        if matches!(error, Error::Interrupted(_)) {
            let cell = &self.lease.cell;
            cell.stats.error(error.kind());
            tracing::debug!(target: "leasehold", event = "interrupted",
                backend = cell.backend.name(), key = %cell.key, why = %error);
        }
        Err(error)
    }
}
