//! Leasehold's PostgreSQL backends, chosen by the URL (the README's URL table):
//!
//! * **advisory** (`postgres://…`, `?lock=advisory`, the default): a session advisory lock, held by a
//!   database session that the lease owns for its whole life (taken from the pool, returned after
//!   unlock). No table; waiting is done by the server's own lock queue (FIFO), no polling.
//! * **table** (`?lock=table[&table=name]`): one row per held key in a table (`leasehold_locks` by
//!   default, created if missing; the name is used exactly as given, quoted) with the key as a
//!   `bytea` primary key and the expiry judged by the server's clock. No session is held between
//!   calls: a held lease survives its client's reconnects and a server restart. Waiting uses
//!   LISTEN/NOTIFY, with a wake-up at the holder's expiry in case the holder died.
//!
//! # Poolers (PgBouncer)
//!
//! `pooler=none|session|transaction` says what sits in front of the server. Without it, connect
//! detects a transaction pooler where it can (see the `pooler` module: the server session behind a
//! connection changes between transactions) and otherwise takes `none`; session pooling behaves as
//! a direct connection, so `none` and `session` are the same to Leasehold. Under `transaction`,
//! nothing may stay on a server session between transactions, since the pooler hands it to other
//! clients:
//!
//! * **advisory** mode is refused at connect (`InvalidArgument`): a session lock would stay on
//!   whichever server session the pooler picked. While it is not yet known whether a transaction
//!   pooler is in front, advisory connect looks at the server on sessions without the settings it
//!   gives its own sessions, so nothing is handed to other clients either way.
//! * **table** mode works: `try_acquire`, `release`, `extend`, `inspect`, restore, force-release,
//!   semaphores and records are single statements that leave nothing on the session (timeouts are
//!   `SET LOCAL`, locks transaction-scoped). Waiting acquires poll instead of queueing on a session
//!   advisory lock with `LISTEN`: core's wait loop with capped, jittered backoff (1–32 ms), so a
//!   wait is bounded but not FIFO (a newcomer may go first). Shared leases (and promote, demote) are
//!   refused with `InvalidArgument`: a waiting writer holds back new readers with a session lock.
//!
//! `tests/pgbouncer.rs` runs both modes through PgBouncer in both pool modes.
//!
//! # The lock id (advisory mode)
//!
//! A key maps to the advisory lock id given by [`lock_id`]: the first 8 bytes of SHA-256 over the
//! prefixed key (`prefix ‖ key`, raw bytes; the prefix is `leasehold:` unless the URL says otherwise),
//! read as a big-endian signed 64-bit integer. It is part of the public contract and will never
//! change. The same id in SQL (PostgreSQL 11+), so a SQL job can take the same lock:
//!
//! ```sql
//! SELECT pg_advisory_lock(('x' || encode(substring(
//!          sha256(convert_to('leasehold:' || 'report:2026-11-29', 'UTF8')) FROM 1 FOR 8), 'hex'))::bit(64)::bigint);
//! ```
//!
//! For a binary key, use `sha256('leasehold:'::bytea || '\x00ff…'::bytea)`. Only the one-argument
//! (`bigint`) advisory functions share ids with Leasehold; the two-`int4` ones are a separate space.
//!
//! # Guarantees and their mechanisms
//!
//! * TTL, advisory: the holder's session gets `idle_session_timeout` = TTL (moved by extend), so a
//!   holder that goes silent loses the lock after its TTL; a holder whose process dies loses it as soon
//!   as the server sees the connection close, one whose host vanishes within about 10 s (server-side
//!   TCP keepalives and `tcp_user_timeout`). Table: the row's `expires_at`, by the server's clock.
//! * Fence: drawn once the key is ours, in the same round trip, as
//!   `greatest(nextval(seq), server clock in µs since the epoch)` — table mode also takes the row's
//!   previous fence + 1 — so fences are per key strictly increasing, and in table mode they follow
//!   the order in which the key was granted (the draw is an `UPDATE` of the row, under its lock, in
//!   the acquiring transaction). The sequence is `leasehold_fence` (advisory; created if missing, in
//!   the first schema of `search_path`) or the table's identity sequence. Fences are large (about
//!   1.8·10¹⁵ today), not consecutive, and never start at 1.
//! * One round trip per operation, advisory: `try_acquire` (lock, fence and TTL in one statement),
//!   `release` and `extend` are statements prepared once per session and then sent as one
//!   Bind/Execute/Sync message each, so the server neither parses nor plans them again (about as much
//!   server time as the round trip itself); `tests/bench.rs` prints a cycle against a bare
//!   `pg_try_advisory_lock` + `pg_advisory_unlock` pair measured in the same run.
//! * Fences survive data loss: a failover to an asynchronous replica, or a restore, can take the
//!   sequence back (and, in table mode, lose rows); the clock term then still gives a fence larger
//!   than any handed out before, provided the new server's clock is not behind the old one's at the
//!   last acquisition of the key. Limits: a step back of the server's wall clock by `S` can give a
//!   smaller or equal fence to a key acquired again within `S` of its previous acquisition — in
//!   advisory mode always, in table mode only if the key's row was deleted in between (released, or
//!   swept after expiry; while the row exists its previous fence + 1 holds whatever the clock does).
//!   Keep the servers' clocks disciplined (NTP slewing never steps back); a 1 s step back is safe
//!   for every key not re-acquired within that second.
//! * Bounded: every round trip has a client-side timeout (tokio-postgres on a current-thread runtime
//!   per session, `timeout` around each call), so a stopped server (SIGSTOP: the kernel still ACKs,
//!   keepalives never fire) gives `Unavailable` and never a hang. Each operation has one deadline
//!   (`acquire`: wait + connect + I/O timeout; everything else: connect + I/O timeout) that the pool
//!   checkout, the connect (host names resolved under it, by core), each statement and each retry
//!   draw from. A session whose call timed out is closed, never reused. Every statement also runs
//!   under the server's `statement_timeout` and `lock_timeout`; client and server TCP keepalives and
//!   `tcp_user_timeout` notice a dead peer in seconds. Reused sessions found dead (after a server
//!   restart, say) are replaced at once, so the same client recovers by itself.
//! * An advisory `release` or `extend` that times out gives `Unavailable`, and the lease is lost from
//!   then on: its session is closed (which frees the lock once the server reads the close),
//!   `remaining()` is zero, and a later `release` or `extend` gives `Lost`. A table lease lives in
//!   its row, not in a session: after such a timeout it is still held until its TTL, and a retry may
//!   succeed.
//! * Bounded state: table mode deletes a row on release, and rows of leases that expired without a
//!   release are swept (over a second after their expiry, at most 1000 at a time, at most once a
//!   minute per client, from `try_acquire` and `release`). Advisory mode keeps nothing per key.
//! * One pooled session per held advisory lease and per waiter (both modes): `pool_size` (default 16)
//!   bounds how many a client holds or waits for at once; beyond it, calls wait up to the connect
//!   timeout and then give `Unavailable`. Each advisory lease is one server connection: mind
//!   `max_connections`. A detached advisory lease (`Lease::forget`, C `leasehold_lease_detach`)
//!   keeps its session, and so its lock, until its TTL, but outside the pool: detaching never uses
//!   up `pool_size`. The client closes its end at a later call once the TTL (plus its drift
//!   allowance and a second) has passed; the server has ended the session at its idle timeout by
//!   then.
//! * Conflicts never raise an error on the server (table mode) and never touch a caller's own
//!   transaction: Leasehold uses sessions of its own, in autocommit. A wait that times out in
//!   advisory mode is one `lock_timeout` error in the server log.
//! * After `fork()`, a child gets sessions of its own (core's pool never uses nor closes a parent's
//!   sessions in a child); leases copied from the parent give `Lost` in the child and never touch the
//!   parent's session or row. Sessions start no threads (a name lookup runs on a short-lived thread).
//! * Waiting: every waiting acquire runs core's one wait loop over the mode's waiter. Where waiters
//!   queue on an advisory lock (table mode, advisory semaphores), the queue's head is idle between
//!   attempts, so its session has a short `idle_session_timeout` while it is queued (3 s) and it
//!   makes an attempt at least every 500 ms: a head that stops (SIGSTOP, a wedged process) has its
//!   session ended by the server, and the next waiter moves up, within about 3 s.
//! * Durable grants (table mode, and records in both modes): every statement commits with
//!   `SET LOCAL synchronous_commit = on` (sent with it: no round trip more), so a grant, its fence
//!   or a record the client was told about survives a crash of the server even where the server,
//!   database or role sets `synchronous_commit = off` (`tests/durability.rs`). Whether it also survives a
//!   failover is the server's replication: with `synchronous_standby_names` the commit waits for
//!   the standbys it names; without, an asynchronous standby may miss it.
//! * Requires PostgreSQL 14 or later (`idle_session_timeout`).
//!
//! # Shared locks and semaphores
//!
//! * Advisory: a shared lease is `pg_try_advisory_lock_shared` / `pg_advisory_lock_shared` on the
//!   key's [`lock_id`], on a session of its own (its TTL is that session's idle timeout, so a
//!   reader's expiry frees only its share). Writer preference comes from the server's lock
//!   manager: a new shared request conflicts with a *waiting* exclusive one (`waitMask`), so it is
//!   refused (try) or queued behind it (acquire).
//! * Advisory semaphores: `permits` advisory locks, slot `i`'s id given by [`semaphore_slot_id`]
//!   (a domain of its own, so never a lock id); an attempt takes the first free slot from a
//!   rotating start in one statement. A permit holds its session like any advisory lease (TTL =
//!   idle timeout; a killed holder's slot is free as soon as the server sees the close). Waiters
//!   queue FIFO on an advisory lock of the semaphore; the first LISTENs (a release NOTIFYs) and
//!   also looks every 100 ms, since a holder whose session ended notifies nobody.
//! * Table: shared holders have rows in `<table>_shares` (key, token, fence, expires_at) and the
//!   key's row in `<table>` holds the token `shared`, an expiry no earlier than any share's and
//!   the one per-key fence; permits are rows of `<table>_permits`, counted under a transaction
//!   advisory lock of the semaphore, expired ones reclaimed by the next acquire. Both by the
//!   server's clock; acquire stays one round trip that never raises on conflict; waiting is
//!   LISTEN/NOTIFY with a wake-up at the first expiry. Writer preference: waiters hold (or wait
//!   for) the key's wait-queue advisory lock, and a new shared try takes it in shared mode for its
//!   transaction, which fails while a writer waits.
//! * One size per semaphore, both modes: while a semaphore has a live holder (unexpired,
//!   unreleased), an acquire asking for another number of permits is refused with
//!   `InvalidArgument` ([`leasehold_core::wait::other_size`]) at its first attempt, a waiting one
//!   too (it never queues); once every holder is gone, a new size may be used. Advisory: each
//!   holder also holds, in shared mode, a size lock whose id is 48 bits of the semaphore's hash
//!   and 16 bits of its size, taken in the granting transaction; every attempt first takes the
//!   semaphore's grant lock for its transaction (so grants of one semaphore happen one at a
//!   time) and looks in `pg_locks` for a size lock of the semaphore with another size (not while
//!   holders of its own size are there: no other size can be held then). A size
//!   lock lives exactly as long as its holder's slot (released with it; a session ended by its
//!   TTL or a crash drops both). Table: each permit row says its size (`permits`); a grant
//!   refuses while a live row has another, checked under the count lock with the count. Rows of
//!   0.2 have NULL there (size unknown) and bind nobody.
//! * Promote and demote keep the token and are one statement each, so atomic. Advisory: on the
//!   lease's own session, promote takes `pg_try_advisory_lock` (the session's own share does not
//!   conflict, other sessions' shares and a waiting writer do) and only then draws the fence and
//!   lets the share go; demote takes the share, granted at once since only its own exclusive lock
//!   holds the key, before letting the exclusive lock go. Table: under the key's row lock, the row
//!   turns this token's (new fence, as an acquire draws it, the key's shares deleted) only while no
//!   other live share exists; demote turns the row back to `shared` and adds this token's share.
//! * Restore (picking up a lease by key and token) is table mode only: an advisory lock belongs
//!   to its session. Force-release: table mode frees the row and every share (the row and its
//!   fence stay); advisory mode ends the holding sessions with `pg_terminate_backend`, which needs
//!   `pg_signal_backend` (or membership in the holder's role).
//!
//! # Least privilege (table mode)
//!
//! Let the table's owner create the tables once (connect once in table mode, or run the
//! `CREATE TABLE`s of `table/mod.rs`), then grant the application's role exactly this (for the
//! default table `leasehold_locks`; tests/privileges.rs runs these lines with `lp_locks`):
//!
//! ```sql
//! GRANT SELECT, INSERT, UPDATE, DELETE ON leasehold_locks, leasehold_locks_shares, leasehold_locks_permits TO app;
//! GRANT USAGE ON SEQUENCE leasehold_locks_fence_seq TO app;
//! ```
//!
//! Tables made by 0.2 get the column `permits` in `<table>_permits` at the first connect (an
//! `ALTER TABLE … ADD COLUMN IF NOT EXISTS permits integer DEFAULT NULL`, which needs the table's
//! owner: run it as the owner once if the application's role may not alter the table).
//!
//! The role then cannot drop, truncate or alter the tables, nor move the fence sequence, nor
//! create tables (PostgreSQL 15+; on 14, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`). Anyone who
//! may write these tables can take or break any lock in them.
//!
//! # TLS
//!
//! rustls (ring). `sslmode=disable|prefer|require|verify-ca|verify-full` (default `prefer`, as in
//! libpq), `sslrootcert`, `sslcert`/`sslkey`, and `password_file=`: see the `tls` module for the
//! meanings and where they differ from libpq. A failed check says which (unknown issuer, expired,
//! host name); errors never contain a password.

