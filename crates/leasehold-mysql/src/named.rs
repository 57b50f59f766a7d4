//! Named mode: `GET_LOCK` on a session the lease owns for its whole life (taken from the pool,
//! returned after `RELEASE_LOCK`), like PostgreSQL's session advisory locks.
//!
//! A named lock has no expiry of its own, so the TTL lives in a small InnoDB table
//! (`<table>_fences`): one row per lock name with the holder's session id and expiry (server
//! clock), and the key's fence, drawn as `GREATEST(fence + 1, server µs)` once the lock is ours. An
//! acquirer that finds the lock taken by a session whose lease has expired ends that session
//! (`KILL CONNECTION`, allowed for sessions of the same account) and takes the lock once the
//! server has freed it. It decides and kills in a transaction that holds the name's row locked
//! (`SELECT … FOR UPDATE`), and a holder changes that row before it extends or releases: so the
//! session ended is still the expired lease's, never one that released meanwhile and took another
//! lease from the pool (a KILL sent on a stale look did that: the torture test saw the overlap).
//! The holder's own extend refuses an expired lease, so a holder never extends a lease that
//! someone is about to break. As a backstop, a lease's session gets
//! `wait_timeout` = its TTL rounded up plus a second, so a holder that goes silent is
//! disconnected by the server itself.
//!
//! An uncontended cycle is two round trips of two statements each (see
//! [`Named::try_lock`] and [`Named::release`]): every statement of a batch is answered on its
//! own, and on loopback each costs about what a small round trip does, so none is spent on
//! reading back what a write can return in its OK packet (`LAST_INSERT_ID(expr)`). The row is
//! written once to take the lease (its fence must be stored before it is handed out) and once to
//! give it back (the row must stop naming the session before the lock is released, see above).
//!
//! A semaphore of `n` permits is `n` named locks (slots `0..n`); an attempt takes the first free
//! slot from a rotating start in one statement, its fence drawn from the semaphore's row. A slot's
//! row also says the size its holder was granted under, written in the transaction that draws the
//! fence (so holds the semaphore's row locked) only if no live holder has another size: two sizes
//! are never granted at once, and an acquire of another size is refused (see
//! [`Named::grant_permit`]; the first statement of every attempt looks too, so an acquire of
//! another size is refused even when no slot is free for it).

