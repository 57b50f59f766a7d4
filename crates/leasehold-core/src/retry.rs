//! The pacing of every retry and poll in the library: one policy type, [`Retry`], and the policies
//! shared by several backends as named constants (a backend's own are named constants of this type
//! in its crate).
//!
//! Whatever tries again — a connect while a server restarts, a statement InnoDB rolled back to
//! break a deadlock, a look at a server still ending what it was told to end, a call rerouted
//! during a failover, a waiter with no native wake-up — pauses by its policy and never past its
//! deadline: a retry can make a call slower, never longer than its bound.

use crate::Deadline;
use std::time::Duration;

/// How a call paces its tries: pauses drawn from `[base/2, base]` (jitter, so callers that failed
/// together do not try again together), the base starting at `first` and doubling up to `cap`
/// (`first == cap`: a steady pace), and at most `retries` tries after the first (or as many as the
/// deadline allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    first: Duration,
    cap: Duration,
    retries: u32,
}

impl Retry {
    /// A lock polled by a waiter that cannot be woken: 1 ms doubling to 32 ms, so a release is
    /// noticed within about 32 ms.
    pub const POLL: Retry = Retry::doubling(Duration::from_millis(1), Duration::from_millis(32));

    /// A connection that cannot be opened: 1 ms doubling to 100 ms while the deadline lasts, so a
    /// server restart shorter than the call's bound is ridden out without hammering it.
    pub const RECONNECT: Retry =
        Retry::doubling(Duration::from_millis(1), Duration::from_millis(100));

    /// A fresh connection the server dropped at once (a server in the middle of a restart, the
    /// old process closing what it accepted): three more tries, 20 ms doubling.
    pub const DROPPED_AT_ONCE: Retry =
        Retry::doubling(Duration::from_millis(20), Duration::from_millis(80)).at_most(3);

    /// A node that is unreachable or not the master (a failover under way): failovers take hundreds
    /// of milliseconds, and hammering meanwhile would only load the survivors.
    pub const REROUTE: Retry = Retry::steady(Duration::from_millis(50));

    /// A transaction rolled back for a concurrent writer (a deadlock): it changed nothing, so it is
    /// sent again while the deadline lasts, a few ms of jitter apart so the two parties do not meet
    /// again.
    pub const CONTENTION: Retry = Retry::steady(Duration::from_millis(5));

    /// A server told to end something (a killed session's lock, a forced release) that has not
    /// yet: looked at again every 2 ms.
    pub const SETTLING: Retry = Retry::steady(Duration::from_millis(2));

    /// Pauses from `first` doubling to `cap`, for as long as the deadline allows.
    pub const fn doubling(first: Duration, cap: Duration) -> Retry {
        Retry {
            first,
            cap,
            retries: u32::MAX,
        }
    }

    /// The same pause each time, for as long as the deadline allows.
    pub const fn steady(every: Duration) -> Retry {
        Retry::doubling(every, every)
    }

    /// At most `retries` tries after the first.
    pub const fn at_most(self, retries: u32) -> Retry {
        Retry { retries, ..self }
    }

    /// The pauses alone, for a loop that sleeps on its own terms (a waiter's block).
    pub fn backoff(self) -> Backoff {
        Backoff {
            base: self.first.max(Duration::from_micros(1)),
            cap: self.cap.max(self.first),
            rng: fastrand::Rng::new(),
        }
    }

    /// The tries of one call bounded by `deadline`.
    pub fn start(self, deadline: Deadline) -> Tries {
        Tries {
            backoff: self.backoff(),
            left: self.retries,
            deadline,
        }
    }
}

/// The tries of one call: [`Tries::pause`] before each one after the first.
#[derive(Debug, Clone)]
pub struct Tries {
    backoff: Backoff,
    left: u32,
    deadline: Deadline,
}

impl Tries {
    /// Sleeps before the next try, never past the deadline: false once no try is left (the policy's
    /// count is spent, or the deadline has passed), and then it does not sleep at all.
    pub fn pause(&mut self) -> bool {
        if self.left == 0 || self.deadline.is_past() {
            return false;
        }
        self.left -= 1;
        std::thread::sleep(self.deadline.cap(self.backoff.next_delay()));
        !self.deadline.is_past()
    }
}

/// The pauses of a [`Retry`] policy: capped exponential backoff with jitter. Seeded from the OS
/// per backoff, so callers that start together do not correlate.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    rng: fastrand::Rng,
}

impl Backoff {
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
    fn pauses_grow_to_the_cap_with_jitter() {
        let mut b = Retry::doubling(Duration::from_millis(2), Duration::from_millis(16)).backoff();
        let delays: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(1) && delays[0] <= Duration::from_millis(2));
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(16)));
        assert!(delays[7] >= Duration::from_millis(8));
    }

    #[test]
    fn tries_stop_at_their_count_and_at_the_deadline() {
        let deadline = Deadline::after(Duration::from_secs(5));
        let mut tries = Retry::steady(Duration::from_micros(10))
            .at_most(3)
            .start(deadline);
        assert!(tries.pause() && tries.pause() && tries.pause());
        assert!(!tries.pause(), "three retries, then no more");

        let deadline = Deadline::after(Duration::from_millis(30));
        let mut tries = Retry::steady(Duration::from_millis(20)).start(deadline);
        let mut made = 0;
        while tries.pause() {
            made += 1;
        }
        assert!(made <= 3, "{made} pauses within 30 ms");
        assert!(deadline.is_past());
    }
}