mod advisory;
mod ask;
mod doctor;
pub mod gate;
mod lock_id;
mod mode;
mod pooler;
mod records;
mod session;
mod table;
mod tls;
mod waiting;

pub use gate::{FenceGate, GateError};
pub use lock_id::{lock_id, semaphore_slot_id};

use advisory::Advisory;
use ask::Ask;
use leasehold_core::config::{BackendConfig, PostgresLockMode, PostgresPooler};
use leasehold_core::stale_session;
use leasehold_core::wait::{Polling, Waiter};
use leasehold_core::Deadline;
use leasehold_core::{
    Config, Error, Key, KeyInfo, LeaseKind, LockBackend, RawLease, Request, Result, Token, Ttl,
};
use mode::LockMode;
use session::{last_value, number, Conn, Failure, Pools, Session, SessionSettings};
use std::fmt;
use std::time::Instant;
use table::Table;
use tokio_postgres::SimpleQueryRow;

/// The sequence advisory mode draws fences from.
pub const FENCE_SEQUENCE: &str = "leasehold_fence";
/// The oldest server with `idle_session_timeout`, which advisory leases need for their TTL.
const MIN_SERVER_VERSION: u32 = 140_000;

/// A PostgreSQL lock backend in either mode. Thread-safe; share it through a [`leasehold_core::Client`].
pub struct PostgresBackend {
    mode: Box<dyn LockMode>,
    pools: Pools,
    pooler: PostgresPooler,
    /// Whether the URL named the pooler (else connect detected it).
    pooler_named: bool,
    /// The pooler as connect settled it, for refusals ([`pooler::said`]).
    said: String,
    prefix: String,
    describe: String,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("backend", &self.describe)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    /// Connects and prepares the mode's objects (the fence sequence, or the table). `Unavailable` if
    /// the server cannot be reached within the timeouts; `InvalidArgument` for a configuration that is
    /// not PostgreSQL's.
    pub fn connect(config: &Config) -> Result<PostgresBackend> {
        let BackendConfig::Postgres(pg) = &config.backend else {
            return Err(Error::invalid(format!(
                "not a PostgreSQL URL: {}",
                config.describe()
            )));
        };
        let advisory = pg.mode == PostgresLockMode::Advisory;
        if advisory && pg.pooler == Some(PostgresPooler::Transaction) {
            let said = pooler::said(pg.pooler, PostgresPooler::Transaction);
            return Err(pooler::advisory_refused(&said));
        }
        // Only advisory sessions outlive a call, so only they get session settings. Until it is
        // known that no transaction pooler is in front (which would hand those settings to other
        // clients' transactions), advisory mode looks at the server without them.
        let settings = match (advisory, pg.pooler) {
            (false, _) => SessionSettings::None,
            (true, None) => SessionSettings::Later,
            (true, Some(_)) => SessionSettings::Now,
        };
        let pools = Pools::new(
            pg.connection.expose(),
            config.connect_timeout,
            config.io_timeout,
            config.pool_size,
            config.secrets(),
            settings,
            tls::Tls::new(pg)?,
            pg.password.as_ref().map(|p| p.expose()),
        )?;
        // Setting up is one call: bounded by one connect and one I/O timeout in all.
        let deadline = pools.call();
        let first = format!(
            "SELECT current_setting('server_version_num'), {}, {}",
            pooler::BACKEND,
            pooler::SERVER_PORT
        );
        let (mut conn, rows) = call_rows(&pools, deadline, &first, "connect")?;
        let row = rows.last();
        let version = number::<u32>(row.and_then(|r| r.get(0)))?.unwrap_or(0);
        if version < MIN_SERVER_VERSION {
            return Err(Error::invalid(format!(
                "Leasehold needs PostgreSQL 14 or later (idle_session_timeout); the server is {version}"
            )));
        }
        let suspect = pooler::suspected(pg.connection.expose(), row.and_then(|r| r.get(2)));
        let pooler = pooler::settle(
            pg.pooler,
            &pools,
            &mut conn,
            row.and_then(|r| r.get(1)),
            suspect,
            deadline,
        )?;
        let said = pooler::said(pg.pooler, pooler);
        if advisory && pooler == PostgresPooler::Transaction {
            conn.poisoned = true;
            return Err(pooler::advisory_refused(&said));
        }
        if settings == SessionSettings::Later {
            pools
                .begin_session_settings(&mut conn, deadline)
                .map_err(|e| pools.failed("connect", &e))?;
        }
        let mode: Box<dyn LockMode> = match pg.mode {
            PostgresLockMode::Table => {
                let mut table = Table::new(&pg.table, &config.prefix, config.io_timeout);
                table
                    .ensure(&mut conn, deadline)
                    .map_err(|e| pools.failed(&format!("creating table {}", pg.table), &e))?;
                Box::new(table)
            }
            _ => Box::new(Advisory::new(fence_sequence(&mut conn, deadline).map_err(
                |e| {
                    pools.unavailable(format!(
                        "cannot find or create the sequence {FENCE_SEQUENCE} (create it once with \
                         `CREATE SEQUENCE {FENCE_SEQUENCE}` and grant USAGE on it): {}",
                        session::describe(&e)
                    ))
                },
            )?)),
        };
        drop(conn);
        Ok(PostgresBackend {
            mode,
            pools,
            pooler,
            pooler_named: pg.pooler.is_some(),
            said,
            prefix: config.prefix.clone(),
            describe: config.describe(),
        })
    }