use crate::mode::LockMode;
use crate::names::{lock_name, micros, quoted, semaphore_name, slot_name, table_ident, NOW_US};
use crate::session::{call, int, with_session, Conn2, Failure, Pools, Session};
use crate::sweep::{Every, SWEEP_AFTER_US};
use crate::waiting::Attempts;
use crate::Ask;
use leasehold_core::retry::Retry;
use leasehold_core::wait::{other_size, Turn, Waiter};
use leasehold_core::{
    Deadline, Error, Key, KeyInfo, LeaseKind, Permits, RawLease, Result, Token, Ttl,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How many slots one statement offers `GET_LOCK`.
const SLOTS_PER_STATEMENT: u32 = 128;

pub(crate) struct Named {
    fences: String,
    sweep_due: Every,
    /// Where the next permit attempt starts, so permits spread over the slots.
    next_slot: AtomicU32,
}

/// What a named lease keeps: the session that holds the lock, and the lock's name.
struct Held {
    conn: Conn2,
    name: String,
}

impl Named {
    pub fn new(table: &str) -> Named {
        Named {
            fences: table_ident(table, "_fences"),
            sweep_due: Every::minute(),
            next_slot: AtomicU32::new(0),
        }
    }

    /// The fence table, quoted (`records.rs` names the records table after it).
    pub(crate) fn fence_table(&self) -> &str {
        &self.fences
    }

    /// Creates the fence table if missing, and gives one made by 0.2 its `permits` column.
    pub fn ensure(&self, pools: &Pools, deadline: Deadline) -> Result<()> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (\
               name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, \
               fence BIGINT UNSIGNED NOT NULL DEFAULT 0, holder BIGINT UNSIGNED NOT NULL DEFAULT 0, \
               expires_us BIGINT NOT NULL DEFAULT 0, {SIZE_COLUMN} {SIZE_DEFINITION}) ENGINE=InnoDB",
            self.fences
        );
        call(
            pools,
            deadline,
            &sql,
            &format!("creating the table {}", self.fences),
        )?;
        crate::add_column(pools, deadline, &self.fences, SIZE_COLUMN, SIZE_DEFINITION)
    }

    fn try_permit(
        &self,
        pools: &Pools,
        ask: &Ask,
        semaphore: &str,
        permits: Permits,
        deadline: Deadline,
    ) -> Result<Turn> {
        let n = permits.get();
        let start = self.next_slot.fetch_add(1, Ordering::Relaxed) % n;
        let mut shortest: Option<Duration> = None;
        let mut offered = 0;
        while offered < n {
            let chunk: Vec<String> = (offered..n.min(offered + SLOTS_PER_STATEMENT))
                .map(|i| slot_name(semaphore, (start + i) % n))
                .collect();
            offered += chunk.len() as u32;
            match self.attempt(pools, ask, &chunk, semaphore, permits, deadline)? {
                Turn::Granted(lease) => return Ok(Turn::Granted(lease)),
                Turn::NotYet { holder_left: left } => {
                    shortest = match (shortest, left) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                }
            }
        }
        Ok(Turn::NotYet {
            holder_left: shortest,
        })
    }

    /// One attempt at the first free slot of `names`, the fence drawn from the semaphore's row
    /// `fence_row`.
    fn attempt(
        &self,
        pools: &Pools,
        ask: &Ask,
        names: &[String],
        fence_row: &str,
        permits: Permits,
        deadline: Deadline,
    ) -> Result<Turn> {
        let f = &self.fences;
        let list = names
            .iter()
            .map(|n| quoted(n))
            .collect::<Vec<_>>()
            .join(", ");
        let cases: String = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!(" WHEN GET_LOCK({}, 0) = 1 THEN {i}", quoted(n)))
            .collect();
        // A permit asked under another size than the live holders' takes no slot: its second
        // column names their size. This look is not under the semaphore's row lock (a slot is
        // taken first); the grant checks again under it ([`Named::grant_permit`]).
        let take = format!(
            "SELECT CASE WHEN s.o IS NOT NULL THEN NULL{cases} END, s.o \
             FROM (SELECT MAX({SIZE_COLUMN}) AS o FROM {f} WHERE {}) s",
            other_size_live(fence_row, permits)
        );
        // The first free name is taken; the others are only looked at (a holder whose lease has
        // expired, and the earliest expiry for the wait).
        let sql = format!(
            "{take}; \
             SELECT name, holder FROM {f} WHERE name IN ({list}) AND holder <> 0 \
               AND expires_us <= {NOW_US} AND IS_USED_LOCK(name) = holder LIMIT 1; \
             SELECT MIN(expires_us) - {NOW_US} FROM {f} WHERE name IN ({list}) \
               AND IS_USED_LOCK(name) = holder"
        );
        // Made before the lock is taken: nothing may fail between the grant and the lease that
        // would leave the lock on a session going back to the pool.
        let token = Token::generate()?;
        let sent = Instant::now();
        let (mut conn, outcome) = with_session(pools, deadline, |s| s.batch(&sql, deadline))?;
        let answers = outcome.map_err(|e| pools.failed("taking a named lock", &e))?;
        if let Some(held) = answers[0].int(1) {
            return Err(other_size(ask.key, held as u32, permits.get()));
        }
        let granted = answers[0].int(0).and_then(|i| names.get(i as usize));
        let name = match (granted, answers[1].rows.first()) {
            (Some(name), _) => name.clone(),
            (None, Some(row)) => {
                let expired = String::from_utf8_lossy(match row.first() {
                    Some(mysql::Value::Bytes(b)) => b,
                    _ => &[][..],
                })
                .into_owned();
                let holder = row.get(1).and_then(int).unwrap_or(0);
                match names.iter().find(|n| **n == expired) {
                    Some(name) if holder > 0 => {
                        if !self.take_expired(pools, &mut conn, name, holder, deadline)? {
                            return Ok(Turn::NotYet {
                                holder_left: Some(Duration::ZERO),
                            });
                        }
                        name.clone()
                    }
                    _ => return Ok(Turn::NotYet { holder_left: None }),
                }
            }
            (None, None) => {
                let left = answers[2]
                    .int(0)
                    .map(|us| Duration::from_micros(us.max(0) as u64));
                return Ok(Turn::NotYet { holder_left: left });
            }
        };
        let taken = (token, sent);
        self.grant_permit(pools, ask, conn, &name, fence_row, permits, taken, deadline)
    }

    /// One attempt at an exclusive lease: one round trip when the lock is free. The batch sets the
    /// session's idle limit and takes the lock into a user variable (one `SET`), then writes the
    /// name's row (holder, expiry, and the fence drawn as `GREATEST(fence + 1, server µs)`) only if
    /// the lock was taken. The fence comes back in the upsert's OK packet through
    /// `LAST_INSERT_ID(expr)`, so no statement follows to read it. `GET_LOCK` stays out of the
    /// upsert: under statement-based replication a replica would run it (and hold the lock in its
    /// applier for good); a user variable is replicated as its value. A lock found taken costs a
    /// second round trip, which looks at its holder.
    fn try_lock(&self, pools: &Pools, ask: &Ask, name: &str, deadline: Deadline) -> Result<Turn> {
        // Made before the lock is taken: nothing may fail between the grant and the lease that
        // would leave the lock on a session going back to the pool.
        let token = Token::generate()?;
        let n = quoted(name);
        let sql = self.grant_sql(ask.ttl, &n, &format!("GET_LOCK({n}, 0)"));
        let sent = Instant::now();
        let (mut conn, outcome) = with_session(pools, deadline, |s| s.batch(&sql, deadline))?;
        let answers = outcome.map_err(|e| pools.failed("taking a named lock", &e))?;
        let mut upsert = answers.nth_last(1);
        let again;
        if upsert.affected == 0 {
            // Taken: see by whom. The batch set the session's idle limit for a lease it did not
            // get, so the look puts it back; and lets go of the lock in the same statement, in
            // case it was this session's after all (`RELEASE_LOCK` of another session's lock does
            // nothing), so a session never goes back to the pool holding one.
            let f = &self.fences;
            let look = format!(
                "SELECT holder, expires_us <= {NOW_US}, expires_us - {NOW_US} FROM {f} \
                 WHERE name = {n} AND holder <> 0 AND IS_USED_LOCK(name) = holder; \
                 SET SESSION wait_timeout = DEFAULT, @leasehold_released = RELEASE_LOCK({n})"
            );
            let answers = conn
                .batch(&look, deadline)
                .map_err(|e| pools.failed("taking a named lock", &e))?;
            let holder = answers[0].int(0).unwrap_or(0);
            if holder <= 0 {
                return Ok(Turn::NotYet { holder_left: None });
            }
            if answers[0].int(1) != Some(1) {
                let left = answers[0]
                    .int(2)
                    .map(|us| Duration::from_micros(us.max(0) as u64));
                return Ok(Turn::NotYet { holder_left: left });
            }
            if !self.take_expired(pools, &mut conn, name, holder, deadline)? {
                return Ok(Turn::NotYet {
                    holder_left: Some(Duration::ZERO),
                });
            }
            // The lock is ours on this session now: the same write, on the lock it holds.
            let sql = self.grant_sql(
                ask.ttl,
                &n,
                &format!("(IS_USED_LOCK({n}) = CONNECTION_ID())"),
            );
            again = match conn.batch(&sql, deadline) {
                Ok(a) => a,
                // The session ends with the failure (it is never reused), and the lock with it.
                Err(e) => return Err(pools.failed("drawing the fence", &e)),
            };
            upsert = again.nth_last(1);
        }
        let fence = upsert.insert_id;
        if upsert.affected == 0 || fence == 0 {
            // Closing the session frees the lock.
            conn.broken = true;
            return Err(pools.unavailable("the server returned no fence"));
        }
        Ok(Turn::Granted(
            RawLease::new(ask.key.clone(), token, fence, ask.ttl, sent)
                .with_kind(LeaseKind::Exclusive)
                .watch_session(conn.watch())
                .with_state(Held {
                    conn,
                    name: name.to_owned(),
                }),
        ))
    }

    /// The batch that takes the lock `n` (quoted) by `lock` (an expression that is 1 once the
    /// lock is this session's) and, if taken, makes its row say this session holds it until the
    /// TTL, with the next fence in `LAST_INSERT_ID`. The idle limit is set in the same statement
    /// as `lock` (one statement fewer), so the session never idles holding the lock without it.
    fn grant_sql(&self, ttl: Ttl, n: &str, lock: &str) -> String {
        let f = &self.fences;
        let us = micros(ttl.as_duration());
        format!(
            "SET SESSION wait_timeout = {wt}, @leasehold_got = {lock}; \
             INSERT INTO {f} (name, fence, holder, expires_us) \
               SELECT {n}, LAST_INSERT_ID({NOW_US}), CONNECTION_ID(), {NOW_US} + {us} FROM DUAL \
               WHERE @leasehold_got = 1 \
             ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(GREATEST(fence + 1, VALUES(fence))), \
               holder = VALUES(holder), expires_us = VALUES(expires_us)",
            wt = wait_timeout(ttl),
        )
    }

    /// Makes the slot `name` that `conn` just locked a permit of `semaphore`, in one transaction
    /// that locks the semaphore's row first (the fence draw): so grants of one semaphore happen one
    /// at a time, and each sees every earlier grant's slot row, with its size, committed. The slot's
    /// row gets holder, expiry and size only if no live holder of another size has one; otherwise
    /// the slot is given back and the acquire refused. The transaction's snapshot is taken by its
    /// first plain read, which comes after the row lock.
    #[allow(clippy::too_many_arguments)]
    fn grant_permit(
        &self,
        pools: &Pools,
        ask: &Ask,
        mut conn: Conn2,
        name: &str,
        semaphore: &str,
        permits: Permits,
        (token, sent): (Token, Instant),
        deadline: Deadline,
    ) -> Result<Turn> {
        let f = &self.fences;
        let ttl = micros(ask.ttl.as_duration());
        let (n, slot, fr) = (permits.get(), quoted(name), quoted(semaphore));
        let sql = format!(
            "SET SESSION wait_timeout = {wt}; \
             START TRANSACTION; \
             INSERT INTO {f} (name, fence, holder, expires_us) \
               VALUES ({fr}, {NOW_US}, 0, {NOW_US} + {ttl}) \
             ON DUPLICATE KEY UPDATE fence = GREATEST(fence + 1, VALUES(fence)), \
               expires_us = GREATEST(expires_us, VALUES(expires_us)); \
             SELECT MAX({SIZE_COLUMN}) INTO @leasehold_other FROM {f} \
               WHERE name <> {slot} AND {live}; \
             INSERT INTO {f} (name, holder, expires_us, {SIZE_COLUMN}) \
               SELECT {slot}, CONNECTION_ID(), {NOW_US} + {ttl}, {n} FROM DUAL \
               WHERE @leasehold_other IS NULL \
             ON DUPLICATE KEY UPDATE holder = VALUES(holder), expires_us = VALUES(expires_us), \
               {SIZE_COLUMN} = VALUES({SIZE_COLUMN}); \
             COMMIT; \
             SELECT fence, @leasehold_other FROM {f} WHERE name = {fr}",
            wt = wait_timeout(ask.ttl),
            live = other_size_live(semaphore, permits),
        );
        let answers = match conn.batch(&sql, deadline) {
            Ok(a) => a,
            // The session ends with the failure (it is never reused), and the slot with it.
            Err(e) => return Err(pools.failed("drawing the fence", &e)),
        };
        let last = answers.nth_last(1);
        if let Some(held) = last.int(1) {
            // Given back at once; if that fails, closing the session frees the slot.
            let give_back =
                format!("SELECT RELEASE_LOCK({slot}); SET SESSION wait_timeout = DEFAULT");
            if conn.batch(&give_back, deadline).is_err() {
                conn.broken = true;
            }
            return Err(other_size(ask.key, held as u32, n));
        }
        let Some(fence) = last.int(0).filter(|f| *f > 0) else {
            // Closing the session frees the lock.
            conn.broken = true;
            return Err(pools.unavailable("the server returned no fence"));
        };
        Ok(Turn::Granted(
            RawLease::new(ask.key.clone(), token, fence as u64, ask.ttl, sent)
                .with_kind(LeaseKind::Permit(permits))
                .watch_session(conn.watch())
                .with_state(Held {
                    conn,
                    name: name.to_owned(),
                }),
        ))
    }

    /// Starts a transaction holding the fence row of `name` locked, and reads the row's holder,
    /// whether its lease has expired, and who holds the lock. While the row is locked, a
    /// Leasehold holder can neither extend nor release (both change the row first), so its
    /// session cannot move on to another lease before it is ended.
    fn lock_row(
        &self,
        session: &mut Session,
        name: &str,
        deadline: Deadline,
    ) -> std::result::Result<(i64, bool, Option<i64>), Failure> {
        let n = quoted(name);
        let answers = session.batch(
            &format!(
                "START TRANSACTION; \
                 SELECT holder, expires_us <= {NOW_US} FROM {} WHERE name = {n} FOR UPDATE; \
                 SELECT IS_USED_LOCK({n})",
                self.fences
            ),
            deadline,
        )?;
        Ok((
            answers[1].int(0).unwrap_or(0),
            answers[1].int(1) == Some(1),
            answers[2].int(0),
        ))
    }

    /// Ends the session `holder` of `name` if, under the row's lock, it still holds the lock for a
    /// lease that has expired; then takes the lock on `conn`. `false` when it did not (the holder
    /// moved on, or the server did not free the lock in time for this attempt).
    fn take_expired(
        &self,
        pools: &Pools,
        conn: &mut Conn2,
        name: &str,
        holder: i64,
        deadline: Deadline,
    ) -> Result<bool> {
        let failed = |e: Failure| pools.failed("ending an expired holder", &e);
        let (row_holder, expired, user) = self.lock_row(conn, name, deadline).map_err(failed)?;
        if !(row_holder == holder && expired && user == Some(holder)) {
            conn.batch("ROLLBACK", deadline).map_err(failed)?;
            return Ok(false);
        }
        self.kill(pools, conn, holder, deadline)?;
        tracing::info!(
            "leasehold-mysql: ended session {holder}, whose lease on {name} had expired"
        );
        let sql = format!("SELECT GET_LOCK({}, 0)", quoted(name));
        let mut settling =
            Retry::SETTLING.start(settle_within(deadline).min(Deadline::after(TAKE_OVER_SETTLE)));
        loop {
            let answers = conn
                .batch(&sql, deadline)
                .map_err(|e| pools.failed("taking a named lock", &e))?;
            if answers[0].int(0) == Some(1) {
                return Ok(true);
            }
            if !settling.pause() {
                return Ok(false);
            }
        }
    }

    /// `KILL CONNECTION holder` and the commit of the transaction [`Named::lock_row`] started.
    fn kill(
        &self,
        pools: &Pools,
        session: &mut Session,
        holder: i64,
        deadline: Deadline,
    ) -> Result<()> {
        let outcome = session.batch(&format!("KILL CONNECTION {holder}"), deadline);
        let result = match outcome {
            Ok(_) => Ok(()),
            // Already gone. A refused KILL leaves nothing open: the session stays usable.
            Err(Failure::Server(1094, _)) => {
                session.broken = false;
                Ok(())
            }
            Err(Failure::Server(1095, _)) => Err(pools.unavailable(
                "cannot end the session holding the lock: KILL needs the same account, or \
                 CONNECTION_ADMIN (MySQL) / CONNECTION ADMIN (MariaDB)",
            )),
            Err(e) => Err(pools.failed("ending the holder's session", &e)),
        };
        result?;
        session
            .batch("COMMIT", deadline)
            .map(drop)
            .map_err(|e| pools.failed("ending the holder's session", &e))
    }
}

