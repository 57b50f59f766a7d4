//! Advisory mode: a session advisory lock held by a session that the lease owns for its whole life.
//!
//! The TTL is the session's `idle_session_timeout`, set in the acquiring statement and moved by extend:
//! a holder that goes silent past its TTL has its session ended by the server, which frees the lock. A
//! holder whose process dies frees it as soon as the server sees the connection close; one whose host
//! vanishes, within [`crate::session::SERVER_DEAD_PEER`] (server-side TCP keepalives and user timeout).
//! The fence is drawn after the lock is granted, in the same round trip ([`fence_expr`]).
//!
//! A semaphore has one size while it has holders: a permit's session also holds a size lock
//! ([`semaphore_size_id`]: the semaphore's id with the size in its low 16 bits) in shared mode, and
//! every permit attempt, under the semaphore's grant lock for its transaction, looks in `pg_locks`
//! for one with another size first ([`permit_check`]); finding one, it takes nothing and the
//! acquire is refused. The size lock goes with the slot (released together, or with the session).

use crate::lock_id::{lock_id, semaphore_internal, semaphore_size_id, semaphore_slot_sql};
use crate::mode::LockMode;
use crate::session::{describe, keep_detached, last_value, number, Conn, Failure, Pools, Prepared};
use crate::waiting::{bounded_wait, hold_place, join_queue, unlock_all, Line};
use crate::{acquiring, call_rows, timed, with_session, Ask};
use leasehold_core::wait::{held_elsewhere, other_size, Pause, Turn, Waiter, Wake, Woken};
use leasehold_core::Deadline;
use leasehold_core::{Error, Key, KeyInfo, LeaseKind, Permits, RawLease, Result, Token, Ttl};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// What a lease keeps: the session that holds the lock.
pub(crate) struct Held {
    conn: Conn,
    id: i64,
    /// A shared lock, unlocked with `pg_advisory_unlock_shared`.
    shared: bool,
    /// A permit's slot: what its release gives back beside the lock and whom it tells.
    permit: Option<Slot>,
    /// The process that acquired: a `fork()` child must not use (or close) its parent's session.
    pid: u32,
    /// A call on the session timed out, so the lease is lost. The session is kept, unused, until
    /// the lease is released or dropped: closing it at once could free the lock on the server
    /// while the caller, not yet told, still relies on the lease.
    dead: bool,
    /// The end of the lease's TTL (the server's idle timeout ends the session then), which a
    /// detached lease's session is kept open until. The lease's own deadline may be sooner: it
    /// is relied on only while the session is proven alive ([`Pools::alive_until`]).
    ttl_ends: Instant,
}

/// What a permit holds beside its slot's lock.
struct Slot {
    /// The semaphore's wait channel, notified when the permit goes back.
    channel: String,
    /// The size lock held in shared mode beside the slot ([`semaphore_size_id`]).
    size: i64,
}

/// Relies on `lease` only while its session is proven alive: a request sent at `contact` was
/// answered, and the lock lasts only as long as the session, which either side may end once it has
/// heard nothing from the other for [`Pools::dead_peer`] (a partition longer than that frees the
/// lock, and its holder learns only at its next call).
fn alive_from(mut lease: RawLease, pools: &Pools, contact: Instant) -> RawLease {
    lease.cap_at(pools.alive_until(contact));
    lease
}

#[derive(Debug)]
pub(crate) struct Advisory {
    /// The fence sequence's OID: immune to `search_path` and quoting.
    fence_seq: u32,
    /// Where the next permit attempt starts looking, so concurrent acquirers spread over the slots.
    rotation: AtomicU32,
    /// The hot path's statements, prepared once per session ([`Statements`]).
    sql: Statements,
}

/// The statements of one attempt, release and extend, exclusive (`[0]`) and shared (`[1]`). Each is
/// one statement, so one round trip, prepared on each session once: parsing and planning them on
/// every call cost the server about as much as the round trip itself.
#[derive(Debug)]
struct Statements {
    /// `$1` the lock id, `$2` the TTL in ms (text). The fence is drawn only when the lock is granted
    /// (OFFSET 0 keeps the attempt in its own subquery, evaluated once, before `set_config`).
    try_lock: [Prepared; 2],
    /// `$1` the lock id.
    unlock: [Prepared; 2],
    /// `$1` the TTL in ms (text).
    extend: Prepared,
}

impl Statements {
    fn new(fence_seq: u32) -> Statements {
        let try_lock = |slot, f: &str| Prepared {
            slot,
            sql: format!(
                "SELECT f, CASE WHEN f IS NOT NULL \
                   THEN set_config('idle_session_timeout', $2::text, false) END \
                 FROM (SELECT CASE WHEN {f}($1::bigint) THEN {} END AS f OFFSET 0) s",
                fence_expr(fence_seq)
            ),
        };
        let unlock = |slot, f: &str| Prepared {
            slot,
            sql: unlock_sql(f, "$1::bigint"),
        };
        Statements {
            try_lock: [
                try_lock(0, "pg_try_advisory_lock"),
                try_lock(1, "pg_try_advisory_lock_shared"),
            ],
            unlock: [
                unlock(2, "pg_advisory_unlock"),
                unlock(3, "pg_advisory_unlock_shared"),
            ],
            extend: Prepared {
                slot: 4,
                sql: "SELECT set_config('idle_session_timeout', $1::text, false)".into(),
            },
        }
    }
}

/// Column `i` of the first row of a prepared statement's answer; `None` for NULL or no row.
fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    rows: &'a [tokio_postgres::Row],
    i: usize,
) -> Result<Option<T>> {
    match rows.first() {
        None => Ok(None),
        Some(row) => row
            .try_get::<_, Option<T>>(i)
            .map_err(|e| Error::Internal(format!("PostgreSQL answered an unexpected column: {e}"))),
    }
}

