//! Bounded waiting: the polling loop backends fall back on, and the backoff it uses.

use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::lease::RawLease;
use crate::ttl::Ttl;
use std::time::{Duration, Instant};

/// Capped exponential backoff with jitter: each delay is drawn uniformly from `[base/2, base]` and the
/// base doubles up to the cap. The jitter keeps waiters that started together from retrying together.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    rng: u64,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Self {
        let mut seed = [0u8; 8];
        // Jitter needs no cryptographic quality; a fixed seed would only make waiters correlate.
        let _ = getrandom::fill(&mut seed);
        Backoff {
            base: first.max(Duration::from_micros(100)),
            cap: cap.max(first),
            rng: u64::from_le_bytes(seed) | 1,
        }
    }

    /// The default for polling a lock: 1 ms doubling to 32 ms, so a waiter notices a release within
    /// about 32 ms even without a native wake-up.
    pub fn for_polling() -> Self {
        Backoff::new(Duration::from_millis(1), Duration::from_millis(32))
    }

    pub fn next_delay(&mut self) -> Duration {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let base = self.base.as_micros() as u64;
        let delay = base / 2 + r % (base / 2 + 1);
        self.base = (self.base * 2).min(self.cap);
        Duration::from_micros(delay)
    }
}

/// The deadline `wait` from now. Waits are bounded by [`crate::MAX_WAIT`], so this cannot overflow;
/// saturate anyway rather than panic.
pub fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait).unwrap_or(now)
}

/// Acquire by polling `try_acquire` until `wait` runs out. Errors other than `NotAcquired` end the wait
/// at once: a caller must be able to tell contention from a broken backend.
pub fn poll_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    key: &Key,
    ttl: Ttl,
    wait: Duration,
) -> Result<RawLease> {
    let deadline = deadline_after(wait);
    let mut backoff = Backoff::for_polling();
    loop {
        match backend.try_acquire(key, ttl) {
            Err(Error::NotAcquired(msg)) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(Error::NotAcquired(msg));
                }
                std::thread::sleep(backoff.next_delay().min(deadline - now));
                crate::stats::note_retry();
            }
            other => return other,
        }
    }
}

/// The `NotAcquired` error every backend gives for a key held by someone else.
pub fn held_elsewhere(key: &Key) -> Error {
    Error::NotAcquired(format!("key \"{key}\" is held by another owner"))
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
