//! Background renewal of leases whose holders asked for it: one shared thread per process (not one per
//! lease), renewing each lease at a third of its TTL.
//!
//! The thread only ever holds a `Weak` to a lease, so dropping or freeing the lease stops its renewal;
//! releasing it stops it too. After `fork()` the child has no renewal thread and a registry whose lock
//! a vanished thread may hold, so each process gets a registry of its own
//! ([`crate::fork::PerProcess`]) and the inherited one is left untouched on purpose.

use std::sync::{Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// What the renewal thread renews: a lease, seen only through this (the lease module depends on the
/// registry, never the other way).
pub(crate) trait Renew: Send + Sync {
    /// One renewal attempt, and when to make the next.
    fn renew(&self) -> Next;
}

pub(crate) struct Entry {
    pub(crate) lease: Weak<dyn Renew>,
    pub(crate) due: Instant,
}

/// What the renewal thread should do with a lease after one renewal attempt.
pub(crate) enum Next {
    At(Instant),
    Stop,
}

pub(crate) struct Registry {
    entries: Mutex<Vec<Entry>>,
    wake: Condvar,
}

static CURRENT: crate::fork::PerProcess<Registry> = crate::fork::PerProcess::new();

/// The registry of this process, starting its thread on first use.
pub(crate) fn registry() -> &'static Registry {
    let (reg, made) = CURRENT.get(|| Registry {
        entries: Mutex::new(Vec::new()),
        wake: Condvar::new(),
    });
    if made {
        let spawned = crate::threads::quietly(|| {
            std::thread::Builder::new()
                .name("leasehold-keepalive".into())
                .spawn(move || reg.run())
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the keep-alive thread; leases will not be renewed");
        }
    }
    reg
}

impl Registry {
    pub(crate) fn add(&self, entry: Entry) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.push(entry);
        self.wake.notify_one();
    }

    fn run(&self) {
        loop {
            let due = self.take_due();
            for entry in due {
                let Some(cell) = entry.lease.upgrade() else {
                    continue;
                };
                if let Next::At(at) = cell.renew() {
                    self.add(Entry {
                        lease: entry.lease,
                        due: at,
                    });
                }
            }
        }
    }

    /// Sleeps until at least one entry is due, then takes the due ones out, so renewals (network calls)
    /// run without the registry lock held.
    fn take_due(&self) -> Vec<Entry> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            entries.retain(|e| e.lease.strong_count() > 0);
            let now = Instant::now();
            match entries.iter().map(|e| e.due).min() {
                Some(first) if first <= now => {
                    let (due, later): (Vec<Entry>, Vec<Entry>) =
                        entries.drain(..).partition(|e| e.due <= now);
                    *entries = later;
                    return due;
                }
                Some(first) => {
                    let wait = first.saturating_duration_since(now);
                    entries = self
                        .wake
                        .wait_timeout(entries, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                None => {
                    // Wake now and then to drop entries whose leases were freed.
                    entries = self
                        .wake
                        .wait_timeout(entries, Duration::from_secs(60))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }
}
