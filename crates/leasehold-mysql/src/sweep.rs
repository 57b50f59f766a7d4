//! When a client sweeps rows of leases that ended long ago (bounded state per key).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Rows of leases that ended more than this long ago may be swept (µs, for SQL with the server's
/// clock).
pub(crate) const SWEEP_AFTER_US: i64 = 60_000_000;

/// Says "due" at most once per period per client, the first time at once.
pub(crate) struct Every {
    period: Duration,
    started: Instant,
    /// When it was last due, in ms since `started`, plus one (0: never).
    last: AtomicU64,
}

impl Every {
    pub fn minute() -> Every {
        Every {
            period: Duration::from_secs(60),
            started: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// Whether the period has passed since it was last due; only one caller gets `true`.
    pub fn due(&self) -> bool {
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < self.period.as_millis() as u64 {
            return false;
        }
        self.last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}
