//! Table mode: one row per key in an InnoDB table, judged by the server's clock; shared holders and
//! permits in tables of their own. Every operation is one round trip (a batch of statements, in a
//! transaction where it writes more than one row), keeps nothing on the session between calls, and
//! never raises an error on conflict, so it works through a statement-level pooler (ProxySQL).
//!
//! The main table's row of a key: `token` (the exclusive holder, or all zeros while readers hold
//! it), `last_token` (the last lease granted, which tells a batch whether its own grant happened),
//! `fence` (per key, drawn as `GREATEST(fence + 1, server µs)` under the row's lock, so fences
//! follow grant order and survive a lost table), `expires_us` (no earlier than every reader's
//! expiry), and `writer_until` (a waiting writer's mark: new readers hold back while it is ahead of
//! the clock, so readers never starve a writer).
//!
//! A permit's row says the size it was granted under (`permits`); a grant, which holds the
//! semaphore's row locked while it counts, refuses while a live permit of another size is left.
//!
//! The upsert's assignments each take the grant condition as `last_token = <ours> OR <condition>`
//! with `last_token` assigned first: MySQL and MariaDB evaluate `ON DUPLICATE KEY UPDATE`
//! assignments left to right (later ones see earlier results), MariaDB under
//! `SIMULTANEOUS_ASSIGNMENT` all at once (every one sees the old row); this form gives the same
//! outcome under both.

use crate::mode::LockMode;
use crate::names::{micros, row_key, semaphore_row_key, table_ident, token_literal, NOW_US};
use crate::session::{call, with_session, Answers, Failure, Pools};
use crate::sweep::{Every, SWEEP_AFTER_US};
use crate::waiting::Attempts;
use crate::Ask;
use leasehold_core::retry::Retry;
use leasehold_core::wait::{held_elsewhere, other_size, Turn, Waiter};
use leasehold_core::{
    Deadline, Error, Key, KeyInfo, LeaseKind, Permits, RawLease, Result, Token, Ttl,
};
use std::time::{Duration, Instant};

/// The token readers leave in the key's row.
const SHARED: &str = "X'00000000000000000000000000000000'";
/// The permits table's column that says the size a permit was granted under (NULL on a row of
/// 0.2: size unknown, which binds nobody).
const SIZE_COLUMN: &str = "permits";
const SIZE_DEFINITION: &str = "INT UNSIGNED NULL DEFAULT NULL";
/// How long a waiting writer's mark holds new readers back after an attempt, at most: never past
/// the end of its wait, so a writer that gives up leaves no mark behind to refuse readers.
const WRITER_MARK: Duration = Duration::from_secs(1);

pub(crate) struct Table {
    main: String,
    shares: String,
    permits: String,
    sweep_due: Every,
}

impl Table {
    pub fn new(name: &str) -> Table {
        Table {
            main: table_ident(name, ""),
            shares: table_ident(name, "_shares"),
            permits: table_ident(name, "_permits"),
            sweep_due: Every::minute(),
        }
    }

    /// The main table, quoted (`records.rs` names the records table after it).
    pub(crate) fn main_table(&self) -> &str {
        &self.main
    }

