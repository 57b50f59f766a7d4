//! The clock lease deadlines are kept on.
//!
//! A lease's real end is judged by the backend: Redis's and PostgreSQL's TTLs and the local
//! backend's records keep counting while this host is suspended. `CLOCK_MONOTONIC` (what `Instant`
//! reads on Linux) stops during suspend, so a deadline on it would overstate `remaining()` by the
//! time the host slept. `CLOCK_BOOTTIME` is monotonic too but keeps counting through suspend.
//! Elsewhere (no such clock) the monotonic clock is the best there is.

use std::time::{Duration, Instant};

/// A point on the boot clock, as time since boot. Only differences between two of them mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BootTime(Duration);

impl BootTime {
    /// Now.
    pub fn now() -> BootTime {
        BootTime(boot_clock())
    }

    /// The boot-clock reading of an earlier (or later) `Instant`, by the distance between the two
    /// clocks now: exact unless the host suspends in between.
    pub fn from_instant(instant: Instant) -> BootTime {
        let now_instant = Instant::now();
        let now = BootTime::now();
        match instant.checked_duration_since(now_instant) {
            Some(ahead) => now.saturating_add(ahead),
            None => BootTime(now.0.saturating_sub(now_instant - instant)),
        }
    }

    /// The `Instant` that this boot-clock reading corresponds to now (for APIs that speak `Instant`).
    pub fn to_instant(self) -> Instant {
        let now_instant = Instant::now();
        let now = BootTime::now();
        if self >= now {
            now_instant
                .checked_add(self.0 - now.0)
                .unwrap_or(now_instant)
        } else {
            now_instant
                .checked_sub(now.0 - self.0)
                .unwrap_or(now_instant)
        }
    }

    pub fn saturating_add(self, d: Duration) -> BootTime {
        BootTime(self.0.saturating_add(d))
    }

    pub fn saturating_sub(self, d: Duration) -> BootTime {
        BootTime(self.0.saturating_sub(d))
    }

    /// Time from now until this point; zero once passed.
    pub fn remaining(self) -> Duration {
        self.0.saturating_sub(boot_clock())
    }

    /// Nanoseconds since boot, for storing in an atomic.
    pub fn as_nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn from_nanos(nanos: u64) -> BootTime {
        BootTime(Duration::from_nanos(nanos))
    }
}

fn boot_clock() -> Duration {
    raw_boot_clock() + suspend::slept()
}

/// A stand-in for suspending the host, for tests: time the boot clock counts and `Instant` does not.
#[cfg(feature = "conformance")]
mod suspend {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    static SLEPT_NS: AtomicU64 = AtomicU64::new(0);

    pub(super) fn slept() -> Duration {
        Duration::from_nanos(SLEPT_NS.load(Ordering::Relaxed))
    }

    pub fn simulate(d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        SLEPT_NS.fetch_add(ns, Ordering::Relaxed);
    }
}

#[cfg(not(feature = "conformance"))]
mod suspend {
    pub(super) fn slept() -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// Moves the boot clock forward by `d` as if the host had been suspended that long (tests only).
#[cfg(feature = "conformance")]
#[doc(hidden)]
pub fn simulate_suspend(d: Duration) {
    suspend::simulate(d);
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn raw_boot_clock() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return monotonic_fallback();
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn raw_boot_clock() -> Duration {
    monotonic_fallback()
}

/// Time since the first reading in this process, on the monotonic clock.
fn monotonic_fallback() -> Duration {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed() + Duration::from_secs(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_instants() {
        let now = Instant::now();
        let later = now + Duration::from_secs(30);
        let b = BootTime::from_instant(later);
        let r = b.remaining();
        assert!(
            r > Duration::from_secs(29) && r <= Duration::from_secs(30),
            "{r:?}"
        );
        let back = b.to_instant();
        let diff = if back > later {
            back - later
        } else {
            later - back
        };
        // The conversion reads both clocks; a thread preempted between the reads adds its pause.
        assert!(diff < Duration::from_millis(100), "{diff:?}");
        let earlier = BootTime::from_instant(now - Duration::from_millis(10));
        assert_eq!(earlier.remaining(), Duration::ZERO);
        assert!(BootTime::now() >= earlier);
        assert_eq!(BootTime::from_nanos(b.as_nanos()), b);
    }
}
