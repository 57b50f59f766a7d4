//! The user-facing handle over any backend.

use crate::backend::{KeyInfo, LockBackend};
use crate::clock::BootTime;
use crate::error::{Error, Result};
use crate::interrupt::{Interruptible, Interrupts, Watch};
use crate::key::Key;
use crate::kind::{LeaseKind, Permits, MAX_PERMITS};
use crate::lease::Lease;
use crate::raw_lease::RawLease;
use crate::request::Request;
use crate::stats::{self, Event, Stats, StatsSnapshot};
use crate::token::Token;
use crate::ttl::Ttl;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A handle on one backend: validates inputs, counts what happens, and hands out [`Lease`] guards.
/// Cheap to clone (clones share the backend and the counters) and safe to share across threads.
#[derive(Clone, Debug)]
pub struct Client {
    backend: Arc<dyn LockBackend>,
    stats: Arc<Stats>,
    prefix: Arc<str>,
    interrupts: Arc<Interrupts>,
    /// Whether a wait ends on SIGTERM/SIGINT (see [`crate::interrupt`]).
    watch_signals: bool,
    /// `lock_delay_ms` (see [`Client::with_lock_delay`]).
    lock_delay: Duration,
}

impl Client {
    pub fn new(backend: impl LockBackend + 'static) -> Self {
        Self::from_arc(Arc::new(backend))
    }

    pub fn from_arc(backend: Arc<dyn LockBackend>) -> Self {
        Client {
            backend,
            stats: Arc::default(),
            prefix: Arc::from(""),
            interrupts: Arc::default(),
            watch_signals: true,
            lock_delay: Duration::ZERO,
        }
    }

    /// Lock-delay (Chubby's, Consul's): a key whose lease *expired* — its holder crashed or
    /// stalled, and did not release — stays unavailable for `delay` after its expiry, so the late
    /// writes of a paused holder land before anyone else starts; a released key is free at once.
    /// The backend is asked to hold each lease for its TTL plus `delay` (acquire and every extend),
    /// while the holder relies on its TTL only: `remaining()` never counts the delay. The URL
    /// parameter `lock_delay_ms` sets it for clients made by `connect`.
    pub fn with_lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Waits of this client no longer end on SIGTERM or SIGINT (they do by default: see
    /// [`crate::interrupt`]); [`Client::interrupt`] still ends them.
    pub fn without_signal_watch(mut self) -> Self {
        self.watch_signals = false;
        self
    }

    /// Ends every wait in progress on this client and its clones with `Interrupted`, within
    /// [`crate::interrupt::CHECK_EVERY`] plus a round trip. Later waits are not affected; held
    /// leases and their keep-alive are not touched. Safe from any thread.
    pub fn interrupt(&self) {
        self.interrupts.interrupt();
    }

    /// The interrupt switch of this client, for a signal handler of the program's own (flipping it
    /// is one atomic increment).
    pub fn interrupts(&self) -> &Arc<Interrupts> {
        &self.interrupts
    }

    /// This client with `switch` as its interrupt switch (clients that must end together, such as
    /// a C handle's client and the one it reconnects in a fork() child, share one).
    pub fn with_interrupts(mut self, switch: Arc<Interrupts>) -> Self {
        self.interrupts = switch;
        self
    }

    /// A client that counts nothing: only for measuring what the counters cost.
    pub fn without_stats(mut self) -> Self {
        self.stats = Arc::new(Stats::new(false));
        self
    }

    /// Records the key prefix the backend was configured with, for the metrics' `prefix` label.
    pub fn with_prefix_label(mut self, prefix: &str) -> Self {
        self.prefix = Arc::from(prefix);
        self
    }

    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    /// One attempt; `NotAcquired` if someone else holds the key.
    pub fn try_acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<Lease> {
        self.submit(Request::exclusive(key, ttl))
    }

    /// Waits up to `wait` for the key; `NotAcquired` when the wait runs out. Returns no later than
    /// `wait` plus one I/O timeout.
    pub fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration, wait: Duration) -> Result<Lease> {
        self.submit(Request::exclusive(key, ttl).and_then(|r| r.waiting(wait)))
    }