    /// The pooler this backend works with: the URL's `pooler=`, else what connect detected
    /// (`transaction` when it saw the server session change under a connection, else `none`).
    pub fn pooler(&self) -> PostgresPooler {
        self.pooler
    }

    /// Refuses a shared lease (or a move between shared and exclusive) under transaction
    /// pooling: see [`pooler::shared_refused`].
    fn shared_allowed(&self) -> Result<()> {
        match self.pooler {
            PostgresPooler::Transaction => Err(pooler::shared_refused(&self.said)),
            _ => Ok(()),
        }
    }

    /// The acquire of `key` for `ttl` that the mode methods take.
    fn ask<'a>(&'a self, key: &'a Key, ttl: Ttl) -> Ask<'a> {
        Ask::new(
            &self.pools,
            leasehold_core::ask::Ask::new(key, &self.prefix, ttl),
        )
    }
}

impl LockBackend for PostgresBackend {
    fn diagnose(&self) -> Result<leasehold_core::doctor::Diagnosis> {
        let table = self.mode.table();
        let facts = doctor::gather(&self.pools, table)?;
        let pooler = doctor::Pooler {
            mode: self.pooler,
            named: self.pooler_named,
        };
        Ok(doctor::judge(&facts, table.is_none(), pooler))
    }

    fn name(&self) -> &'static str {
        self.mode.name()
    }

    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        let kind = request.kind();
        if kind == LeaseKind::Shared {
            self.shared_allowed()?;
        }
        self.mode
            .try_acquire(&self.ask(request.key(), request.ttl()), kind)
    }

    /// Each mode's way to wait, driven by core's one wait loop (see [`LockMode::waiter`]); under
    /// transaction pooling, polling.
    fn waiter<'a>(&'a self, request: &'a Request, end: Instant) -> Result<Box<dyn Waiter + 'a>> {
        let kind = request.kind();
        if kind == LeaseKind::Shared {
            self.shared_allowed()?;
        }
        if self.pooler == PostgresPooler::Transaction {
            // The queue's head holds a session lock and LISTENs, which transaction pooling
            // would hand to other clients: waits poll instead, through the same loop.
            return Ok(Box::new(Polling::new(self, request, end)));
        }
        self.mode
            .waiter(self.ask(request.key(), request.ttl()), kind, end)
    }

    fn inspect(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo> {
        self.mode
            .inspect(&self.pools, &key.prefixed(&self.prefix), kind)
    }

    fn restore(&self, key: &Key, token: Token) -> Result<RawLease> {
        self.mode
            .restore(&self.pools, &key.prefixed(&self.prefix), key, token)
    }

    fn force_release(&self, key: &Key) -> Result<bool> {
        self.mode
            .force_release(&self.pools, &key.prefixed(&self.prefix))
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        self.mode.release(&self.pools, lease)
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.mode.extend(&self.pools, lease, ttl)
    }

    fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.shared_allowed()?;
        self.mode.try_promote(&self.pools, lease, ttl)
    }

    fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.shared_allowed()?;
        self.mode.demote(&self.pools, lease, ttl)
    }

    fn detach(&self, lease: &mut RawLease, ttl: Ttl) {
        self.mode.detach(lease, ttl)
    }

    /// Rows of a records table, in both modes (see `records.rs`).
    fn records(&self) -> Option<&dyn leasehold_core::records::RecordStore> {
        Some(self)
    }
}

