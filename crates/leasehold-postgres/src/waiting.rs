//! The statements a waiting acquire sends: every wait on an advisory lock is bounded by the server
//! (`lock_timeout`) a little before the client's own bound ends it, so a wait that runs out leaves
//! the session clean (the statement rolled back, SQLSTATE 55P03) instead of poisoned.

use crate::session::{Conn, Pools};
use leasehold_core::{Deadline, Result};
use std::time::{Duration, Instant};

/// `SET LOCAL`s that let the next statements of the transaction wait up to `wait` for a lock, and
/// run for that plus `io`.
pub(crate) fn bounded_wait(wait: Duration, io: Duration) -> String {
    let wait_ms = millis_up(wait);
    let total_ms = wait_ms.saturating_add(io.as_millis() as u64);
    format!("SET LOCAL statement_timeout = {total_ms}; SET LOCAL lock_timeout = {wait_ms}; ")
}

/// Joins a key's wait queue: its queue lock, waited for until `until`, then `LISTEN` on the
/// key's channel, where a release says the key is free. The queue's head (which holds the queue
/// lock already) only listens, after `head_prefix` (table mode bounds every statement).
pub(crate) fn join_queue(
    head: Option<&str>,
    queue: i64,
    channel: &str,
    until: Instant,
    io: Duration,
) -> String {
    if let Some(head_prefix) = head {
        return format!("{head_prefix}LISTEN \"{channel}\"");
    }
    let wait = until.saturating_duration_since(Instant::now());
    format!(
        "{}SELECT pg_advisory_lock({queue}); LISTEN \"{channel}\"",
        bounded_wait(wait, io)
    )
}

/// Sends `enter` (a [`join_queue`] statement) on a session that has not got what it waits for:
/// `Ok(true)` once it is in the queue, `Ok(false)` when the server's `lock_timeout` ended the wait
/// first (SQLSTATE 55P03: the statement rolled back), `Unavailable` saying `what` failed otherwise.
/// One function for every queued wait, so each leaves its session in the same state: poisoned from
/// here on, since it may hold the queue lock and a LISTEN, unless it leaves the queue cleanly later
/// (the caller clears the mark then) or was refused here (a queue lock granted as the timeout fired
/// is given back then, see [`unlock_all`]).
pub(crate) fn enter_queue(
    conn: &mut Conn,
    pools: &Pools,
    enter: &str,
    call: Deadline,
    what: &str,
) -> Result<bool> {
    // From here the session may hold the queue lock and a LISTEN: unless it leaves cleanly, close it.
    conn.poisoned = true;
    match conn.rows_waiting(enter, call) {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some("55P03") => {
            conn.poisoned = false;
            unlock_all(conn, call);
            Ok(false)
        }
        Err(e) => Err(pools.failed(what, &e)),
    }
}

/// After a lock wait ended in `lock_timeout` (55P03): the lock may have been granted all the same,
/// when the holder let go just as the timeout fired (the server then keeps the grant, see
/// `LockErrorCleanup`; likely after a stopped server resumes, when both timers are overdue at once).
/// A session lock survives the error, so the session would go back to the pool holding the key for
/// nobody, with no idle timeout. Give back whatever it holds; if that fails, close it.
pub(crate) fn unlock_all(conn: &mut Conn, deadline: Deadline) {
    if conn.poisoned
        || conn
            .rows("SELECT pg_advisory_unlock_all()", deadline)
            .is_err()
    {
        conn.poisoned = true;
    }
}

/// What one attempt of a waiter at the queue's head found: the grant, or not yet, with how long to
/// wait for a notification at the most. Reading that nap may fail; the failure counts only if the
/// wait goes on (a wait that has run out is refused whatever the answer said).
pub(crate) enum Attempt<T> {
    Granted(T),
    NotYet(Result<Duration>),
}

/// The loop of the queue's head (which LISTENs on the key's channel): `attempt` until it is granted
/// (`Ok(Some(_))`) or `until` passes (`Ok(None)`: the caller leaves the queue and refuses), waiting
/// between attempts for a notification, at most the attempt's nap and never past `until`. An error
/// (of an attempt, of the wait, `what` saying which wait, or the session closing) ends the call at
/// once, the session left as it is (poisoned, since it may still be in the queue). One loop for
/// every queued wait, so all count retries and treat stale notifications alike.
pub(crate) fn wait_at_head<T>(
    conn: &mut Conn,
    pools: &Pools,
    until: Instant,
    what: &str,
    mut attempt: impl FnMut(&mut Conn) -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    let mut retry = false;
    loop {
        if retry {
            leasehold_core::stats::note_retry();
        }
        retry = true;
        // Notifications from before this attempt are stale; the attempt sees the current state.
        conn.drain_notifications();
        let nap = match attempt(conn)? {
            Attempt::Granted(x) => return Ok(Some(x)),
            Attempt::NotYet(nap) => nap,
        };
        let now = Instant::now();
        if now >= until {
            return Ok(None);
        }
        let nap = nap?.min(until.saturating_duration_since(now));
        if let Err(e) = conn.wait_notification(nap) {
            return Err(pools.failed(what, &e));
        }
        if conn.is_closed() {
            return Err(pools.unavailable("PostgreSQL session closed while waiting"));
        }
    }
}

/// Whole milliseconds, rounded up, at least 1 (0 would mean "no timeout" to the server).
fn millis_up(d: Duration) -> u64 {
    (d.as_nanos().div_ceil(1_000_000) as u64).max(1)
}