    /// One attempt at a shared (read) lease: granted while no exclusive lease holds the key and no
    /// exclusive request waits for it; any number of shared leases may hold it at once.
    pub fn try_acquire_shared(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<Lease> {
        self.submit(Request::shared(key, ttl))
    }

    /// Waits up to `wait` for a shared lease.
    pub fn acquire_shared(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease> {
        self.submit(Request::shared(key, ttl).and_then(|r| r.waiting(wait)))
    }

    /// One attempt at one of `permits` (1 to 65535) permits of the semaphore `key`: granted while
    /// fewer than `permits` leases hold it. Each permit is a lease of its own. Everyone using one
    /// semaphore should give the same `permits`; each request is judged by its own.
    pub fn try_acquire_permit(
        &self,
        key: impl AsRef<[u8]>,
        permits: u32,
        ttl: Duration,
    ) -> Result<Lease> {
        self.submit(Request::permit(key, permits, ttl))
    }

    /// Waits up to `wait` for a permit of the semaphore `key` (first come, first served).
    pub fn acquire_permit(
        &self,
        key: impl AsRef<[u8]>,
        permits: u32,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease> {
        self.submit(Request::permit(key, permits, ttl).and_then(|r| r.waiting(wait)))
    }

    /// Counts a request this client's methods could not build, or takes the one they built.
    fn submit(&self, request: Result<Request>) -> Result<Lease> {
        let request = request.inspect_err(|e| self.stats.error(e.kind()))?;
        self.acquire_request(&request)
    }

    /// Takes what `request` asks for: one attempt, or a wait of up to its wait (ending early, with
    /// `Interrupted`, on [`Client::interrupt`] and, unless switched off, SIGTERM and SIGINT). The
    /// one path every acquire of every kind takes, from Rust and from C.
    pub fn acquire_request(&self, request: &Request) -> Result<Lease> {
        let (key, ttl, wait) = (request.key(), request.ttl(), request.wait());
        let held = ttl
            .held_with(self.lock_delay)
            .inspect_err(|e| self.stats.error(e.kind()))?;
        self.stats.count(Event::AcquireAttempt);
        let retries_before = stats::retries_so_far();
        let sent = BootTime::now();
        let start = Instant::now();
        // Only a wait watches: blocking the signals costs system calls a single attempt need not pay.
        let watch = if wait.is_zero() {
            Watch::none()
        } else {
            Watch::new(Some(&self.interrupts), self.watch_signals)
        };
        // The backend holds the key for the TTL plus the lock-delay; without one, the request as it is.
        let delayed;
        let asked = if held == ttl {
            request
        } else {
            delayed = request.held_for(held);
            &delayed
        };
        let result = crate::wait::acquire_request(&*self.backend, asked, &watch);
        let elapsed = start.elapsed();
        self.stats
            .retries(stats::retries_so_far().wrapping_sub(retries_before));
        self.stats.wait(elapsed);
        if wait.is_zero() {
            self.stats.round_trip(elapsed);
        }
        match result {
            Ok(mut raw) => {
                // The holder relies on its own TTL, not on the lock-delay the backend holds on.
                raw.shorten(self.lock_delay);
                if wait.is_zero() {
                    // One attempt: whatever the backend retried inside it, and however long the
                    // host slept during it, the key is proven ours only from before the first send.
                    raw.cap_from(ttl, sent);
                }
                self.stats.count(Event::Acquired);
                match raw.kind() {
                    LeaseKind::Shared => self.stats.count(Event::AcquiredShared),
                    LeaseKind::Permit(_) => self.stats.count(Event::AcquiredPermit),
                    _ => {}
                }
                tracing::debug!(target: "leasehold", event = "acquired", backend = self.backend.name(),
                    key = %key, kind = raw.kind().name(), fence = raw.fence(),
                    waited_us = elapsed.as_micros() as u64);
                Ok(self.guard(raw, ttl))
            }
            Err(e) => {
                match &e {
                    Error::NotAcquired(_) => self.stats.count(Event::NotAcquired),
                    Error::Interrupted(why) => {
                        self.stats.error(e.kind());
                        tracing::debug!(target: "leasehold", event = "interrupted",
                            backend = self.backend.name(), key = %key, why = %why);
                    }
                    other => {
                        self.stats.error(other.kind());
                        tracing::warn!(target: "leasehold", event = "backend_error",
                            backend = self.backend.name(), during = "acquire", error = %other,
                            "backend error");
                    }
                }
                Err(e)
            }
        }
    }

    /// The guard over a lease this client's backend granted (or restored).
    fn guard(&self, raw: RawLease, ttl: Ttl) -> Lease {
        Lease::new(
            self.backend.clone(),
            self.stats.clone(),
            raw,
            ttl,
            self.lock_delay,
            Interruptible {
                switch: self.interrupts.clone(),
                signals: self.watch_signals,
            },
        )
    }

    /// Picks up a lease taken elsewhere (another process, a queued job that releases what its
    /// dispatcher took) by its key and its token (32 lowercase hex characters, [`Lease::token`]).
    /// One round trip confirms the token still holds the key. `Lost` when it does not;
    /// `InvalidArgument` for a malformed token and on PostgreSQL advisory (a session owns the lock:
    /// use `lock=table`). The restored lease releases on drop like any other; its TTL for
    /// [`Lease::extend`]-less keep-alive is what was left of the original.
    pub fn restore(&self, key: impl AsRef<[u8]>, token: &str) -> Result<Lease> {
        let checked = (|| {
            let key = Key::new(key.as_ref())?;
            let token = Token::parse(token.as_bytes()).ok_or_else(|| {
                Error::invalid("a lease token is 32 lowercase hexadecimal characters")
            })?;
            Ok((key, token))
        })();
        let (key, token) = checked.inspect_err(|e: &Error| self.stats.error(e.kind()))?;
        let start = Instant::now();
        let result = self.backend.restore(&key, token);
        self.stats.round_trip(start.elapsed());
        match result {
            Ok(mut raw) => {
                raw.shorten(self.lock_delay);
                self.stats.count(Event::Restored);
                tracing::debug!(target: "leasehold", event = "restored", backend = self.backend.name(),
                    key = %key, fence = raw.fence());
                let ttl = Ttl::new(raw.remaining()).unwrap_or(Ttl::MIN);
                Ok(self.guard(raw, ttl))
            }
            Err(e) => {
                if !matches!(e, Error::Lost(_)) {
                    self.stats.error(e.kind());
                }
                Err(e)
            }
        }
    }

    /// Frees `key` whoever holds it: for operators clearing a lock whose holder is known dead.
    /// Returns whether a holder was removed. The holder's next release or extend gives `Lost`.
    /// Counted (`force_released`) and logged as a warning.
    pub fn force_release(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = Key::new(key.as_ref()).inspect_err(|e| self.stats.error(e.kind()))?;
        let result = self.backend.force_release(&key);
        match &result {
            Ok(removed) => {
                self.stats.count(Event::ForceReleased);
                tracing::warn!(target: "leasehold", event = "force_released",
                    backend = self.backend.name(), key = %key, removed = *removed,
                    "lock force-released");
            }
            Err(e) => self.stats.error(e.kind()),
        }
        result
    }

    /// What the backend can tell about a semaphore key: how many permits are held, the longest time
    /// left among them, the last fence.
    pub fn inspect_semaphore(&self, key: impl AsRef<[u8]>) -> Result<KeyInfo> {
        // Inspecting needs no semaphore size; any valid one stands in.
        let permits = Permits::new(MAX_PERMITS)?;
        self.backend
            .inspect(&Key::new(key)?, LeaseKind::Permit(permits))
    }

    /// What the backend can tell about a key: held or free, time left, last fence.
    pub fn inspect(&self, key: impl AsRef<[u8]>) -> Result<KeyInfo> {
        self.backend.inspect(&Key::new(key)?, LeaseKind::Exclusive)
    }

    /// Where the backend's data lives now (which master, replicas acknowledged), if it can tell.
    pub fn topology(&self) -> Option<String> {
        self.backend.topology()
    }

    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// A copy of this client's counters and histograms (shared by its clones and leases).
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The `retries` counter of [`Client::stats`], read alone: a caller that reports the retries
    /// of each acquire reads it before and after, without a snapshot of every counter.
    pub fn retries(&self) -> u64 {
        self.stats.retries_total()
    }

    /// The counters in the Prometheus text format, labelled with the backend and the key prefix
    /// (never a key or a secret), ready to serve on `/metrics`.
    pub fn prometheus(&self) -> String {
        self.stats
            .snapshot()
            .to_prometheus(&[("backend", self.backend.name()), ("prefix", &self.prefix)])
    }
}
