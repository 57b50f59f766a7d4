//! The waiter both modes give core's wait loop: their own attempts, with a pause in between that
//! core keeps from running past the holder's expiry (so an expired holder is taken over at once)
//! or the wait's end.

use crate::session::Pools;
use leasehold_core::wait::{Pause, Turn, Waiter, Wake};
use leasehold_core::{Deadline, RawLease, Result};
use std::time::{Duration, Instant};

const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// A mode's attempt: told whether more attempts may follow (a waiting writer marks itself so new
/// readers hold back) and the whole call's bound.
pub(crate) struct Attempts<'a, F> {
    pools: &'a Pools,
    attempt: F,
    pause: Pause,
}

impl<'a, F: FnMut(bool, Deadline) -> Result<Turn>> Attempts<'a, F> {
    pub fn new(pools: &'a Pools, attempt: F) -> Self {
        Attempts {
            pools,
            attempt,
            pause: Pause::between(FIRST_PAUSE, MAX_PAUSE),
        }
    }
}

impl<F: FnMut(bool, Deadline) -> Result<Turn>> Waiter for Attempts<'_, F> {
    fn attempt(&mut self, last: bool, end: Instant) -> Result<Turn> {
        (self.attempt)(!last, self.pools.acquire_until(end))
    }

    fn block(&mut self, wake: Wake) -> Result<Option<RawLease>> {
        self.pause.sleep(wake);
        Ok(None)
    }
}