impl Advisory {
    pub fn new(fence_seq: u32) -> Advisory {
        Advisory {
            fence_seq,
            rotation: AtomicU32::new(std::process::id()),
            sql: Statements::new(fence_seq),
        }
    }

    /// One attempt at the key, exclusive or (`shared`) shared. A shared attempt is refused while an
    /// exclusive request waits in the server's queue: the lock manager checks a conditional
    /// request against the waiters' modes too (`waitMask`), which is the writer preference we want.
    pub fn try_acquire(&self, ask: &Ask, shared: bool) -> Result<RawLease> {
        self.try_by(ask, shared, ask.pools.call())
    }

    /// [`Advisory::try_acquire`] within `deadline`.
    fn try_by(&self, ask: &Ask, shared: bool, deadline: Deadline) -> Result<RawLease> {
        let id = lock_id(&ask.prefixed);
        let ms = ask.ttl.as_millis().to_string();
        let sql = &self.sql.try_lock[usize::from(shared)];
        let (mut conn, sent, rows) = acquiring(ask.pools, deadline, "advisory lock", |s| {
            s.query(sql, &[&id, &ms], deadline)
        })?;
        match unreadable_poisons(&mut conn, column::<i64>(&rows, 0))? {
            Some(fence) => {
                let lease = self.lease(conn, id, ask.key, fence, ask.ttl, sent, shared, None)?;
                Ok(alive_from(lease, ask.pools, sent))
            }
            None => Err(held_elsewhere(ask.key)),
        }
    }

    /// The attempt of a waiting acquire: the server's lock queue does the waiting,
    /// `pg_advisory_lock` under `lock_timeout` until `end`, no polling. `call` bounds the round
    /// trip (the whole acquire's bound).
    fn wait_for_lock(&self, ask: &Ask, shared: bool, end: Instant, call: Deadline) -> Result<Turn> {
        let id = lock_id(&ask.prefixed);
        let lock = if shared {
            "pg_advisory_lock_shared"
        } else {
            "pg_advisory_lock"
        };
        let wait = end.saturating_duration_since(Instant::now());
        // The fence is drawn only once the lock is granted, so fences follow the order of holders.
        // The last column is how long the server waited, to date the TTL from the grant.
        let sql = format!(
            "{}SELECT {lock}({id}); \
             SELECT {}, set_config('idle_session_timeout', '{}', false), \
             floor(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000000)::bigint",
            bounded_wait(wait, ask.pools.io_timeout),
            fence_expr(self.fence_seq),
            ask.ttl.as_millis()
        );
        // The client's bound is the whole call's, so the server's lock_timeout ends a wait first.
        let (mut conn, result) = timed(ask.pools, call, |s| s.rows_waiting(&sql, call))?;
        match result {
            Ok((sent, rows)) => {
                let fence = number::<i64>(last_value(&rows, 0));
                let waited_us = number::<u64>(last_value(&rows, 2));
                let (Ok(Some(fence)), Ok(waited_us)) = (fence, waited_us) else {
                    // The lock is granted but unusable: closing the session frees it.
                    conn.poisoned = true;
                    return Err(Error::Internal("PostgreSQL returned no fence".into()));
                };
                let waited_us = waited_us.unwrap_or(0);
                // The server's idle timer starts after the grant, not before: the lease's local
                // deadline counts from `sent` plus the server's own measure of the wait.
                let granted = sent
                    .checked_add(Duration::from_micros(waited_us))
                    .unwrap_or(sent);
                // The server heard nothing from us while it held the statement (only TCP
                // keepalives), so the request proves the session alive only as of its send: after
                // a long wait, one more round trip proves it alive now.
                let mut contact = sent;
                if Instant::now().saturating_duration_since(sent) > ask.pools.dead_peer / 2 {
                    let pinged = Instant::now();
                    if let Err(e) = conn.rows("SELECT 1", call) {
                        // Granted but not provably alive: closing the session frees the lock.
                        conn.poisoned = true;
                        return Err(ask.pools.failed("advisory lock", &e));
                    }
                    contact = pinged;
                }
                let lease = self.lease(conn, id, ask.key, fence, ask.ttl, granted, shared, None)?;
                Ok(Turn::Granted(alive_from(lease, ask.pools, contact)))
            }
            Err(e) if e.code() == Some("55P03") => {
                unlock_all(&mut conn, call);
                Ok(Turn::NotYet { holder_left: None })
            }
            Err(e) => {
                conn.poisoned = true;
                Err(ask.pools.failed("advisory lock", &e))
            }
        }
    }

    /// The lease of a lock this session was just granted (a shared lease when `shared`).
    #[allow(clippy::too_many_arguments)]
    fn lease(
        &self,
        mut conn: Conn,
        id: i64,
        key: &Key,
        fence: i64,
        ttl: Ttl,
        sent: Instant,
        shared: bool,
        permit: Option<Slot>,
    ) -> Result<RawLease> {
        let token = match Token::generate() {
            Ok(token) => token,
            Err(e) => {
                // The lock is held but nobody could own it: end the session, which frees it.
                conn.poisoned = true;
                return Err(e);
            }
        };
        // The server frees the lock the moment the session ends (an administrator, a shutdown, its
        // idle timeout): the holder stops relying on it when the session's goodbye reaches the
        // socket, not at its next call.
        let watch = conn.watch();
        let lease = RawLease::new(key.clone(), token, fence as u64, ttl, sent)
            .watch_session(watch)
            .with_state(Held {
                conn,
                id,
                shared,
                permit,
                pid: leasehold_core::fork::pid(),
                dead: false,
                ttl_ends: ttl.deadline_from(sent),
            });
        Ok(if shared {
            lease.with_kind(LeaseKind::Shared)
        } else {
            lease
        })
    }