/// Runs `f` on a pooled session checked out by `deadline`, again on the next one while a reused
/// session turns out dead (core's [`stale_session::with_session`]): every idle session of the pool
/// may be stale, and one fresh one follows them. Returns the session with the outcome.
pub(crate) fn with_session<T>(
    pools: &Pools,
    deadline: Deadline,
    f: impl FnMut(&mut Session) -> std::result::Result<T, Failure>,
) -> Result<(Conn, std::result::Result<T, Failure>)> {
    let tries = pools.size() as usize + 1;
    stale_session::with_session(tries, deadline, || pools.get(deadline), f)
}

/// `sql` on a pooled session ([`with_session`]) by `deadline`, a failure `Unavailable` saying `what`
/// failed: most calls that take no lock are just this. Returns the session with the answer.
pub(crate) fn call_rows(
    pools: &Pools,
    deadline: Deadline,
    sql: &str,
    what: &str,
) -> Result<(Conn, Vec<SimpleQueryRow>)> {
    let (conn, result) = with_session(pools, deadline, |s| s.rows(sql, deadline))?;
    let rows = result.map_err(|e| pools.failed(what, &e))?;
    Ok((conn, rows))
}

/// What a [`timed`] call gives: the session, and its answer with the moment it was sent.
pub(crate) type Timed<T> = (Conn, std::result::Result<(Instant, T), Failure>);