impl Named {
    /// Deletes rows of names whose last lease ended over a minute ago and that nobody holds (at
    /// most 1000, at most once a minute per client): what a key leaves behind is bounded in time.
    /// A fence lost with its row is replaced by the clock term, which by then is larger.
    fn sweep(&self, session: &mut Session, deadline: Deadline) {
        if !self.sweep_due.due() {
            return;
        }
        let sql = format!(
            "DELETE FROM {} WHERE expires_us < {NOW_US} - {SWEEP_AFTER_US} \
               AND IS_FREE_LOCK(name) = 1 LIMIT 1000",
            self.fences
        );
        if let Err(e) = session.batch(&sql, deadline) {
            tracing::debug!("leasehold-mysql: sweeping old fence rows failed: {e}");
        }
    }
}

fn wait_until_free(
    pools: &Pools,
    conn: &mut Conn2,
    name: &str,
    holder: i64,
    deadline: Deadline,
) -> Result<()> {
    let sql = format!("SELECT IS_USED_LOCK({})", quoted(name));
    let mut settling = Retry::SETTLING.start(settle_within(deadline));
    loop {
        let answers = conn
            .batch(&sql, deadline)
            .map_err(|e| pools.failed("forcing a release", &e))?;
        if answers[0].int(0) != Some(holder) {
            return Ok(());
        }
        if !settling.pause() {
            return Err(pools.unavailable("the server did not free the lock in time"));
        }
    }
}