    /// A promote or demote on the lease's session: `sql` (given the lock id) answers one row whose
    /// first column is NULL when another holder is left and whose third says the old lock was let
    /// go. Every failure that may have left the session's locks unknown ends the lease, as a failed
    /// extend does: its session is closed once the lease is released or dropped.
    fn swap(
        &self,
        pools: &Pools,
        lease: &mut RawLease,
        ttl: Ttl,
        what: &str,
        sql: impl Fn(i64) -> String,
    ) -> Result<()> {
        let mut held = take_live(lease)?;
        let promote = what == "promote";
        let sent = Instant::now();
        match held.conn.rows(&sql(held.id), pools.call()) {
            Ok(rows) => {
                let first = last_value(&rows, 0);
                if promote && first.is_none() && !rows.is_empty() {
                    // Another session holds a share (or waits): nothing was taken.
                    lease.state = Some(Box::new(held));
                    return Err(held_elsewhere(lease.key()));
                }
                let fence = if promote {
                    number::<i64>(first).ok().flatten()
                } else {
                    Some(lease.fence() as i64)
                };
                let (Some(fence), Some("t")) = (fence, last_value(&rows, 2)) else {
                    // The session did not hold what the lease says: close it, freeing whatever
                    // it holds now.
                    held.conn.poisoned = true;
                    lease.expire();
                    return Err(gone("its session no longer held the lock"));
                };
                held.shared = !promote;
                held.ttl_ends = ttl.deadline_from(sent);
                lease.set_kind(if promote {
                    LeaseKind::Exclusive
                } else {
                    LeaseKind::Shared
                });
                lease.set_fence(fence as u64);
                lease.renewed(ttl, sent);
                lease.state = Some(Box::new(held));
                lease.cap_at(pools.alive_until(sent));
                Ok(())
            }
            Err(e) if e.is_timeout() => Err(timed_out(pools, lease, held, what, &e)),
            Err(e) if held.conn.is_gone(&e) => {
                held.conn.poisoned = true;
                lease.expire();
                Err(pools.redacted(gone(&format!("its session ended ({})", describe(&e)))))
            }
            Err(e) => {
                // Session locks outlive a failed statement: which of them it holds now is unknown.
                let err = pools.failed(what, &e);
                held.conn.poisoned = true;
                held.dead = true;
                lease.expire();
                lease.state = Some(Box::new(held));
                Err(err)
            }
        }
    }

    pub fn inspect(&self, pools: &Pools, prefixed: &[u8]) -> Result<KeyInfo> {
        let id = lock_id(prefixed);
        // pg_locks shows a bigint advisory key as classid = high 32 bits, objid = low 32 bits,
        // objsubid = 1.
        let sql = format!(
            "SELECT count(*), bool_or(mode = 'ShareLock') FROM pg_locks WHERE {}",
            advisory_match(id)
        );
        let deadline = pools.call();
        let (_conn, rows) = call_rows(pools, deadline, &sql, "inspect")?;
        let holders = number::<u32>(last_value(&rows, 0))?.unwrap_or(0);
        let info = KeyInfo::new(holders > 0, None, None);
        Ok(if holders > 0 {
            info.with_holders(holders, rows.last().and_then(|r| r.get(1)) == Some("t"))
        } else {
            info
        })
    }

    /// The granted slots of a semaphore (among the first `permits`).
    pub fn inspect_permits(
        &self,
        pools: &Pools,
        prefixed: &[u8],
        permits: Permits,
    ) -> Result<KeyInfo> {
        let sql = format!(
            "SELECT count(*) FROM pg_locks l JOIN \
               (SELECT {} AS id FROM generate_series(0, {}) AS g(i)) s \
               ON l.classid = ((s.id >> 32) & 4294967295)::oid AND l.objid = (s.id & 4294967295)::oid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            semaphore_slot_sql(prefixed, "i"),
            permits.get() - 1
        );
        let deadline = pools.call();
        let (_conn, rows) = call_rows(pools, deadline, &sql, "inspect")?;
        let holders = number::<u32>(last_value(&rows, 0))?.unwrap_or(0);
        let info = KeyInfo::new(holders > 0, None, None);
        Ok(if holders > 0 {
            info.with_holders(holders, false)
        } else {
            info
        })
    }

    /// One attempt at a permit: the first free slot in a rotating order, all in one round trip
    /// (the size check, then the slot).
    pub fn try_acquire_permit(&self, ask: &Ask, permits: Permits) -> Result<RawLease> {
        let sql = format!(
            "{}; {}",
            permit_check(&ask.prefixed, permits),
            self.permit_attempt(&ask.prefixed, permits, ask.ttl, false, None)
        );
        let deadline = ask.pools.call();
        let (mut conn, sent, statements) =
            acquiring(ask.pools, deadline, "semaphore slot lock", |s| {
                s.statements(&sql, deadline)
            })?;
        match unreadable_poisons(&mut conn, self.permit_answer(&statements))? {
            PermitAnswer::Granted { fence, id } => {
                self.permit_lease(conn, ask, id, fence, permits, sent)
            }
            PermitAnswer::OtherSize(held) => Err(other_size(ask.key, held, permits.get())),
            PermitAnswer::Refused => Err(no_permit(ask.key, permits)),
        }
    }

