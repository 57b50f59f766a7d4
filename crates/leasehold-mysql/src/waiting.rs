//! The wait both modes use: attempts until the wait runs out, pausing between them no longer than
//! the holder has left (so an expired holder is taken over at once) and never past the wait.

use leasehold_core::{Error, Result};
use std::time::{Duration, Instant};

/// One attempt's outcome.
pub(crate) enum Attempt<T> {
    Got(T),
    /// Held by someone else, with the holder's time left when the server knows it.
    Held(Option<Duration>),
}

const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// Runs `attempt` until it gets the key or `wait` has passed (one attempt at least, one more at
/// the end of the wait). `attempt` is told whether more attempts may follow (a waiting writer
/// marks itself so new readers hold back).
pub(crate) fn wait_for<T>(
    wait: Duration,
    what: &str,
    mut attempt: impl FnMut(bool) -> Result<Attempt<T>>,
) -> Result<T> {
    let end = Instant::now()
        .checked_add(wait)
        .unwrap_or_else(Instant::now);
    let mut pause = FIRST_PAUSE;
    loop {
        let more = Instant::now() < end;
        match attempt(more && !wait.is_zero())? {
            Attempt::Got(x) => return Ok(x),
            Attempt::Held(left) => {
                let now = Instant::now();
                if now >= end {
                    return Err(Error::NotAcquired(format!(
                        "{what} is held by another lease"
                    )));
                }
                let mut sleep = pause.min(end - now);
                if let Some(left) = left {
                    sleep = sleep.min(left + Duration::from_millis(1));
                }
                std::thread::sleep(sleep);
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}
