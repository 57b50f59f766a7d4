//! Queued waits: the statements a waiting acquire sends, and the place in line of a waiter that
//! queues (table mode, and advisory semaphores), which core's one wait loop
//! ([`leasehold_core::wait::acquire`]) drives through each mode's [`leasehold_core::wait::Waiter`].
//!
//! Every wait on an advisory lock is bounded by the server (`lock_timeout`) a little before the
//! client's own bound ends it, so a wait that runs out leaves the session clean (the statement
//! rolled back, SQLSTATE 55P03) instead of poisoned.
//!
//! A line is FIFO on a queue advisory lock (the server's lock queue); its head holds that lock and
//! LISTENs on the line's channel, where a release says the key is free. Newcomers take a free key
//! only while nobody is queued, so a head that stops making attempts (a stopped or wedged process,
//! idle between attempts, so not in any statement) would block the key for every later waiter
//! forever. So the head's session has a short `idle_session_timeout` while it is queued
//! ([`HEAD_IDLE_TIMEOUT`]): the server ends a head that idles that long, which frees the queue lock.
//! A live head never idles that long: its waiter's heartbeat ([`HEAD_HEARTBEAT`]) makes core wake
//! it for an attempt well before. Leaving the line restores the session's idle timeout, so no
//! pooled session keeps the short one (a head granted the key restores it in its granting
//! statement, see [`restore_idle_timeout`]). A waiter blocked inside `pg_advisory_lock` of the queue is in
//! a statement, not idle: once granted, its statement sets the short timeout with the LISTEN.

use crate::session::{Conn, Pools};
use leasehold_core::wait::{Pause, Wake, Woken};
use leasehold_core::{Deadline, Result};
use std::time::{Duration, Instant};

/// How often the queue's head makes an attempt at the least, whatever it waits for: each attempt is
/// a statement, so its session never idles much longer than this while it is queued.
pub(crate) const HEAD_HEARTBEAT: Duration = Duration::from_millis(500);

/// The queued session's `idle_session_timeout`: a head that stops making attempts has its session
/// ended by the server after this long, which frees the queue for the next waiter. Six heartbeats,
/// so a live head on a busy machine keeps its place.
pub(crate) const HEAD_IDLE_TIMEOUT: Duration = Duration::from_secs(3);

/// Where a session keeps its own `idle_session_timeout` while it is queued, for
/// [`restore_idle_timeout`]: a custom setting of the session.
const OWN_IDLE_TIMEOUT: &str = "leasehold.idle_session_timeout";

/// The SQL expression that gives a session about to be (or just) queued [`HEAD_IDLE_TIMEOUT`]
/// (session-level, so it outlasts the statement; rolled back with it if the statement fails).
/// It first keeps the session's own value in [`OWN_IDLE_TIMEOUT`], the first time the session
/// queues: the inner `set_config` is an argument of the outer one, so it runs first, and
/// contributes nothing to the value (`left(…, 0)`). Only that first value is kept, so a session
/// that queued before keeps its own value, never the short one.
pub(crate) fn hold_place() -> String {
    format!(
        "set_config('idle_session_timeout', '{}' || left(set_config('{OWN_IDLE_TIMEOUT}', \
         coalesce(nullif(current_setting('{OWN_IDLE_TIMEOUT}', true), ''), \
                  current_setting('idle_session_timeout')), false), 0), false)",
        HEAD_IDLE_TIMEOUT.as_millis()
    )
}

/// The SQL expression that gives a session back the idle timeout it had before it queued (kept
/// by [`hold_place`]), for a statement that leaves the line on success. (Reading the reset value
/// from `pg_settings` instead costs the server about 0.4 ms: it lists every setting.) A session
/// that never queued has nothing kept, and gets no idle timeout.
pub(crate) fn restore_idle_timeout() -> String {
    format!(
        "set_config('idle_session_timeout', \
         coalesce(nullif(current_setting('{OWN_IDLE_TIMEOUT}', true), ''), '0'), false)"
    )
}

/// `SET LOCAL`s that let the next statements of the transaction wait up to `wait` for a lock, and
/// run for that plus `io`.
pub(crate) fn bounded_wait(wait: Duration, io: Duration) -> String {
    let wait_ms = millis_up(wait);
    let total_ms = wait_ms.saturating_add(io.as_millis() as u64);
    format!("SET LOCAL statement_timeout = {total_ms}; SET LOCAL lock_timeout = {wait_ms}; ")
}

/// Joins a key's wait queue: its queue lock, waited for until `until`, then `LISTEN` on the
/// key's channel, where a release says the key is free, and the short idle timeout of a queued
/// session ([`hold_place`]). The queue's head (which holds the queue lock already, and had the
/// idle timeout set by the statement that took it) only listens, after `head_prefix` (table mode
/// bounds every statement).
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
        "{}SELECT pg_advisory_lock({queue}); LISTEN \"{channel}\"; SELECT {}",
        bounded_wait(wait, io),
        hold_place()
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