    /// The statement that takes the first free slot from a rotating start (`pg_try_advisory_lock`
    /// per slot, stopping at the first granted: LIMIT 1 over a lazily filtered scan), then draws
    /// the fence, takes the size lock ([`semaphore_size_id`]) and sets the session's idle timeout.
    /// It follows [`permit_check`] in the same transaction, and takes nothing when that found
    /// holders of another size. `gated`: only while the statement before found nobody waiting
    /// (see [`Advisory::permit_first`]); with `give_back`, that statement took this queue lock for
    /// the session, and a grant gives it back.
    fn permit_attempt(
        &self,
        prefixed: &[u8],
        permits: Permits,
        ttl: Ttl,
        gated: bool,
        give_back: Option<i64>,
    ) -> String {
        let n = permits.get();
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % n;
        // The gate is what the statement before set (same implicit transaction): whether it took
        // the queue lock, that is, whether nobody waits.
        let gate = if gated {
            format!("current_setting('leasehold.head', true) = 'true' AND {SIZE_FREE}")
        } else {
            SIZE_FREE.to_owned()
        };
        let leave = match give_back {
            Some(queue) => {
                format!(", CASE WHEN f IS NOT NULL THEN pg_advisory_unlock({queue}) END")
            }
            None => String::new(),
        };
        format!(
            "SELECT f, CASE WHEN f IS NOT NULL THEN set_config('idle_session_timeout', '{ms}', false) END, \
                    id, CASE WHEN f IS NOT NULL THEN pg_advisory_lock_shared({size}) END{leave} \
             FROM (SELECT id, {fence} AS f FROM \
                     (SELECT id FROM (SELECT {slot} AS id FROM generate_series(0, {last}) AS g(i)) q \
                      WHERE CASE WHEN {gate} THEN pg_try_advisory_lock(id) ELSE false END LIMIT 1) s \
                   OFFSET 0) t",
            ms = ttl.as_millis(),
            fence = fence_expr(self.fence_seq),
            size = semaphore_size_id(prefixed, n),
            slot = semaphore_slot_sql(prefixed, &format!("(i + {start}) % {n}")),
            last = n - 1,
        )
    }

    /// The attempt of a newcomer: a slot only if nobody waits (so a newcomer never cuts in front
    /// of waiters). With `keep`, the queue lock it takes to tell is kept when no slot is granted:
    /// the session is the queue's head from then on, and gets a queued session's short idle
    /// timeout ([`hold_place`]) in the same statement, so it is never idle in the queue without it
    /// (a grant sets the lease's TTL instead, after it). Without, the lock is the transaction's.
    /// An acquire of another size than the holders' takes no queue lock: it is refused, not queued.
    /// The third statement's first column says whether it took the queue lock.
    fn permit_first(&self, ask: &Ask, permits: Permits, queue: i64, keep: bool) -> String {
        let first = if keep {
            format!(
                "SELECT set_config('leasehold.head', h::text, true), CASE WHEN h THEN {} END \
                 FROM (SELECT CASE WHEN {SIZE_FREE} THEN pg_try_advisory_lock({queue}) ELSE false END \
                       AS h OFFSET 0) s",
                hold_place()
            )
        } else {
            format!(
                "SELECT set_config('leasehold.head', \
                   (CASE WHEN {SIZE_FREE} THEN pg_try_advisory_xact_lock({queue}) ELSE false END)::text, \
                   true)"
            )
        };
        format!(
            "{}; {first}; {}",
            permit_check(&ask.prefixed, permits),
            self.permit_attempt(&ask.prefixed, permits, ask.ttl, true, keep.then_some(queue))
        )
    }

    /// What the statements of a permit attempt ([`permit_check`], then maybe the queue's, then
    /// [`Advisory::permit_attempt`]) found.
    fn permit_answer(
        &self,
        statements: &[Vec<tokio_postgres::SimpleQueryRow>],
    ) -> Result<PermitAnswer> {
        let other = statements.get(1).and_then(|rows| last_value(rows, 0));
        if let Some(held) = number::<u32>(other.filter(|o| !o.is_empty()))? {
            return Ok(PermitAnswer::OtherSize(held));
        }
        let slot = statements.last().map(Vec::as_slice).unwrap_or_default();
        Ok(match self.permit_granted(slot)? {
            Some((fence, id)) => PermitAnswer::Granted { fence, id },
            None => PermitAnswer::Refused,
        })
    }

    /// `(fence, slot id)` when the attempt got a slot.
    fn permit_granted(
        &self,
        rows: &[tokio_postgres::SimpleQueryRow],
    ) -> Result<Option<(i64, i64)>> {
        let Some(fence) = number::<i64>(last_value(rows, 0))? else {
            return Ok(None);
        };
        match number::<i64>(last_value(rows, 2))? {
            Some(id) => Ok(Some((fence, id))),
            None => Err(Error::Internal("PostgreSQL returned no slot".into())),
        }
    }

    /// The lease of the semaphore slot `id` that `ask` was just granted on `conn`.
    fn permit_lease(
        &self,
        conn: Conn,
        ask: &Ask,
        id: i64,
        fence: i64,
        permits: Permits,
        sent: Instant,
    ) -> Result<RawLease> {
        let (key, ttl) = (ask.key, ask.ttl);
        let (_, channel) = semaphore_internal("queue", "", &ask.prefixed);
        let size = semaphore_size_id(&ask.prefixed, permits.get());
        let slot = Slot { channel, size };
        let lease = self
            .lease(conn, id, key, fence, ttl, sent, false, Some(slot))?
            .with_kind(LeaseKind::Permit(permits));
        Ok(alive_from(lease, ask.pools, sent))
    }
}

/// The waiting acquire of an exclusive or shared lock: its attempts wait in the server's lock queue
/// ([`Advisory::wait_for_lock`]) until the wait's end; the final one only tries. Nothing to wait on
/// between attempts (an attempt only ends early at the wait's end), so it just sleeps then.
pub(crate) struct LockWaiter<'a> {
    advisory: &'a Advisory,
    ask: Ask<'a>,
    shared: bool,
    /// The whole call's bound (wait + connect + I/O), for every round trip of the call.
    call: Deadline,
    pause: Pause,
}