/// How long a take-over looks for the killed holder's lock to come free: a killed session's locks
/// go with it within milliseconds; one that takes longer is left to the next attempt.
const TAKE_OVER_SETTLE: Duration = Duration::from_millis(500);

/// Until when a look at a lock the server is freeing may pause: the call's deadline less the time
/// one more statement needs, so the last look's answer still comes within it.
fn settle_within(deadline: Deadline) -> Deadline {
    let last_look = Duration::from_millis(20);
    Deadline::at(
        deadline
            .instant()
            .checked_sub(last_look)
            .unwrap_or_else(Instant::now),
    )
}

/// The fence table's column that says the size a semaphore's slot was granted under (NULL on a
/// lock's row, and on a slot row of 0.2: size unknown, which binds nobody).
const SIZE_COLUMN: &str = "permits";
const SIZE_DEFINITION: &str = "INT UNSIGNED NULL DEFAULT NULL";

/// The condition on fence rows that picks the slots of `semaphore` held by a live lease granted
/// under another size than `permits`: the row names a holder whose lease has not expired and
/// whose session still holds the slot. A released slot's row names no holder; an expired one's
/// binds nobody even while its session still holds the slot (until an acquirer ends it).
fn other_size_live(semaphore: &str, permits: Permits) -> String {
    format!(
        "name LIKE '{semaphore}:%' AND {SIZE_COLUMN} <> {n} AND holder <> 0 \
           AND expires_us > {NOW_US} AND IS_USED_LOCK(name) = holder",
        n = permits.get()
    )
}

