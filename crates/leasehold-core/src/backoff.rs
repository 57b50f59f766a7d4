//! Capped, jittered exponential backoff: the pause of a waiter that cannot be woken
//! ([`crate::wait::Pause`]) and of other retries.

use std::time::Duration;

/// Capped exponential backoff with jitter: each delay is drawn uniformly from `[base/2, base]` and the
/// base doubles up to the cap. The jitter keeps waiters that started together from retrying together.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    rng: fastrand::Rng,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Self {
        Backoff {
            base: first.max(Duration::from_micros(100)),
            cap: cap.max(first),
            // Seeded from the OS per backoff, so waiters that start together do not correlate.
            rng: fastrand::Rng::new(),
        }
    }

    /// The default for polling a lock: 1 ms doubling to 32 ms, so a waiter notices a release within
    /// about 32 ms even without a native wake-up.
    pub fn for_polling() -> Self {
        Backoff::new(Duration::from_millis(1), Duration::from_millis(32))
    }

    pub fn next_delay(&mut self) -> Duration {
        let base = self.base.as_micros() as u64;
        let delay = self.rng.u64(base / 2..=base);
        self.base = (self.base * 2).min(self.cap);
        Duration::from_micros(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(2), Duration::from_millis(16));
        let delays: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(1) && delays[0] <= Duration::from_millis(2));
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(16)));
        assert!(delays[7] >= Duration::from_millis(8));
    }
}