impl<'a> LockWaiter<'a> {
    pub fn new(advisory: &'a Advisory, ask: Ask<'a>, shared: bool, end: Instant) -> LockWaiter<'a> {
        let pools = ask.pools;
        LockWaiter {
            advisory,
            ask,
            shared,
            call: Deadline::for_acquire_until(end, pools.connect_timeout, pools.io_timeout),
            pause: Pause::new(),
        }
    }
}

impl Waiter for LockWaiter<'_> {
    fn attempt(&mut self, last: bool, block_until: Instant) -> Result<Turn> {
        let call = self.call;
        if !last {
            return self
                .advisory
                .wait_for_lock(&self.ask, self.shared, block_until, call);
        }
        match self.advisory.try_by(&self.ask, self.shared, call) {
            Ok(lease) => Ok(Turn::Granted(lease)),
            Err(Error::NotAcquired(_)) => Ok(Turn::NotYet { holder_left: None }),
            Err(e) => Err(e),
        }
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        Ok(self.pause.sleep(wake))
    }
}

/// The waiting acquire of a permit: waiters queue FIFO on the semaphore's queue lock (the server's
/// lock queue); the first LISTENs on the semaphore's channel, which a release notifies, and tries
/// again then. A holder whose session ended (its TTL, a crash) notifies nobody, so the first
/// waiter also looks every [`PERMIT_RECHECK`].
pub(crate) struct PermitWaiter<'a> {
    advisory: &'a Advisory,
    ask: Ask<'a>,
    permits: Permits,
    line: Line<'a>,
}

impl<'a> PermitWaiter<'a> {
    pub fn new(
        advisory: &'a Advisory,
        ask: Ask<'a>,
        permits: Permits,
        end: Instant,
    ) -> PermitWaiter<'a> {
        let (queue, channel) = semaphore_internal("queue", "", &ask.prefixed);
        let line = Line::new(ask.pools, queue, channel, "wait for a permit", end);
        PermitWaiter {
            advisory,
            ask,
            permits,
            line,
        }
    }

    /// A newcomer's attempt ([`Advisory::permit_first`]), then, not granted, into the queue (which
    /// may wait in the server's lock queue until `end`). `None` once it is the queue's head.
    fn enter(&mut self, end: Instant, call: Deadline) -> Result<Option<Turn>> {
        let (ask, permits, queue) = (&self.ask, self.permits, self.line.queue);
        let first = self.advisory.permit_first(ask, permits, queue, true);
        let (mut conn, sent, statements) =
            acquiring(ask.pools, call, "semaphore slot lock", |s| {
                s.statements(&first, call)
            })?;
        let head = statements
            .get(2)
            .and_then(|rows| last_value(rows, 0))
            .map(|h| h == "true");
        match unreadable_poisons(&mut conn, self.advisory.permit_answer(&statements))? {
            PermitAnswer::Granted { fence, id } => {
                let lease = self
                    .advisory
                    .permit_lease(conn, ask, id, fence, permits, sent)?;
                return Ok(Some(Turn::Granted(lease)));
            }
            // Refused before taking anything (the queue lock included): the session is clean.
            PermitAnswer::OtherSize(held) => return Err(other_size(ask.key, held, permits.get())),
            PermitAnswer::Refused => {}
        }
        let enter = join_queue(
            (head == Some(true)).then_some(""),
            queue,
            &self.line.channel,
            end,
            ask.pools.io_timeout,
        );
        if !self.line.enter(conn, &enter, call)? {
            return Ok(Some(Turn::NotYet { holder_left: None }));
        }
        Ok(None)
    }

    /// An attempt of the queue's head; refused in the final one, it leaves the queue.
    fn at_head(&mut self, last: bool, call: Deadline) -> Result<Turn> {
        let (ask, permits) = (&self.ask, self.permits);
        let sql = format!(
            "{}; {}",
            permit_check(&ask.prefixed, permits),
            self.advisory
                .permit_attempt(&ask.prefixed, permits, ask.ttl, false, None)
        );
        let Some(conn) = self.line.attempting() else {
            return Ok(Turn::NotYet { holder_left: None });
        };
        let sent = Instant::now();
        let statements = conn
            .statements(&sql, call)
            .map_err(|e| ask.pools.failed("semaphore slot lock", &e))?;
        let (channel, queue) = (&self.line.channel, self.line.queue);
        // Back to the pool with no idle timeout, as after a release; closed if this fails.
        let give_up = format!(
            "UNLISTEN \"{channel}\"; SELECT pg_advisory_unlock({queue}), \
             set_config('idle_session_timeout', '0', false)"
        );
        match self.advisory.permit_answer(&statements)? {
            PermitAnswer::OtherSize(held) => {
                drop(self.line.leave(&give_up, call));
                Err(other_size(ask.key, held, permits.get()))
            }
            PermitAnswer::Granted { fence, id } => {
                // Leaving the queue lets the next waiter move up. If it fails the session is
                // closed, which frees the queue (and the slot: no lease is handed out then). The
                // grant gave the session the lease's TTL as its idle timeout already.
                let leave = format!("UNLISTEN \"{channel}\"; SELECT pg_advisory_unlock({queue})");
                match self.line.leave(&leave, call) {
                    Some((conn, true)) => Ok(Turn::Granted(
                        self.advisory
                            .permit_lease(conn, ask, id, fence, permits, sent)?,
                    )),
                    _ => Err(ask.pools.unavailable(
                        "PostgreSQL did not answer while leaving the semaphore's queue; the permit \
                         was given back",
                    )),
                }
            }
            PermitAnswer::Refused if last => {
                drop(self.line.leave(&give_up, call));
                Ok(Turn::NotYet { holder_left: None })
            }
            PermitAnswer::Refused => Ok(Turn::NotYet { holder_left: None }),
        }
    }
}

