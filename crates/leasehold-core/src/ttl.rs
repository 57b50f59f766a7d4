//! Validated lease durations and the conservative deadline arithmetic every backend shares.

use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// The longest TTL a lease may have: 7 days. It fits every backend's own limit (PostgreSQL's
/// `idle_session_timeout` stops at about 24.8 days) and keeps all deadline arithmetic far from overflow.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest an `acquire` may wait. Waits are bounded like everything else.
pub const MAX_WAIT: Duration = MAX_TTL;

/// A lease duration between 1 ms and [`MAX_TTL`], in whole milliseconds (what every backend stores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl(u64);

impl Ttl {
    /// The shortest TTL: 1 ms.
    pub const MIN: Ttl = Ttl(1);

    pub fn from_millis(ms: u64) -> Result<Self> {
        if ms == 0 {
            return Err(Error::invalid("ttl must be at least 1 ms"));
        }
        if ms > MAX_TTL.as_millis() as u64 {
            return Err(Error::invalid(format!(
                "ttl of {ms} ms is above the maximum of {} ms (7 days)",
                MAX_TTL.as_millis()
            )));
        }
        Ok(Ttl(ms))
    }

    /// Sub-millisecond parts are rounded up, so a 1.5 ms request is never shortened to 1 ms.
    pub fn new(ttl: Duration) -> Result<Self> {
        if ttl > MAX_TTL {
            return Err(Error::invalid(format!(
                "ttl of {} ms is above the maximum of {} ms (7 days)",
                ttl.as_millis(),
                MAX_TTL.as_millis()
            )));
        }
        let ms = ttl.as_nanos().div_ceil(1_000_000) as u64;
        Self::from_millis(ms)
    }

    pub fn as_millis(self) -> u64 {
        self.0
    }

    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0)
    }

    /// The clock-drift allowance: 1 % of the TTL plus 2 ms (the Redlock paper's figure), subtracted from
    /// every locally computed deadline so `remaining` errs on the side of "already expired".
    pub fn drift(self) -> Duration {
        Duration::from_millis(self.0 / 100 + 2)
    }

    /// The conservative local deadline of a lease granted for this TTL by a request sent at `sent`.
    /// Measuring from the moment the request left (not when the answer came) is what makes it safe.
    pub fn deadline_from(self, sent: Instant) -> Instant {
        let valid = self.as_duration().saturating_sub(self.drift());
        sent.checked_add(valid).unwrap_or(sent)
    }

    /// What the backend is asked to hold a lease for: this TTL plus the client's lock-delay, so that a
    /// key whose holder vanished stays taken for that long after the holder's own deadline.
    pub(crate) fn held_with(self, lock_delay: Duration) -> Result<Ttl> {
        if lock_delay.is_zero() {
            return Ok(self);
        }
        Ttl::new(self.as_duration().saturating_add(lock_delay)).map_err(|_| {
            Error::invalid(format!(
                "a ttl of {} ms plus lock_delay_ms={} is above the maximum ttl of 7 days",
                self.as_millis(),
                lock_delay.as_millis()
            ))
        })
    }
}

/// Validates a wait: anything up to [`MAX_WAIT`].
pub fn check_wait(wait: Duration) -> Result<Duration> {
    if wait > MAX_WAIT {
        return Err(Error::invalid(format!(
            "wait of {} ms is above the maximum of {} ms (7 days)",
            wait.as_millis(),
            MAX_WAIT.as_millis()
        )));
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        for bad in [
            0,
            MAX_TTL.as_millis() as u64 + 1,
            1 << 31,
            1 << 63,
            u64::MAX,
        ] {
            assert!(Ttl::from_millis(bad).is_err(), "{bad}");
        }
        assert_eq!(Ttl::from_millis(1).unwrap().as_millis(), 1);
        assert!(Ttl::from_millis(MAX_TTL.as_millis() as u64).is_ok());
        assert!(Ttl::new(Duration::MAX).is_err());
        assert!(Ttl::new(Duration::from_nanos(1)).unwrap().as_millis() == 1);
        assert!(check_wait(Duration::from_millis(u64::MAX)).is_err());
        assert!(check_wait(Duration::ZERO).is_ok());
    }

    #[test]
    fn deadline_is_conservative_and_never_overflows() {
        let now = Instant::now();
        let ttl = Ttl::from_millis(1000).unwrap();
        assert_eq!(ttl.deadline_from(now), now + Duration::from_millis(988));
        let tiny = Ttl::from_millis(1).unwrap();
        assert_eq!(tiny.deadline_from(now), now);
        let max = Ttl::new(MAX_TTL).unwrap();
        assert!(max.deadline_from(now) > now);
    }
}