/// The idle limit of a lease's session: past its TTL, so the server never ends a live lease's
/// session, and close enough that a silent holder does not keep the lock for long.
fn wait_timeout(ttl: Ttl) -> u64 {
    ttl.as_millis().div_ceil(1000) + 1
}

/// Named locks (`GET_LOCK`): a lease lives in the session that took it, so it has no shared
/// holders to move between and cannot be restored elsewhere.
impl LockMode for Named {
    fn name(&self) -> &'static str {
        "mysql-named"
    }

    fn session_held(&self) -> bool {
        true
    }

    fn own_table(&self) -> (&str, &'static str) {
        (self.fence_table(), "_fences")
    }

    /// A waiting acquire's attempts (also the single attempt of a try).
    fn waiter<'a>(
        &'a self,
        pools: &'a Pools,
        ask: Ask<'a>,
        kind: LeaseKind,
        end: Instant,
    ) -> Result<Box<dyn Waiter + 'a>> {
        match kind {
            LeaseKind::Shared => Err(Error::invalid(
                "MySQL named locks (GET_LOCK) are exclusive only: use ?lock=table for shared locks",
            )),
            LeaseKind::Exclusive => {
                let name = lock_name(&ask.prefixed);
                Ok(Box::new(Attempts::new(pools, end, move |_, deadline| {
                    self.try_lock(pools, &ask, &name, deadline)
                })))
            }
            LeaseKind::Permit(n) => {
                let semaphore = semaphore_name(&ask.prefixed);
                Ok(Box::new(Attempts::new(pools, end, move |_, deadline| {
                    self.try_permit(pools, &ask, &semaphore, n, deadline)
                })))
            }
            other => Err(Error::invalid(format!(
                "MySQL named locks do not offer {} leases",
                other.name()
            ))),
        }
    }

    /// One round trip of two statements: the row cleared (whether the lease was still live read
    /// from the update's OK packet), then the lock released and the session's idle limit put back.
    fn release(&self, pools: &Pools, _: &str, lease: &mut RawLease) -> Result<()> {
        let deadline = pools.call();
        lease.expire();
        let Some(mut held) = lease.take_state::<Held>() else {
            return Err(Error::Lost(
                "the session that held this named lock is gone".into(),
            ));
        };
        // The lease is over for its holder whatever the release finds.
        held.conn.unwatch();
        let n = quoted(&held.name);
        let f = &self.fences;
        // The row first (it names this session as the holder), then the lock: an acquirer that
        // ends expired holders does so under the row's lock, so it either sees the row cleared
        // or ends this session before the lock is released and the session goes back to the pool,
        // never a session that has moved on to another lease. The row is cleared whether or not
        // the lease is still live (a row left naming this session would be such a stale look);
        // whether it was comes back in the OK packet (`LAST_INSERT_ID(expr)`: 1 live, 0 expired),
        // and the expiry becomes `LEAST(expires_us, now)`, so the sweep counts from here.
        //
        // The lock is released in the statement that puts the idle limit back, its result not
        // read (one statement fewer): when the update matched, the row named this live session,
        // which took the lock and lets go of it only here, so the lock was this session's. When
        // it did not match, the session is closed, which frees whatever it held.
        let sql = format!(
            "UPDATE {f} SET \
               expires_us = IF(LAST_INSERT_ID(expires_us > {NOW_US}), {NOW_US}, expires_us), \
               holder = 0 WHERE name = {n} AND holder = CONNECTION_ID(); \
             SET SESSION wait_timeout = DEFAULT, @leasehold_released = RELEASE_LOCK({n})"
        );
        let outcome = held.conn.batch(&sql, deadline);
        match outcome {
            Ok(answers) if answers[0].affected == 1 => {
                self.sweep(&mut held.conn, deadline);
                if answers[0].insert_id == 1 {
                    Ok(())
                } else {
                    Err(Error::Lost(
                        "the lease had expired before its release (the lock is freed now)".into(),
                    ))
                }
            }
            Ok(_) => {
                held.conn.broken = true;
                Err(Error::Lost(
                    "the lease's row no longer named this session (its lock is freed now)".into(),
                ))
            }
            Err(Failure::Timeout) => Err(pools.failed("releasing", &Failure::Timeout)),
            Err(e) => Err(pools.lost(format!("the session holding the lock ended: {e}"))),
        }
    }

    fn extend(&self, pools: &Pools, _: &str, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let deadline = pools.call();
        let Some(held) = lease.state_mut::<Held>() else {
            lease.expire();
            return Err(Error::Lost(
                "the session that held this named lock is gone".into(),
            ));
        };
        let n = quoted(&held.name);
        let us = micros(ttl.as_duration());
        let sql = format!(
            "UPDATE {f} SET expires_us = {NOW_US} + {us} WHERE name = {n} \
               AND holder = CONNECTION_ID() AND expires_us > {NOW_US} \
               AND IS_USED_LOCK({n}) = CONNECTION_ID(); \
             SET SESSION wait_timeout = {wt}",
            f = self.fences,
            wt = wait_timeout(ttl)
        );
        let sent = Instant::now();
        let outcome = held.conn.batch(&sql, deadline);
        match outcome {
            Ok(answers) if answers[0].affected == 1 => {
                lease.renewed(ttl, sent);
                Ok(())
            }
            Ok(_) => {
                // Expired: closing the session frees the lock for whoever comes next.
                if let Some(mut held) = lease.take_state::<Held>() {
                    held.conn.broken = true;
                }
                lease.expire();
                Err(Error::Lost(
                    "the lease had expired or its lock was taken over before the extend".into(),
                ))
            }
            Err(e) => {
                // The session is closed with the failure, and the lock with it: the lease is over.
                lease.take_state::<Held>();
                lease.expire();
                match e {
                    Failure::Timeout => Err(pools.failed("extending", &e)),
                    e => Err(pools.lost(format!("the session holding the lock ended: {e}"))),
                }
            }
        }
    }

    fn try_promote(&self, _: &Pools, _: &str, _: &mut RawLease, _: Ttl) -> Result<()> {
        Err(Error::invalid(
            "the mysql-named backend cannot promote a shared lease (it has no shared locks): \
             use ?lock=table",
        ))
    }

    fn demote(&self, _: &Pools, _: &str, _: &mut RawLease, _: Ttl) -> Result<()> {
        Err(Error::invalid(
            "the mysql-named backend cannot demote an exclusive lease (it has no shared \
             locks): use ?lock=table",
        ))
    }

    fn inspect(&self, pools: &Pools, prefixed: &[u8], kind: LeaseKind) -> Result<KeyInfo> {
        let deadline = pools.call();
        let f = &self.fences;
        if let LeaseKind::Permit(_) = kind {
            let s = semaphore_name(prefixed);
            let sql = format!(
                "SELECT COUNT(*), MAX(expires_us) - {NOW_US}, \
                   (SELECT fence FROM {f} WHERE name = {sq}) FROM {f} \
                 WHERE name LIKE '{s}:%' AND IS_USED_LOCK(name) IS NOT NULL",
                sq = quoted(&s)
            );
            let row = &call(pools, deadline, &sql, "inspecting")?[0];
            let holders = row.int(0).unwrap_or(0);
            return Ok(KeyInfo::new(
                holders > 0,
                row.int(1)
                    .filter(|_| holders > 0)
                    .map(|us| Duration::from_micros(us.max(0) as u64)),
                row.int(2).map(|f| f as u64).filter(|f| *f > 0),
            )
            .with_holders(holders as u32, false));
        }
        let n = quoted(&lock_name(prefixed));
        let sql = format!(
            "SELECT IS_USED_LOCK({n}) IS NOT NULL, \
               (SELECT expires_us - {NOW_US} FROM {f} WHERE name = {n} AND holder = IS_USED_LOCK({n})), \
               (SELECT fence FROM {f} WHERE name = {n})"
        );
        let row = &call(pools, deadline, &sql, "inspecting")?[0];
        let held = row.int(0) == Some(1);
        let info = KeyInfo::new(
            held,
            row.int(1)
                .filter(|_| held)
                .map(|us| Duration::from_micros(us.max(0) as u64)),
            row.int(2).map(|f| f as u64).filter(|f| *f > 0),
        );
        Ok(if held {
            info.with_holders(1, false)
        } else {
            info
        })
    }

    fn restore(&self, _: &Pools, _: &[u8], _: &Key, _: Token) -> Result<RawLease> {
        Err(Error::invalid(
            "MySQL named locks belong to the session that took them, so another process \
             cannot restore one: use ?lock=table (the lease then lives in a row)",
        ))
    }

    /// Ends the session holding the key's lock (any holder, Leasehold's or not), and waits until
    /// the server has freed the lock.
    fn force_release(&self, pools: &Pools, prefixed: &[u8]) -> Result<bool> {
        let deadline = pools.call();
        let name = lock_name(prefixed);
        let (mut conn, outcome) =
            with_session(pools, deadline, |s| self.lock_row(s, &name, deadline))?;
        let (_, _, Some(holder)) = outcome.map_err(|e| pools.failed("forcing a release", &e))?
        else {
            conn.batch("ROLLBACK", deadline)
                .map_err(|e| pools.failed("forcing a release", &e))?;
            return Ok(false);
        };
        self.kill(pools, &mut conn, holder, deadline)?;
        wait_until_free(pools, &mut conn, &name, holder, deadline)?;
        tracing::warn!("leasehold-mysql: forced the release of {name} (ended session {holder})");
        Ok(true)
    }
}