impl Waiter for PermitWaiter<'_> {
    fn attempt(&mut self, last: bool, block_until: Instant) -> Result<Turn> {
        let call = self.line.call();
        if !self.line.is_head() {
            if last {
                // One last look, as a newcomer that does not queue.
                let first =
                    self.advisory
                        .permit_first(&self.ask, self.permits, self.line.queue, false);
                let (mut conn, sent, statements) =
                    acquiring(self.ask.pools, call, "semaphore slot lock", |s| {
                        s.statements(&first, call)
                    })?;
                let answer = self.advisory.permit_answer(&statements);
                return match unreadable_poisons(&mut conn, answer)? {
                    PermitAnswer::Granted { fence, id } => {
                        Ok(Turn::Granted(self.advisory.permit_lease(
                            conn,
                            &self.ask,
                            id,
                            fence,
                            self.permits,
                            sent,
                        )?))
                    }
                    PermitAnswer::OtherSize(held) => {
                        Err(other_size(self.ask.key, held, self.permits.get()))
                    }
                    PermitAnswer::Refused => Ok(Turn::NotYet { holder_left: None }),
                };
            }
            if let Some(turn) = self.enter(block_until, call)? {
                return Ok(turn);
            }
        }
        self.at_head(last, call)
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        self.line.block(wake)
    }

    fn heartbeat(&self) -> Option<Duration> {
        self.line.heartbeat().map(|beat| beat.min(PERMIT_RECHECK))
    }
}

/// What one permit attempt found.
enum PermitAnswer {
    /// The slot `id`, with its fence.
    Granted { fence: i64, id: i64 },
    /// Live holders hold the semaphore under this other size: nothing was taken.
    OtherSize(u32),
    /// Every slot is held (or, for a newcomer, someone waits).
    Refused,
}

/// Whether [`permit_check`] found no live holder of another size (same transaction).
const SIZE_FREE: &str = "current_setting('leasehold.size', true) = ''";

/// The statements in front of every permit attempt: the semaphore's grant lock for the
/// transaction, so grants of one semaphore happen one at a time, then the size of any live holder
/// granted under another size than `permits`, into `leasehold.size` ('' when there is none), which
/// the attempt's statements after it gate on. A holder says its size by a shared lock
/// ([`semaphore_size_id`]) taken in the granting transaction, so under the grant lock every
/// earlier grant's size shows in `pg_locks`; a holder's session that ends (released, its TTL, a
/// crash) ends its size lock with it, so only live holders bind.
///
/// The `pg_locks` scan (which takes every lock partition of the server) is skipped while the
/// semaphore has holders of this size: the exclusive try of this size's lock fails then, and
/// since grants only ever add a holder of the size that all live holders have, no other size can
/// be held. For that, the try may fail only because of live holders' shared locks, so it is a
/// session lock given back in the same expression (the inner `CASE`, with no interrupt check
/// between the two calls), never a transaction lock: at commit PostgreSQL releases a
/// transaction's locks partition by partition and wakes each one's waiters as it goes, so the
/// next grant could get the grant lock while this transaction still held the size lock, read its
/// failed try as "holders of my size", and grant beside holders of another size.
fn permit_check(prefixed: &[u8], permits: Permits) -> String {
    let (grant, _) = semaphore_internal("grant", "", prefixed);
    let n = permits.get();
    let size = semaphore_size_id(prefixed, n);
    let bits = size as u64;
    format!(
        "SELECT pg_advisory_xact_lock({grant}); \
         SELECT set_config('leasehold.size', \
           CASE WHEN pg_try_advisory_lock({size}) THEN \
             CASE WHEN pg_advisory_unlock({size}) IS NOT NULL THEN coalesce(( \
               SELECT (objid::int8 & 65535)::text FROM pg_locks \
               WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND classid = {high} AND (objid::int8 >> 16) = {middle} \
                 AND (objid::int8 & 65535) <> {n} \
               LIMIT 1), '') END \
           ELSE '' END, true)",
        high = bits >> 32,
        middle = (bits >> 16) & 0xffff,
    )
}

/// `answer`, the parsed answer of a statement that may have taken a lock; an answer that cannot be
/// read poisons the session, since a lock it does not show may be held all the same.
fn unreadable_poisons<T>(conn: &mut Conn, answer: Result<T>) -> Result<T> {
    if answer.is_err() {
        conn.poisoned = true;
    }
    answer
}

/// How often the first waiter for a permit looks again without a notification: a holder whose session
/// ended (its TTL, a crash) gives its slot back without notifying.
const PERMIT_RECHECK: Duration = Duration::from_millis(100);

/// The release's statement: `unlock` (an advisory unlock function) of `id`, and the session's idle
/// timeout (the lease's TTL) off again, so a session back in the pool is not ended by the server.
/// Its first column says whether the lock was held.
fn unlock_sql(unlock: &str, id: &str) -> String {
    format!("SELECT {unlock}({id}), set_config('idle_session_timeout', '0', false)")
}

/// The granted `pg_locks` entries of a bigint advisory key in this database: classid = high 32 bits,
/// objid = low 32 bits, objsubid = 1.
fn advisory_match(id: i64) -> String {
    let id = id as u64;
    format!(
        "locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid = {} AND objid = {} AND objsubid = 1",
        id >> 32,
        id & 0xffff_ffff
    )
}

fn no_permit(key: &Key, permits: Permits) -> Error {
    Error::NotAcquired(format!(
        "all {} permits of semaphore \"{key}\" are held",
        permits.get()
    ))
}

/// The fence, drawn once the lock is granted: the larger of the sequence's next value and the
/// server's clock in microseconds since the epoch, so a sequence gone back with lost data (a failover
/// to a replica that missed its last increments) is overtaken by the clock (see the crate docs).
fn fence_expr(seq: u32) -> String {
    format!(
        "greatest(nextval({seq}::regclass), \
                  floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)"
    )
}