    /// Creates the tables if missing, and gives a permits table made by 0.2 its `permits` column.
    pub fn ensure(&self, pools: &Pools, deadline: Deadline) -> Result<()> {
        let holders = |name: &str, more: &str| {
            format!(
                "CREATE TABLE IF NOT EXISTS {name} (\
                   k BINARY(32) NOT NULL, token BINARY(16) NOT NULL, \
                   fence BIGINT UNSIGNED NOT NULL, expires_us BIGINT NOT NULL, {more}\
                   PRIMARY KEY (k, token), KEY (expires_us)) ENGINE=InnoDB"
            )
        };
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (\
               k BINARY(32) NOT NULL PRIMARY KEY, token BINARY(16) NOT NULL, \
               last_token BINARY(16) NOT NULL, fence BIGINT UNSIGNED NOT NULL, \
               expires_us BIGINT NOT NULL, writer_until BIGINT NOT NULL DEFAULT 0, \
               KEY (expires_us)) ENGINE=InnoDB; {}; {}",
            self.main,
            holders(&self.shares, ""),
            holders(&self.permits, &format!("{SIZE_COLUMN} {SIZE_DEFINITION}, "))
        );
        call(
            pools,
            deadline,
            &sql,
            &format!("creating the tables {}", self.main),
        )?;
        crate::add_column(pools, deadline, &self.permits, SIZE_COLUMN, SIZE_DEFINITION)
    }

    /// A waiting acquire's attempts (also the single attempt of a try).
    pub fn waiter<'a>(
        &'a self,
        pools: &'a Pools,
        ask: Ask<'a>,
        kind: LeaseKind,
        end: Instant,
    ) -> Box<dyn Waiter + 'a> {
        Box::new(Attempts::new(
            pools,
            end,
            move |waiting, deadline| match kind {
                LeaseKind::Permit(n) => self.try_permit(pools, &ask, n, deadline),
                _ => {
                    let mark = waiting
                        .then(|| WRITER_MARK.min(end.saturating_duration_since(Instant::now())));
                    self.try_lock(pools, &ask, kind == LeaseKind::Shared, mark, deadline)
                }
            },
        ))
    }

    /// One attempt at an exclusive (or, with `shared`, a shared) lease; a refused writer that goes
    /// on waiting marks the key for `mark` (see [`WRITER_MARK`]).
    fn try_lock(
        &self,
        pools: &Pools,
        ask: &Ask,
        shared: bool,
        mark: Option<Duration>,
        deadline: Deadline,
    ) -> Result<Turn> {
        let token = Token::generate()?;
        let (k, tok) = (row_key(&ask.prefixed), token_literal(&token));
        let ttl = micros(ask.ttl.as_duration());
        let (main, shares) = (&self.main, &self.shares);
        let free = format!("expires_us <= {NOW_US}");
        let ok = if shared {
            format!("({free} OR (token = {SHARED} AND writer_until <= {NOW_US}))")
        } else {
            free.clone()
        };
        let granted = format!("(last_token = {tok} OR {ok})");
        let (new_token, new_expiry) = if shared {
            (
                SHARED.to_owned(),
                format!("GREATEST(IF({free}, 0, expires_us), {NOW_US} + {ttl})"),
            )
        } else {
            (tok.clone(), format!("{NOW_US} + {ttl}"))
        };
        let writer = match mark {
            _ if shared => "writer_until".to_owned(),
            Some(mark) => format!(
                "IF({granted}, 0, GREATEST(writer_until, {NOW_US} + {}))",
                micros(mark)
            ),
            None => format!("IF({granted}, 0, writer_until)"),
        };
        let holders = if shared {
            format!(
                "DELETE FROM {shares} WHERE k = {k} AND expires_us <= {NOW_US}; \
                 INSERT INTO {shares} (k, token, fence, expires_us) \
                   SELECT k, {tok}, fence, {NOW_US} + {ttl} FROM {main} \
                   WHERE k = {k} AND last_token = {tok}"
            )
        } else {
            format!(
                "DELETE FROM {shares} WHERE k = {k} AND \
                   (SELECT last_token FROM {main} WHERE k = {k}) = {tok}"
            )
        };
        let sql = format!(
            "START TRANSACTION; \
             INSERT INTO {main} (k, token, last_token, fence, expires_us, writer_until) \
               VALUES ({k}, {new_token0}, {tok}, {NOW_US}, {NOW_US} + {ttl}, 0) \
             ON DUPLICATE KEY UPDATE \
               last_token = IF({ok}, {tok}, last_token), \
               fence = IF({granted}, GREATEST(fence + 1, {NOW_US}), fence), \
               writer_until = {writer}, \
               token = IF({granted}, {new_token}, token), \
               expires_us = IF({granted}, {new_expiry}, expires_us); \
             {holders}; \
             SELECT last_token = {tok}, fence, expires_us - {NOW_US} FROM {main} WHERE k = {k}; \
             COMMIT",
            new_token0 = if shared { SHARED } else { tok.as_str() },
        );
        let sent = Instant::now();
        let Some(answers) = self.attempt(pools, deadline, &sql, "acquiring")? else {
            return Ok(Turn::NotYet { holder_left: None });
        };
        let row = answers.nth_last(2);
        let kind = if shared {
            LeaseKind::Shared
        } else {
            LeaseKind::Exclusive
        };
        Ok(match (row.int(0), row.int(1), row.int(2)) {
            (Some(1), Some(fence), _) => Turn::Granted(
                RawLease::new(ask.key.clone(), token, fence as u64, ask.ttl, sent).with_kind(kind),
            ),
            (_, _, left) => Turn::NotYet {
                holder_left: left.map(from_micros),
            },
        })
    }

    fn try_permit(
        &self,
        pools: &Pools,
        ask: &Ask,
        permits: Permits,
        deadline: Deadline,
    ) -> Result<Turn> {
        let token = Token::generate()?;
        let (k, tok) = (semaphore_row_key(&ask.prefixed), token_literal(&token));
        let ttl = micros(ask.ttl.as_duration());
        let n = permits.get();
        let (main, holders) = (&self.main, &self.permits);
        // The semaphore's row is locked first, so attempts on one semaphore count (and check the
        // holders' size) one at a time: two sizes are never granted at once. Expired permits are
        // deleted first, so every row counted is live.
        let sql = format!(
            "START TRANSACTION; \
             INSERT INTO {main} (k, token, last_token, fence, expires_us, writer_until) \
               VALUES ({k}, {SHARED}, {SHARED}, 0, 0, 0) \
               ON DUPLICATE KEY UPDATE fence = fence; \
             DELETE FROM {holders} WHERE k = {k} AND expires_us <= {NOW_US}; \
             INSERT INTO {holders} (k, token, fence, expires_us, {SIZE_COLUMN}) \
               SELECT k, {tok}, GREATEST(fence + 1, {NOW_US}), {NOW_US} + {ttl}, {n} FROM {main} \
               WHERE k = {k} AND (SELECT COUNT(*) FROM {holders} WHERE k = {k}) < {n} \
                 AND NOT EXISTS (SELECT 1 FROM {holders} WHERE k = {k} AND {SIZE_COLUMN} <> {n}); \
             UPDATE {main} SET fence = GREATEST(fence, \
               (SELECT fence FROM {holders} WHERE k = {k} AND token = {tok})), \
               expires_us = GREATEST(expires_us, {NOW_US} + {ttl}) \
               WHERE k = {k} AND EXISTS (SELECT 1 FROM {holders} WHERE k = {k} AND token = {tok}); \
             SELECT fence, expires_us - {NOW_US} FROM {holders} WHERE k = {k} AND token = {tok}; \
             SELECT MIN(expires_us) - {NOW_US}, MAX(IF({SIZE_COLUMN} <> {n}, {SIZE_COLUMN}, NULL)) \
               FROM {holders} WHERE k = {k}; \
             COMMIT"
        );
        let sent = Instant::now();
        let Some(answers) = self.attempt(pools, deadline, &sql, "taking a permit")? else {
            return Ok(Turn::NotYet { holder_left: None });
        };
        let (mine, first_end) = (answers.nth_last(3), answers.nth_last(2));
        if let (None, Some(held)) = (mine.int(0), first_end.int(1)) {
            return Err(other_size(ask.key, held as u32, n));
        }
        Ok(match mine.int(0) {
            Some(fence) => Turn::Granted(
                RawLease::new(ask.key.clone(), token, fence as u64, ask.ttl, sent)
                    .with_kind(LeaseKind::Permit(permits)),
            ),
            None => Turn::NotYet {
                holder_left: first_end.int(0).map(from_micros),
            },
        })
    }

    /// Locks a semaphore's row, as every change to its permits does first, so they never deadlock
    /// one another (a promote and a demote lock a key's row the same way).
    fn lock_semaphore(&self, k: &str) -> String {
        format!("SELECT fence FROM {} WHERE k = {k} FOR UPDATE", self.main)
    }

    /// Sets the key's row's expiry to the latest live reader's (0 once none is left).
    fn readers_expiry(&self, k: &str) -> String {
        format!(
            "UPDATE {main} SET expires_us = COALESCE((SELECT MAX(expires_us) FROM {shares} \
               WHERE k = {k} AND expires_us > {NOW_US}), 0) WHERE k = {k} AND token = {SHARED}",
            main = self.main,
            shares = self.shares
        )
    }

    /// Deletes rows of leases that ended over a minute ago (at most 1000 per table), at most once a
    /// minute per client: what a key leaves behind is bounded in time. A fence lost with its row is
    /// replaced by the clock term, which by then is larger.
    fn sweep(&self, pools: &Pools, deadline: Deadline) {
        if !self.sweep_due.due() {
            return;
        }
        let old = format!("expires_us < {NOW_US} - {SWEEP_AFTER_US}");
        let sql = format!(
            "DELETE FROM {} WHERE {old} AND writer_until < {NOW_US} LIMIT 1000; \
             DELETE FROM {} WHERE {old} LIMIT 1000; DELETE FROM {} WHERE {old} LIMIT 1000",
            self.main, self.shares, self.permits
        );
        if let Err(e) = call(pools, deadline, &sql, "sweeping") {
            tracing::debug!("leasehold-mysql: sweeping old rows failed: {e}");
        }
    }

    /// An acquiring `sql`. A batch that InnoDB rolled back to break a deadlock says nothing about
    /// who holds the key (the other party may have been a release or a sweep, and a refusal must
    /// come from a holder), so it is sent again ([`ACQUIRE_CONTENTION`], [`Self::send`]).
    /// `None` when InnoDB still gives up the row lock (a deadlock or lock wait timeout), which
    /// counts as held, not as a failure.
    fn attempt(
        &self,
        pools: &Pools,
        deadline: Deadline,
        sql: &str,
        what: &str,
    ) -> Result<Option<Answers>> {
        match self.send(pools, deadline, sql, ACQUIRE_CONTENTION)?.0 {
            Ok(answers) => Ok(Some(answers)),
            Err(e) if e.is_contention() => Ok(None),
            Err(e) => Err(pools.failed(what, &e)),
        }
    }

    /// `sql` on a pooled session; a failure is `Unavailable`. A batch that InnoDB rolled back to
    /// break a deadlock with another caller is run again while time is left.
    fn run(&self, pools: &Pools, deadline: Deadline, sql: &str, what: &str) -> Result<Answers> {
        self.run_retried(pools, deadline, sql, what)
            .map(|(answers, _)| answers)
    }

    /// [`Self::run`], also saying whether `sql` was sent again on a new session after a session
    /// broke under it: the earlier try may then have committed before its reply was lost.
    fn run_retried(
        &self,
        pools: &Pools,
        deadline: Deadline,
        sql: &str,
        what: &str,
    ) -> Result<(Answers, bool)> {
        let (outcome, resent) = self.send(pools, deadline, sql, Retry::CONTENTION)?;
        outcome
            .map(|answers| (answers, resent))
            .map_err(|e| pools.failed(what, &e))
    }

    /// `sql` on a pooled session ([`with_session`]), sent again, paced by `contention`, when InnoDB rolled it back to break a deadlock (it changed nothing): its last
    /// outcome, and whether it was sent again on a new session after a session broke under it.
    fn send(
        &self,
        pools: &Pools,
        deadline: Deadline,
        sql: &str,
        contention: Retry,
    ) -> Result<(std::result::Result<Answers, Failure>, bool)> {
        let mut resent = false;
        let mut contention = contention.start(deadline);
        loop {
            let mut tries = 0;
            let (_conn, outcome) = with_session(pools, deadline, |s| {
                tries += 1;
                s.batch(sql, deadline)
            })?;
            resent |= tries > 1;
            match outcome {
                Err(e) if e.is_contention() && contention.pause() => {}
                outcome => return Ok((outcome, resent)),
            }
        }
    }
}