/// Where a queued waiter stands.
pub(crate) enum Place {
    /// Not in the line: before the first attempt, or its entry was refused by `lock_timeout` (the
    /// session went back clean).
    Out,
    /// First in line: the session holds the queue lock, LISTENs and has the short idle timeout.
    /// Poisoned until it leaves cleanly, so that an error closes it (which frees all of that).
    Head(Box<Conn>),
    /// Left the line after its final attempt.
    Left,
}

/// The place in line of one queued waiting acquire, and what every mode's queued waiter does the
/// same way: the whole call's bound, entering, blocking at the head, leaving.
pub(crate) struct Line<'a> {
    pub pools: &'a Pools,
    pub queue: i64,
    pub channel: String,
    /// What the wait is, for errors: `wait for the key`, `wait for a permit`.
    what: &'static str,
    place: Place,
    /// The whole call's bound, wait + connect + I/O, that every round trip of the call draws from.
    call: Deadline,
    pause: Pause,
}

impl<'a> Line<'a> {
    /// The line of a wait that ends at `end`.
    pub fn new(
        pools: &'a Pools,
        queue: i64,
        channel: String,
        what: &'static str,
        end: Instant,
    ) -> Line<'a> {
        Line {
            pools,
            queue,
            channel,
            what,
            place: Place::Out,
            call: Deadline::for_acquire_until(end, pools.connect_timeout, pools.io_timeout),
            pause: Pause::new(),
        }
    }

    /// The whole call's bound, wait + connect + I/O, that every round trip of the call draws from.
    pub fn call(&self) -> Deadline {
        self.call
    }

    pub fn is_head(&self) -> bool {
        matches!(self.place, Place::Head(_))
    }

    /// The head's session for its next attempt, with the notifications received so far dropped:
    /// they are stale, the attempt sees the current state.
    pub fn attempting(&mut self) -> Option<&mut Conn> {
        match &mut self.place {
            Place::Head(conn) => {
                conn.drain_notifications();
                Some(conn)
            }
            _ => None,
        }
    }

    /// Sends `enter` (a [`join_queue`] statement) on `conn`, a session that has not got what it
    /// waits for ([`enter_queue`]): `Ok(true)` once it is the line's head, `Ok(false)` when the
    /// server's `lock_timeout` ended the wait first (the session goes back to the pool clean).
    pub fn enter(&mut self, mut conn: Conn, enter: &str, call: Deadline) -> Result<bool> {
        if !enter_queue(&mut conn, self.pools, enter, call, self.what)? {
            return Ok(false);
        }
        self.place = Place::Head(Box::new(conn));
        Ok(true)
    }

    /// Leaves the line by `leave` (its UNLISTEN, and whatever else the head's state needs: the
    /// queue's unlock, the idle timeout restored) and gives the head's session back, with whether
    /// the statement ran. If it did not, the session stays poisoned: closing it also ends its
    /// LISTEN and frees the queue.
    pub fn leave(&mut self, leave: &str, call: Deadline) -> Option<(Conn, bool)> {
        let Place::Head(mut conn) = std::mem::replace(&mut self.place, Place::Left) else {
            return None;
        };
        let left = conn.rows(leave, call).is_ok();
        if left {
            conn.poisoned = false;
        }
        Some((*conn, left))
    }

    /// Leaves the line after a grant whose statement gave back the queue lock and the idle timeout
    /// (see [`restore_idle_timeout`]): the session goes back to the pool at once, its UNLISTEN sent
    /// in front of its next statement ([`crate::session::Session::unlisten_later`]).
    pub fn leave_granted(&mut self) {
        if let Place::Head(mut conn) = std::mem::replace(&mut self.place, Place::Left) {
            conn.unlisten_later(self.channel.clone());
            conn.poisoned = false;
        }
    }

    /// Waits until `wake`: the head for a notification (a release), erroring if its session
    /// closes; a waiter with nothing to wait on sleeps.
    pub fn block(&mut self, wake: Wake) -> Result<Woken> {
        let Place::Head(conn) = &mut self.place else {
            return Ok(self.pause.sleep(wake));
        };
        let notified = match conn.wait_notification(wake.left()) {
            Ok(notified) => notified,
            Err(e) => return Err(self.pools.failed(self.what, &e)),
        };
        if conn.is_closed() {
            return Err(self
                .pools
                .unavailable("PostgreSQL session closed while waiting"));
        }
        Ok(if notified {
            Woken::Attempt
        } else {
            Woken::Quiet
        })
    }

    /// The head wakes for an attempt at least this often, so its session never idles into its
    /// short idle timeout.
    pub fn heartbeat(&self) -> Option<Duration> {
        self.is_head().then_some(HEAD_HEARTBEAT)
    }
}

/// Whole milliseconds, rounded up, at least 1 (0 would mean "no timeout" to the server).
fn millis_up(d: Duration) -> u64 {
    (d.as_nanos().div_ceil(1_000_000) as u64).max(1)
}