/// A release, extend, promote or demote whose session did not answer in time. It may still hold the lock, and we
/// cannot prove either way. So this call says `Unavailable` (the server did not answer, `docs/semantics.md`
/// §1), and the lease counts as lost from now on: `remaining()` is zero and every later release or
/// extend gives `Lost`. Any other call's session is closed (never reused) only when the lease is released
/// or dropped, so the server frees the lock after the caller has heard, never while it may still
/// be relying on the lease; until then the server's idle timeout (the TTL) bounds it. A release's
/// session is closed at once: its caller has stopped relying on the lease already.
fn timed_out(
    pools: &Pools,
    lease: &mut RawLease,
    mut held: Held,
    what: &str,
    e: &Failure,
) -> Error {
    lease.expire();
    if what != "advisory unlock" {
        held.conn.poisoned = true;
        held.dead = true;
        lease.state = Some(Box::new(held));
    } else {
        drop(held);
    }
    pools.unavailable(format!(
        "PostgreSQL {what} failed: {}; the lease is lost",
        describe(e)
    ))
}

fn gone(why: &str) -> Error {
    Error::Lost(format!("the advisory lock is not held any more: {why}"))
}

fn take_held(lease: &mut RawLease) -> Result<Option<Held>> {
    let Some(held) = lease.take_state::<Held>() else {
        return Ok(None);
    };
    if held.pid != leasehold_core::fork::pid() {
        // The parent's session: closing it would free the parent's lock, using it would corrupt it.
        std::mem::forget(held);
        return Err(Error::Lost(
            "this lease was acquired by another process (before fork); only that process can \
             release or extend it"
                .into(),
        ));
    }
    Ok(Some(held))
}

/// The session of a lease that is to be used again (extend, promote, demote): gone, or dead after
/// a timed-out call (its lease then expires, and the session stays with it for its release), is
/// `Lost`.
fn take_live(lease: &mut RawLease) -> Result<Held> {
    let Some(held) = take_held(lease)? else {
        return Err(gone("its session is gone"));
    };
    if held.dead {
        lease.expire();
        lease.state = Some(Box::new(held));
        return Err(gone("a call on its session timed out"));
    }
    Ok(held)
}