/// [`with_session`] for a call whose lease or extension counts from when it was sent: `sent` is taken
/// just before the first try of `f` and kept for every retry. A try whose reply was lost may have
/// committed (the retry then finds the row already ours), so the TTL is never dated after the
/// server could have started it.
pub(crate) fn timed<T>(
    pools: &Pools,
    deadline: Deadline,
    mut f: impl FnMut(&mut Session) -> std::result::Result<T, Failure>,
) -> Result<Timed<T>> {
    let mut first: Option<Instant> = None;
    with_session(pools, deadline, |s| {
        let sent = *first.get_or_insert_with(Instant::now);
        f(s).map(|x| (sent, x))
    })
}

/// A [`timed`] call that may take a lock on its session. The lock may have been granted before an
/// error, so a session whose call failed is never reused (poisoned); the error is `Unavailable`,
/// saying `what` failed.
pub(crate) fn acquiring<T>(
    pools: &Pools,
    deadline: Deadline,
    what: &str,
    f: impl FnMut(&mut Session) -> std::result::Result<T, Failure>,
) -> Result<(Conn, Instant, T)> {
    let (mut conn, outcome) = timed(pools, deadline, f)?;
    match outcome {
        Ok((sent, x)) => Ok((conn, sent, x)),
        Err(e) => {
            conn.poisoned = true;
            Err(pools.failed(what, &e))
        }
    }
}

