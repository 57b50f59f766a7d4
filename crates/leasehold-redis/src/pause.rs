//! What a waiting acquire does between two attempts, before it blocks for a signal: one step for
//! the plain lock's wait (`single.rs`, whose waiters may be granted the key) and that of shared
//! locks and semaphores (`kinds.rs`, whose waiters are woken to try again), which differ only in
//! what they block for.

use std::time::{Duration, Instant};

/// A waiter wakes this long after the holder's reported expiry, so its next attempt finds the key
/// already expired on the server rather than a hair before.
const EXPIRY_MARGIN: Duration = Duration::from_millis(1);

/// Blocks at most this long sleep locally instead of sending a BLPOP: the server's timer could end
/// the BLPOP up to 100 ms late, and a precise one would cost the connection (see
/// `Node::wait_signal`).
const SLEEP_INSTEAD: Duration = Duration::from_millis(3);

/// How long a waiter whose attempt was refused blocks for its signal (a wake-up or a grant) before
/// its next attempt: until the holder's expiry (`holder_left`, as that attempt reported it: on
/// time, for a crashed holder), the next `heartbeat`, or the wait's end (`deadline`), whichever
/// comes first, and whether the block must end on time (`precise`: only the expiry needs waking on
/// time; the others may come a server timer tick late, see `Node::wait_signal`).
///
/// `None`: the next attempt is due at once, because the wait is over (that attempt is its final
/// one) or because the block was too short for a `BLPOP` to be served on time and was slept here
/// instead (a signal meanwhile is noticed at most that late: a grant by the next attempt, which
/// finds the waiter's token).
pub(crate) fn before_next_attempt(
    deadline: Instant,
    heartbeat: Duration,
    holder_left: Option<Duration>,
) -> Option<(Duration, bool)> {
    let wait_left = deadline.saturating_duration_since(Instant::now());
    if wait_left.is_zero() {
        return None;
    }
    let mut block = wait_left.min(heartbeat);
    let mut precise = false;
    if let Some(left) = holder_left {
        let expiry = left.saturating_add(EXPIRY_MARGIN);
        if expiry < block {
            block = expiry;
            precise = true;
        }
    }
    if block <= SLEEP_INSTEAD {
        std::thread::sleep(block);
        return None;
    }
    Some((block, precise))
}
