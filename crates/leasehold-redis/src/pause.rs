//! What a waiting acquire does between two attempts, before it blocks for a signal: one step for
//! the plain lock's waiter (`single.rs`, whose waiters may be granted the key) and that of shared
//! locks and semaphores (`kinds.rs`, whose waiters are woken to try again), which differ only in
//! what they block for. Core's wait loop says until when.

use leasehold_core::wait::Wake;
use std::time::Duration;

/// Blocks at most this long sleep locally instead of sending a BLPOP: the server's timer could end
/// the BLPOP up to 100 ms late, and a precise one would cost the connection (see
/// `Node::wait_signal`).
const SLEEP_INSTEAD: Duration = Duration::from_millis(3);

/// How a waiter whose attempt was refused blocks for its signal (a wake-up or a grant) until
/// core's `wake` (the holder's expiry, which must be met on time, or the next heartbeat or the
/// wait's end, which may come a server timer tick late, see `Node::wait_signal`): the block's
/// length and whether it must end on time.
///
/// `None`: the block was too short for a `BLPOP` to be served on time and was slept here instead
/// (a signal meanwhile is noticed at most that late: a grant by the next attempt, which finds the
/// waiter's token).
pub(crate) fn block_for(wake: Wake) -> Option<(Duration, bool)> {
    let block = wake.left();
    if block <= SLEEP_INSTEAD {
        std::thread::sleep(block);
        return None;
    }
    Some((block, wake.on_time))
}