/// Whether a `CREATE … IF NOT EXISTS` failed only because another client created the same object
/// at the same moment: `IF NOT EXISTS` does not cover a concurrent creation, which ends in a unique
/// violation on the catalog (23505), the relation (42P07) or its row type (42710, seen with 8
/// processes connecting at once).
pub(crate) fn created_meanwhile(e: &Failure) -> bool {
    e.code()
        .is_some_and(|c| ["23505", "42P07", "42710"].contains(&c))
}

/// The OID of the fence sequence, created if missing.
fn fence_sequence(session: &mut Session, deadline: Deadline) -> std::result::Result<u32, Failure> {
    let find = format!("SELECT to_regclass('{FENCE_SEQUENCE}')::oid");
    if let Some(oid) = last_value(&session.rows(&find, deadline)?, 0).and_then(|t| t.parse().ok()) {
        return Ok(oid);
    }
    match session.rows(
        &format!("CREATE SEQUENCE IF NOT EXISTS {FENCE_SEQUENCE}"),
        deadline,
    ) {
        Ok(_) => {}
        Err(e) if created_meanwhile(&e) => {}
        Err(e) => return Err(e),
    }
    let rows = session.rows(&find, deadline)?;
    Ok(last_value(&rows, 0)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_testkit::{unique_key, PostgresServer};
    use std::time::Duration;

    #[test]
    fn a_detached_session_is_closed_once_its_ttl_has_passed() {
        let url = PostgresServer::shared()
            .url_with("lock=advisory&pool_size=1&connect_timeout_ms=2000&io_timeout_ms=2000");
        let config = Config::parse(&url).expect("test URL");
        let client = leasehold_core::Client::new(PostgresBackend::connect(&config).unwrap());
        let ttl = Duration::from_millis(300);
        client
            .try_acquire(unique_key("reap"), ttl)
            .expect("acquire")
            .forget();
        assert_eq!(session::detached_sessions(), 1, "kept open: it is the lock");
        // Past the TTL, its drift allowance and the margin, the next checkout closes it.
        std::thread::sleep(ttl + Duration::from_millis(1400));
        client
            .try_acquire(unique_key("reap-next"), ttl)
            .expect("acquire")
            .release()
            .expect("release");
        assert_eq!(session::detached_sessions(), 0, "closed after its TTL");
    }

    #[test]
    fn an_advisory_session_has_its_settings_once_no_pooler_was_found() {
        // No pooler= in the URL: connect looks at the server before it sets anything, then gives
        // the session it looked on (the pool's only one here) its settings.
        let url = PostgresServer::shared()
            .url_with("lock=advisory&pool_size=1&connect_timeout_ms=2000&io_timeout_ms=1500");
        let backend = PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap();
        assert_eq!(backend.pooler(), PostgresPooler::None);
        let mut conn = backend.pools.get(backend.pools.call()).unwrap();
        assert!(conn.reused, "the session connect used");
        let rows = conn
            .rows(
                "SELECT current_setting('statement_timeout') || ' ' || \
                        current_setting('tcp_user_timeout')",
                backend.pools.call(),
            )
            .unwrap();
        assert_eq!(last_value(&rows, 0), Some("1500ms 10000"));
    }

    #[test]
    fn a_waiter_granted_in_table_mode_leaves_nothing_on_its_session() {
        // A role with an idle timeout of its own, which its sessions must get back after queueing.
        let server = PostgresServer::shared();
        let role = unique_key("idle_role").replace([':', '-'], "_");
        let mut admin = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN SUPERUSER; \
                 ALTER ROLE {role} SET idle_session_timeout = '1min'"
            ))
            .unwrap();
        let url = format!(
            "postgres://{role}@127.0.0.1:{}/postgres?lock=table&table=leave_test&pool_size=1\
             &connect_timeout_ms=2000&io_timeout_ms=2000",
            server.port()
        );
        let config = Config::parse(&url).expect("test URL");
        let backend = std::sync::Arc::new(PostgresBackend::connect(&config).unwrap());
        let waiter = leasehold_core::Client::from_arc(backend.clone());
        let holder = leasehold_core::Client::new(PostgresBackend::connect(&config).unwrap());
        let key = unique_key("leave");
        let held = holder.try_acquire(&key, Duration::from_secs(10)).unwrap();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            held.release().unwrap();
        });
        // Queued as the head (its session LISTENs, holds the queue lock and the short idle
        // timeout), then woken by the release.
        let lease = waiter
            .acquire(&key, Duration::from_secs(10), Duration::from_secs(5))
            .expect("granted after the release");
        releaser.join().unwrap();

        // The pool's one session, as the next call finds it.
        let mut conn = backend.pools.get(backend.pools.call()).unwrap();
        let mut ask = |sql: &str| {
            let rows = conn.rows(sql, backend.pools.call()).unwrap();
            last_value(&rows, 0).map(str::to_owned)
        };
        assert_eq!(
            ask("SELECT current_setting('idle_session_timeout')").as_deref(),
            Some("1min"),
            "the queued session's short idle timeout is gone, its own is back"
        );
        assert_eq!(
            ask("SELECT count(*) FROM pg_locks \
                 WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
            .as_deref(),
            Some("0"),
            "the queue lock is given back"
        );
        assert_eq!(
            ask("SELECT count(*) FROM pg_listening_channels()").as_deref(),
            Some("0"),
            "the LISTEN has ended"
        );
        drop(conn);
        lease.release().unwrap();
    }
}
