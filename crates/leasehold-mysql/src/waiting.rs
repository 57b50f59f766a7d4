//! The waiter both modes give core's wait loop: their own attempts, with a pause in between that
//! core keeps from running past the holder's expiry (so an expired holder is taken over at once)
//! or the wait's end.

use crate::session::Pools;
use leasehold_core::retry::Retry;
use leasehold_core::wait::{Pause, Turn, Waiter, Wake, Woken};
use leasehold_core::{Deadline, Result};
use std::time::{Duration, Instant};

/// A waiter's pace between attempts: MySQL has no wake-up a waiter could block on (a `GET_LOCK`
/// with a timeout would hold a session per waiter and skip the fence and queue checks), so it polls,
/// backing off from 5 ms to 100 ms.
const POLL: Retry = Retry::doubling(Duration::from_millis(5), Duration::from_millis(100));

/// A mode's attempt: told whether more attempts may follow (a waiting writer marks itself so new
/// readers hold back) and the whole call's bound.
pub(crate) struct Attempts<F> {
    /// The whole call's bound: the wait's end plus one call's connect + I/O.
    bound: Deadline,
    attempt: F,
    pause: Pause,
}

impl<F: FnMut(bool, Deadline) -> Result<Turn>> Attempts<F> {
    /// The attempts of a wait that ends at `end`.
    pub fn new(pools: &Pools, end: Instant, attempt: F) -> Self {
        Attempts {
            bound: pools.acquire_until(end),
            attempt,
            pause: Pause::paced(POLL),
        }
    }
}

impl<F: FnMut(bool, Deadline) -> Result<Turn>> Waiter for Attempts<F> {
    fn attempt(&mut self, last: bool, _block_until: Instant) -> Result<Turn> {
        (self.attempt)(!last, self.bound)
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        Ok(self.pause.sleep(wake))
    }
}
