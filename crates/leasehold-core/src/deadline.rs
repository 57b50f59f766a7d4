//! One deadline per operation.
//!
//! Every call is bounded (`docs/semantics.md` §4): `acquire` returns within `wait + connect_timeout + io_timeout`,
//! every other call within `connect_timeout + io_timeout`. A backend that gave each step (pool
//! checkout, connect, a retry on a stale connection, a Redlock round) a fresh timeout of its own
//! would add them up past that bound. Instead an operation makes one [`Deadline`] when it starts and
//! every step takes only what is left of it ([`Deadline::cap`]), so the bound holds by construction.

use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// The moment by which an operation must have returned (on the monotonic clock: a bound is about
/// the caller's waiting, not about lease validity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

impl Deadline {
    /// `d` from now. Saturates rather than panics (inputs are bounded far below overflow anyway).
    pub fn after(d: Duration) -> Deadline {
        let now = Instant::now();
        // A century stands in for "no deadline" when `d` does not fit.
        let far = || now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600));
        Deadline(now.checked_add(d).or_else(far).unwrap_or(now))
    }

    pub fn at(instant: Instant) -> Deadline {
        Deadline(instant)
    }

    /// The bound of one call that is not a wait: a connect and one I/O exchange.
    pub fn for_call(connect: Duration, io: Duration) -> Deadline {
        Deadline::after(connect.saturating_add(io))
    }

    /// The bound of an `acquire` that may wait up to `wait`.
    pub fn for_acquire(wait: Duration, connect: Duration, io: Duration) -> Deadline {
        Deadline::after(wait.saturating_add(connect).saturating_add(io))
    }

    /// The bound of a waiting acquire whose wait ends at `end` ([`crate::wait::Waiter::attempt`]
    /// is told `end`): a connect and one I/O exchange past it.
    pub fn for_acquire_until(end: Instant, connect: Duration, io: Duration) -> Deadline {
        let past = connect.saturating_add(io);
        Deadline(end.checked_add(past).unwrap_or(end))
    }

    pub fn instant(self) -> Instant {
        self.0
    }

    /// Time left; zero once past.
    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    pub fn is_past(self) -> bool {
        Instant::now() >= self.0
    }

    /// The earlier of the two.
    pub fn min(self, other: Deadline) -> Deadline {
        Deadline(self.0.min(other.0))
    }

    /// What one step may take: `d`, or less when the deadline is nearer.
    pub fn cap(self, d: Duration) -> Duration {
        d.min(self.remaining())
    }

    /// The time left, or `Unavailable` naming `what` once the deadline has passed, so no step is
    /// started that could only overrun.
    pub fn check(self, what: &str) -> Result<Duration> {
        let left = self.remaining();
        if left.is_zero() {
            return Err(Error::Unavailable(format!(
                "{what}: out of time (the call's connect + I/O timeout is used up)"
            )));
        }
        Ok(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_passes() {
        let d = Deadline::after(Duration::from_millis(50));
        assert!(d.cap(Duration::from_secs(10)) <= Duration::from_millis(50));
        assert_eq!(d.cap(Duration::from_millis(1)), Duration::from_millis(1));
        assert!(d.check("x").is_ok());
        let past = Deadline::after(Duration::ZERO);
        assert!(past.is_past());
        assert_eq!(past.remaining(), Duration::ZERO);
        let e = past.check("pool checkout").unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
        assert!(e.to_string().contains("pool checkout"));
        assert_eq!(d.min(past), past);
        let far = Deadline::after(Duration::MAX);
        assert!(!far.is_past());
    }
}
