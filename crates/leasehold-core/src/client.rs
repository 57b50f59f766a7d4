//! The user-facing handle over any backend.

use crate::backend::{KeyInfo, LockBackend};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::lease::Lease;
use crate::stats::{self, Event, Stats, StatsSnapshot};
use crate::ttl::{check_wait, Ttl};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A handle on one backend: validates inputs, counts what happens, and hands out [`Lease`] guards.
/// Cheap to clone (clones share the backend and the counters) and safe to share across threads.
#[derive(Clone, Debug)]
pub struct Client {
    backend: Arc<dyn LockBackend>,
    stats: Arc<Stats>,
    prefix: Arc<str>,
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
        }
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
        self.acquire_inner(key.as_ref(), ttl, Duration::ZERO)
    }

    /// Waits up to `wait` for the key; `NotAcquired` when the wait runs out. Returns no later than
    /// `wait` plus one I/O timeout.
    pub fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration, wait: Duration) -> Result<Lease> {
        self.acquire_inner(key.as_ref(), ttl, wait)
    }

    fn acquire_inner(&self, key: &[u8], ttl: Duration, wait: Duration) -> Result<Lease> {
        let checked = (|| Ok((Key::new(key)?, Ttl::new(ttl)?, check_wait(wait)?)))();
        let (key, ttl, wait) = checked.inspect_err(|e: &Error| self.stats.error(e.kind()))?;
        self.stats.count(Event::AcquireAttempt);
        let retries_before = stats::retries_so_far();
        let start = Instant::now();
        let result = if wait.is_zero() {
            self.backend.try_acquire(&key, ttl)
        } else {
            self.backend.acquire(&key, ttl, wait)
        };
        let elapsed = start.elapsed();
        self.stats
            .retries(stats::retries_so_far().wrapping_sub(retries_before));
        self.stats.wait(elapsed);
        if wait.is_zero() {
            self.stats.round_trip(elapsed);
        }
        match result {
            Ok(raw) => {
                self.stats.count(Event::Acquired);
                tracing::debug!(target: "leasehold", event = "acquired", backend = self.backend.name(),
                    key = %key, fence = raw.fence(), waited_us = elapsed.as_micros() as u64);
                Ok(Lease::new(
                    self.backend.clone(),
                    self.stats.clone(),
                    raw,
                    ttl,
                ))
            }
            Err(e) => {
                match &e {
                    Error::NotAcquired(_) => self.stats.count(Event::NotAcquired),
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

    /// What the backend can tell about a key: held or free, time left, last fence.
    pub fn inspect(&self, key: impl AsRef<[u8]>) -> Result<KeyInfo> {
        self.backend.inspect(&Key::new(key)?)
    }

    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// A copy of this client's counters and histograms (shared by its clones and leases).
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The counters in the Prometheus text format, labelled with the backend and the key prefix
    /// (never a key or a secret), ready to serve on `/metrics`.
    pub fn prometheus(&self) -> String {
        self.stats
            .snapshot()
            .to_prometheus(&[("backend", self.backend.name()), ("prefix", &self.prefix)])
    }
}