/// An acquiring batch that lost a deadlock is sent again at most 3 times before it counts as held
/// (every other statement, [`Retry::CONTENTION`], while its deadline lasts).
const ACQUIRE_CONTENTION: Retry = Retry::CONTENTION.at_most(3);

fn from_micros(us: i64) -> Duration {
    Duration::from_micros(us.max(0) as u64)
}

/// A table of leases: a lease lives in its row.
impl LockMode for Table {
    fn name(&self) -> &'static str {
        "mysql-table"
    }

    fn session_held(&self) -> bool {
        false
    }

    fn own_table(&self) -> (&str, &'static str) {
        (self.main_table(), "")
    }

    fn waiter<'a>(
        &'a self,
        pools: &'a Pools,
        ask: Ask<'a>,
        kind: LeaseKind,
        end: Instant,
    ) -> Result<Box<dyn Waiter + 'a>> {
        Ok(Table::waiter(self, pools, ask, kind, end))
    }

    fn release(&self, pools: &Pools, prefix: &str, lease: &mut RawLease) -> Result<()> {
        let prefixed = &lease.key().prefixed(prefix);
        let deadline = pools.call();
        let tok = token_literal(&lease.token());
        let live = format!("token = {tok} AND expires_us > {NOW_US}");
        let (sql, counted) = match lease.kind() {
            LeaseKind::Exclusive => {
                let k = row_key(prefixed);
                (
                    format!(
                        "UPDATE {} SET expires_us = {NOW_US} WHERE k = {k} AND {live}",
                        self.main
                    ),
                    0,
                )
            }
            LeaseKind::Shared => {
                let k = row_key(prefixed);
                (
                    format!(
                        "START TRANSACTION; DELETE FROM {} WHERE k = {k} AND {live}; {}; COMMIT",
                        self.shares,
                        self.readers_expiry(&k)
                    ),
                    1,
                )
            }
            _ => {
                let k = semaphore_row_key(prefixed);
                (
                    format!(
                        "START TRANSACTION; {}; DELETE FROM {} WHERE k = {k} AND {live}; COMMIT",
                        self.lock_semaphore(&k),
                        self.permits
                    ),
                    2,
                )
            }
        };
        let (answers, resent) = self.run_retried(pools, deadline, &sql, "releasing")?;
        self.sweep(pools, deadline);
        // Sent again after a session broke under it: nobody else can have taken the key while the
        // lease was valid, so a row no longer live then was given back by the earlier try, whose
        // reply was lost.
        if answers[counted].affected == 1 || (resent && !lease.remaining().is_zero()) {
            lease.expire();
            Ok(())
        } else {
            lease.expire();
            Err(Error::Lost(
                "the lease had expired or was taken over before its release".into(),
            ))
        }
    }

    fn extend(&self, pools: &Pools, prefix: &str, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let prefixed = &lease.key().prefixed(prefix);
        let deadline = pools.call();
        let tok = token_literal(&lease.token());
        let us = micros(ttl.as_duration());
        let set = format!(
            "SET expires_us = {NOW_US} + {us} WHERE k = {{k}} AND token = {tok} AND expires_us > {NOW_US}"
        );
        let sql = match lease.kind() {
            LeaseKind::Exclusive => {
                let k = row_key(prefixed);
                format!("UPDATE {} {}", self.main, set.replace("{k}", &k))
            }
            LeaseKind::Shared => {
                let k = row_key(prefixed);
                format!(
                    "START TRANSACTION; UPDATE {} {}; {}; COMMIT",
                    self.shares,
                    set.replace("{k}", &k),
                    self.readers_expiry(&k)
                )
            }
            _ => {
                let k = semaphore_row_key(prefixed);
                format!(
                    "START TRANSACTION; {}; UPDATE {} {}; COMMIT",
                    self.lock_semaphore(&k),
                    self.permits,
                    set.replace("{k}", &k)
                )
            }
        };
        let counted = match lease.kind() {
            LeaseKind::Exclusive => 0,
            LeaseKind::Shared => 1,
            _ => 2,
        };
        let sent = Instant::now();
        // An error leaves the outcome unknown; what the lease may still rely on is core's to judge.
        let answers = self.run(pools, deadline, &sql, "extending")?;
        if answers[counted].affected == 1 {
            lease.renewed(ttl, sent);
            Ok(())
        } else {
            lease.expire();
            Err(Error::Lost(
                "the lease had expired or was taken over before the extend".into(),
            ))
        }
    }

    /// Shared → exclusive in one transaction: the key's row is locked first (as every acquire locks
    /// it before it touches the readers' rows), so no reader joins or leaves between the count and
    /// the grant. The own reader's row must be live and no other one; the row then names this
    /// token, with a fence drawn as an exclusive grant draws it, and the readers' rows go (expired
    /// ones too), so nothing shared is left to outlive the exclusive lease. A refused attempt
    /// changes nothing. Sent again after a lost reply, it finds the row already ours.
    fn try_promote(
        &self,
        pools: &Pools,
        prefix: &str,
        lease: &mut RawLease,
        ttl: Ttl,
    ) -> Result<()> {
        let prefixed = &lease.key().prefixed(prefix);
        let deadline = pools.call();
        let (k, tok) = (row_key(prefixed), token_literal(&lease.token()));
        let us = micros(ttl.as_duration());
        let (main, shares) = (&self.main, &self.shares);
        let mine = format!(
            "EXISTS (SELECT 1 FROM {shares} WHERE k = {k} AND token = {tok} \
               AND expires_us > {NOW_US})"
        );
        let sql = format!(
            "START TRANSACTION; \
             {lock}; \
             UPDATE {main} SET last_token = {tok}, token = {tok}, \
               fence = GREATEST(fence + 1, {NOW_US}), expires_us = {NOW_US} + {us}, \
               writer_until = 0 \
               WHERE k = {k} AND token = {SHARED} AND {mine} \
                 AND NOT EXISTS (SELECT 1 FROM {shares} WHERE k = {k} AND token <> {tok} \
                   AND expires_us > {NOW_US}); \
             DELETE FROM {shares} WHERE k = {k} AND (SELECT token FROM {main} WHERE k = {k}) = {tok}; \
             SELECT token = {tok} AND expires_us > {NOW_US}, fence, {mine} FROM {main} WHERE k = {k}; \
             COMMIT",
            lock = self.lock_semaphore(&k),
        );
        let sent = Instant::now();
        let answers = self.run(pools, deadline, &sql, "promoting")?;
        let row = answers.nth_last(2);
        match (row.int(0), row.int(1), row.int(2)) {
            (Some(1), Some(fence), _) => {
                lease.set_kind(LeaseKind::Exclusive);
                lease.set_fence(fence as u64);
                lease.renewed(ttl, sent);
                Ok(())
            }
            (_, _, Some(1)) => Err(held_elsewhere(lease.key())),
            _ => Err(Error::Lost(
                "the shared lease had expired or was taken over before the promote".into(),
            )),
        }
    }

    /// Exclusive → shared in one transaction, with the key's row locked: the row turns shared and
    /// this token's reader's row appears together, so no writer can get in between; the fence stays
    /// (the reader's row takes the row's), and the row's expiry is the reader's, as a reader's
    /// grant leaves it. Sent again after a lost reply, it finds the reader's row already there.
    fn demote(&self, pools: &Pools, prefix: &str, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let prefixed = &lease.key().prefixed(prefix);
        let deadline = pools.call();
        let (k, tok) = (row_key(prefixed), token_literal(&lease.token()));
        let us = micros(ttl.as_duration());
        let (main, shares) = (&self.main, &self.shares);
        // `last_token` is still ours: no grant happens while the key is held exclusively.
        let sql = format!(
            "START TRANSACTION; \
             {lock}; \
             UPDATE {main} SET token = {SHARED}, expires_us = {NOW_US} + {us} \
               WHERE k = {k} AND token = {tok} AND expires_us > {NOW_US}; \
             INSERT INTO {shares} (k, token, fence, expires_us) \
               SELECT k, {tok}, fence, expires_us FROM {main} \
               WHERE k = {k} AND token = {SHARED} AND last_token = {tok} \
                 AND NOT EXISTS (SELECT 1 FROM {shares} WHERE k = {k} AND token = {tok}); \
             SELECT expires_us - {NOW_US} FROM {shares} \
               WHERE k = {k} AND token = {tok} AND expires_us > {NOW_US}; \
             COMMIT",
            lock = self.lock_semaphore(&k),
        );
        let sent = Instant::now();
        let answers = self.run(pools, deadline, &sql, "demoting")?;
        if answers.nth_last(2).int(0).is_some() {
            lease.set_kind(LeaseKind::Shared);
            lease.renewed(ttl, sent);
            Ok(())
        } else {
            Err(Error::Lost(
                "the lease had expired or was taken over before the demote".into(),
            ))
        }
    }

    fn inspect(&self, pools: &Pools, prefixed: &[u8], kind: LeaseKind) -> Result<KeyInfo> {
        let deadline = pools.call();
        if let LeaseKind::Permit(_) = kind {
            let k = semaphore_row_key(prefixed);
            let sql = format!(
                "SELECT COUNT(*), MAX(expires_us) - {NOW_US}, \
                   (SELECT fence FROM {} WHERE k = {k}) \
                 FROM {} WHERE k = {k} AND expires_us > {NOW_US}",
                self.main, self.permits
            );
            let row = &self.run(pools, deadline, &sql, "inspecting")?[0];
            let holders = row.int(0).unwrap_or(0);
            return Ok(KeyInfo::new(
                holders > 0,
                row.int(1).filter(|_| holders > 0).map(from_micros),
                row.int(2).map(|f| f as u64).filter(|f| *f > 0),
            )
            .with_holders(holders as u32, false));
        }
        let k = row_key(prefixed);
        let sql = format!(
            "SELECT expires_us - {NOW_US}, fence, token = {SHARED}, \
               (SELECT COUNT(*) FROM {} WHERE k = {k} AND expires_us > {NOW_US}) \
             FROM {} WHERE k = {k}",
            self.shares, self.main
        );
        let row = &self.run(pools, deadline, &sql, "inspecting")?[0];
        let left = row.int(0).unwrap_or(0);
        if left <= 0 {
            return Ok(KeyInfo::new(false, None, row.int(1).map(|f| f as u64)));
        }
        let shared = row.int(2) == Some(1);
        let holders = if shared {
            row.int(3).unwrap_or(0) as u32
        } else {
            1
        };
        Ok(
            KeyInfo::new(true, Some(from_micros(left)), row.int(1).map(|f| f as u64))
                .with_holders(holders, shared),
        )
    }

    fn restore(&self, pools: &Pools, prefixed: &[u8], key: &Key, token: Token) -> Result<RawLease> {
        let deadline = pools.call();
        let (k, tok) = (row_key(prefixed), token_literal(&token));
        let sql = format!(
            "SELECT fence, expires_us - {NOW_US} FROM {} \
               WHERE k = {k} AND token = {tok} AND expires_us > {NOW_US}; \
             SELECT fence, expires_us - {NOW_US} FROM {} \
               WHERE k = {k} AND token = {tok} AND expires_us > {NOW_US}",
            self.main, self.shares
        );
        let sent = Instant::now();
        let answers = self.run(pools, deadline, &sql, "restoring")?;
        for (answer, kind) in answers
            .iter()
            .zip([LeaseKind::Exclusive, LeaseKind::Shared])
        {
            if let (Some(fence), Some(left)) = (answer.int(0), answer.int(1)) {
                return Ok(RawLease::restored(
                    key.clone(),
                    token,
                    fence as u64,
                    from_micros(left),
                    sent,
                )
                .with_kind(kind));
            }
        }
        Err(Error::Lost(
            "that token does not hold the key (released, expired or taken over)".into(),
        ))
    }

    fn force_release(&self, pools: &Pools, prefixed: &[u8]) -> Result<bool> {
        let deadline = pools.call();
        let k = row_key(prefixed);
        let sql = format!(
            "START TRANSACTION; \
             UPDATE {} SET expires_us = {NOW_US}, writer_until = 0 \
               WHERE k = {k} AND expires_us > {NOW_US}; \
             DELETE FROM {} WHERE k = {k}; COMMIT",
            self.main, self.shares
        );
        let answers = self.run(pools, deadline, &sql, "forcing a release")?;
        Ok(answers[1].affected > 0)
    }
}