/// Advisory locks: the lease lives in its session (waits in the server's lock queue; semaphores
/// queue on an advisory lock and LISTEN at the head, `waiting.rs`).
impl LockMode for Advisory {
    fn name(&self) -> &'static str {
        "postgres-advisory"
    }

    fn table(&self) -> Option<&str> {
        None
    }

    fn try_acquire(&self, ask: &Ask, kind: LeaseKind) -> Result<RawLease> {
        match kind {
            LeaseKind::Exclusive => Advisory::try_acquire(self, ask, false),
            LeaseKind::Shared => Advisory::try_acquire(self, ask, true),
            LeaseKind::Permit(n) => self.try_acquire_permit(ask, n),
            other => Err(leasehold_core::unsupported(LockMode::name(self), other)),
        }
    }

    fn waiter<'a>(
        &'a self,
        ask: Ask<'a>,
        kind: LeaseKind,
        end: Instant,
    ) -> Result<Box<dyn Waiter + 'a>> {
        Ok(match kind {
            LeaseKind::Exclusive => Box::new(LockWaiter::new(self, ask, false, end)),
            LeaseKind::Shared => Box::new(LockWaiter::new(self, ask, true, end)),
            LeaseKind::Permit(n) => Box::new(PermitWaiter::new(self, ask, n, end)),
            other => return Err(leasehold_core::unsupported(LockMode::name(self), other)),
        })
    }

    fn inspect(&self, pools: &Pools, prefixed: &[u8], kind: LeaseKind) -> Result<KeyInfo> {
        match kind {
            LeaseKind::Permit(n) => self.inspect_permits(pools, prefixed, n),
            _ => Advisory::inspect(self, pools, prefixed),
        }
    }

    fn restore(&self, _: &Pools, _: &[u8], _: &Key, _: Token) -> Result<RawLease> {
        Err(Error::invalid(
            "PostgreSQL advisory locks belong to the session that took them, so another process \
             cannot restore one: use ?lock=table (the lease then lives in a row)",
        ))
    }

    /// Ends the session(s) that hold the key (granted entries of `pg_locks`, shared ones too),
    /// waiting up to the I/O timeout for each to exit, so the key is free when this returns.
    fn force_release(&self, pools: &Pools, prefixed: &[u8]) -> Result<bool> {
        let id = lock_id(prefixed);
        let deadline = pools.call();
        let wait_ms = pools.io_timeout.as_millis().clamp(1, i64::MAX as u128);
        let sql = format!(
            "SELECT count(*), bool_and(t) FROM (SELECT pg_terminate_backend(pid, {wait_ms}) AS t \
             FROM pg_locks WHERE {} AND pid <> pg_backend_pid()) s",
            advisory_match(id)
        );
        let (_conn, result) = with_session(pools, deadline, |s| s.rows(&sql, deadline))?;
        let rows = match result {
            Ok(rows) => rows,
            Err(e) if e.code() == Some("42501") => {
                return Err(pools.unavailable(format!(
                    "PostgreSQL refused to end the session that holds the advisory lock: {} — \
                     force_release in advisory mode needs the role pg_signal_backend \
                     (GRANT pg_signal_backend TO <role>) or membership in the holder's role",
                    describe(&e)
                )))
            }
            Err(e) => return Err(pools.failed("force release", &e)),
        };
        let ended = number::<u32>(last_value(&rows, 0))?.unwrap_or(0);
        if ended > 0 && rows.last().and_then(|r| r.get(1)) != Some("t") {
            return Err(pools.unavailable(format!(
                "the session holding the advisory lock did not exit within {wait_ms} ms of \
                 pg_terminate_backend; the key is freed once it does"
            )));
        }
        Ok(ended > 0)
    }

    fn release(&self, pools: &Pools, lease: &mut RawLease) -> Result<()> {
        let Some(mut held) = take_held(lease)? else {
            return Err(gone("its session is gone"));
        };
        // The lease is over for its holder whatever the release finds.
        held.conn.unwatch();
        if held.dead {
            return Err(gone("a call on its session timed out"));
        }
        let unlocked = match &held.permit {
            None => {
                let sql = &self.sql.unlock[usize::from(held.shared)];
                let id = held.id;
                held.conn
                    .query(sql, &[&id], pools.call())
                    .map(|rows| matches!(column::<bool>(&rows, 0), Ok(Some(true))))
            }
            Some(Slot { channel, size }) => {
                // A semaphore's waiters learn of the free slot at once (delivered at commit). The
                // size lock goes after the slot: a permit never holds a slot without saying its size.
                let sql = format!(
                    "{}, pg_advisory_unlock_shared({size}), pg_notify('{channel}', '')",
                    unlock_sql("pg_advisory_unlock", &held.id.to_string())
                );
                held.conn
                    .rows(&sql, pools.call())
                    .map(|rows| last_value(&rows, 0) == Some("t"))
            }
        };
        match unlocked {
            Ok(true) => Ok(()),
            Ok(false) => {
                held.conn.poisoned = true;
                Err(gone("its session no longer holds the lock"))
            }
            Err(e) if e.is_timeout() => Err(timed_out(pools, lease, held, "advisory unlock", &e)),
            Err(e) if held.conn.is_gone(&e) => {
                held.conn.poisoned = true;
                Err(pools.redacted(gone(&format!("its session ended ({})", describe(&e)))))
            }
            Err(e) => {
                // The unlock was rolled back: the session still holds the lock. It stays the lease's
                // for a retry, but must never go back to the pool, where it would hold the key for
                // nobody (with the timeout it had, or none).
                held.conn.poisoned = true;
                let err = pools.failed("advisory unlock", &e);
                lease.state = Some(Box::new(held));
                Err(err)
            }
        }
    }

    fn extend(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let mut held = take_live(lease)?;
        // A live session still holds its session locks: only it could have unlocked them. So moving
        // its idle timeout is the whole of extend.
        let ms = ttl.as_millis().to_string();
        let sent = Instant::now();
        match held.conn.query(&self.sql.extend, &[&ms], pools.call()) {
            Ok(_) => {
                lease.renewed(ttl, sent);
                held.ttl_ends = ttl.deadline_from(sent);
                lease.state = Some(Box::new(held));
                lease.cap_at(pools.alive_until(sent));
                Ok(())
            }
            Err(e) if e.is_timeout() => Err(timed_out(pools, lease, held, "extend", &e)),
            Err(e) if held.conn.is_gone(&e) => {
                held.conn.poisoned = true;
                lease.expire();
                Err(pools.redacted(gone(&format!("its session ended ({})", describe(&e)))))
            }
            Err(e) => {
                let err = pools.failed("extend", &e);
                lease.state = Some(Box::new(held));
                Err(err)
            }
        }
    }

    /// One attempt to turn the lease's shared lock exclusive, on its own session, in one
    /// statement: `pg_try_advisory_lock` of the same id (the session's own share does not conflict
    /// with its own request, other sessions' shares and waiting requests do), and only once it is
    /// granted the fence (drawn as an exclusive acquire draws it), the TTL, and the share let go.
    /// The session holds one of the two locks at every moment, so nobody gets in between. A
    /// writer waiting in the server's queue refuses it too: it waits for this share.
    fn try_promote(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let (ms, fence) = (ttl.as_millis(), fence_expr(self.fence_seq));
        self.swap(pools, lease, ttl, "promote", |id| {
            format!(
                "SELECT f, CASE WHEN f IS NOT NULL \
                   THEN set_config('idle_session_timeout', '{ms}', false) END, \
                   CASE WHEN f IS NOT NULL THEN pg_advisory_unlock_shared({id}) END \
                 FROM (SELECT CASE WHEN pg_try_advisory_lock({id}) THEN {fence} END AS f OFFSET 0) s"
            )
        })
    }

    /// Turns the lease's exclusive lock shared on its own session, in one statement: the share
    /// first (granted at once: only this session's exclusive lock holds the key, and the lock
    /// manager lets a holder's request go before the waiters it blocks), then the exclusive lock
    /// let go, so the key is never without a holder.
    fn demote(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let ms = ttl.as_millis();
        self.swap(pools, lease, ttl, "demote", |id| {
            format!(
                "SELECT pg_advisory_lock_shared({id}), \
                   set_config('idle_session_timeout', '{ms}', false), pg_advisory_unlock({id})"
            )
        })
    }

    /// Lets go of the lease without releasing it: its session holds the lock, so it is kept open
    /// until the TTL (the server ends it then too, at its idle timeout) and then closed, outside the
    /// pool, so detached leases never use up `pool_size`.
    fn detach(&self, lease: &mut RawLease, ttl: Ttl) {
        let Ok(Some(held)) = take_held(lease) else {
            // Nothing held, or a parent's session (take_held has parked it, untouched).
            return;
        };
        if held.dead {
            // A call on it timed out: the lease was lost already. Closing frees what it may hold.
            return;
        }
        let Held {
            mut conn, ttl_ends, ..
        } = held;
        conn.unwatch();
        if let Some(session) = conn.detach() {
            keep_detached(session, ttl_ends, ttl.drift());
        }
    }
}
