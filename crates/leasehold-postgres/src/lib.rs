//! Leasehold's PostgreSQL backends, chosen by the URL (CONTRACT.md §2):
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
//! # PgBouncer
//!
//! Advisory mode needs **session pooling** (or a direct connection): under transaction pooling a
//! session lock stays on whichever server session the bouncer picked, and leaks. In table mode,
//! `try_acquire`, `release`, `extend` and `inspect` are single statements that leave nothing on the
//! session (timeouts are `SET LOCAL`), so they work under transaction pooling too; waiting
//! (`acquire` with a wait) LISTENs and queues on a session advisory lock, so it needs session pooling.
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
//! * Fence: `nextval` of a sequence, drawn after the lock is granted, in the same round trip: the
//!   sequence `leasehold_fence` (advisory; created if missing, in the first schema of `search_path`)
//!   or the table's identity column. Fences increase across all keys, so per key too; they do not
//!   start at 1 for each key.
//! * Bounded: connect timeout on every new session; every statement runs under `statement_timeout`
//!   (the I/O timeout, or the wait plus the I/O timeout when waiting) and `lock_timeout`; client and
//!   server TCP keepalives and `tcp_user_timeout` notice a dead peer in seconds. Reused sessions found
//!   dead (after a server restart, say) are replaced at once, so the same client recovers by itself.
//! * One pooled session per held advisory lease and per waiter (both modes): `pool_size` (default 16)
//!   bounds how many a client holds or waits for at once; beyond it, calls wait up to the connect
//!   timeout and then give `Unavailable`. Each advisory lease is one server connection: mind
//!   `max_connections`.
//! * Conflicts never raise an error on the server (table mode) and never touch a caller's own
//!   transaction: Leasehold uses sessions of its own, in autocommit. A wait that times out in
//!   advisory mode is one `lock_timeout` error in the server log.
//! * After `fork()`, a child gets sessions of its own; leases copied from the parent give `Lost` in the
//!   child and never touch the parent's session or row.
//! * Requires PostgreSQL 14 or later (`idle_session_timeout`). TLS (`sslmode=require`) is not built in.

mod advisory;
mod lock_id;
mod session;
mod table;

pub use lock_id::lock_id;

use advisory::Advisory;
use leasehold_core::config::{BackendConfig, PostgresLockMode};
use leasehold_core::{Config, Error, Key, KeyInfo, LockBackend, RawLease, Result, Ttl};
use session::{last_value, number, Conn, Pools, Session};
use std::fmt;
use std::time::Duration;
use table::Table;

/// The sequence advisory mode draws fences from.
pub const FENCE_SEQUENCE: &str = "leasehold_fence";
/// The oldest server with `idle_session_timeout`, which advisory leases need for their TTL.
const MIN_SERVER_VERSION: u32 = 140_000;

/// A PostgreSQL lock backend in either mode. Thread-safe; share it through a [`leasehold_core::Client`].
pub struct PostgresBackend {
    mode: Mode,
    pools: Pools,
    prefix: String,
    io_timeout: Duration,
    describe: String,
}

enum Mode {
    Advisory(Advisory),
    Table(Table),
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
        let pools = Pools::new(
            pg.connection.expose(),
            config.connect_timeout,
            config.io_timeout,
            config.pool_size,
            config.secrets(),
            // Only advisory sessions outlive a call; table mode leaves nothing on its sessions.
            pg.mode == PostgresLockMode::Advisory,
        )?;
        let (mut conn, version) = with_session(&pools, |s| s.rows("SHOW server_version_num"))?;
        let version = version.map_err(|e| pools.failed("connect", &e))?;
        let version = number::<u32>(last_value(&version, 0))?.unwrap_or(0);
        if version < MIN_SERVER_VERSION {
            return Err(Error::invalid(format!(
                "Leasehold needs PostgreSQL 14 or later (idle_session_timeout); the server is {version}"
            )));
        }
        let mode = match pg.mode {
            PostgresLockMode::Table => {
                let table = Table::new(&pg.table, &config.prefix, config.io_timeout);
                table
                    .ensure(&mut conn)
                    .map_err(|e| pools.failed(&format!("creating table {}", pg.table), &e))?;
                Mode::Table(table)
            }
            _ => Mode::Advisory(Advisory {
                fence_seq: fence_sequence(&mut conn).map_err(|e| {
                    pools.unavailable(format!(
                        "cannot find or create the sequence {FENCE_SEQUENCE} (create it once with \
                         `CREATE SEQUENCE {FENCE_SEQUENCE}` and grant USAGE on it): {}",
                        session::describe(&e)
                    ))
                })?,
            }),
        };
        Ok(PostgresBackend {
            mode,
            pools,
            prefix: config.prefix.clone(),
            io_timeout: config.io_timeout,
            describe: config.describe(),
        })
    }
}

impl LockBackend for PostgresBackend {
    fn name(&self) -> &'static str {
        match self.mode {
            Mode::Advisory(_) => "postgres-advisory",
            Mode::Table(_) => "postgres-table",
        }
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl) -> Result<RawLease> {
        let prefixed = key.prefixed(&self.prefix);
        match &self.mode {
            Mode::Advisory(a) => a.try_acquire(&self.pools, &prefixed, key, ttl),
            Mode::Table(t) => t.try_acquire(&self.pools, &prefixed, key, ttl),
        }
    }

    fn acquire(&self, key: &Key, ttl: Ttl, wait: Duration) -> Result<RawLease> {
        if wait.is_zero() {
            return self.try_acquire(key, ttl);
        }
        let prefixed = key.prefixed(&self.prefix);
        match &self.mode {
            Mode::Advisory(a) => a.acquire(&self.pools, &prefixed, key, ttl, wait, self.io_timeout),
            Mode::Table(t) => t.acquire(&self.pools, &prefixed, key, ttl, wait, self.io_timeout),
        }
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        match &self.mode {
            Mode::Advisory(a) => a.release(&self.pools, lease),
            Mode::Table(t) => t.release(&self.pools, lease),
        }
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        match &self.mode {
            Mode::Advisory(a) => a.extend(&self.pools, lease, ttl),
            Mode::Table(t) => t.extend(&self.pools, lease, ttl),
        }
    }

    fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let prefixed = key.prefixed(&self.prefix);
        match &self.mode {
            Mode::Advisory(a) => a.inspect(&self.pools, &prefixed),
            Mode::Table(t) => t.inspect(&self.pools, &prefixed),
        }
    }
}

/// Runs `f` on a pooled session. A reused session found dead (made stale by a server restart, say)
/// is dropped and `f` run again on the next one, so one client recovers by itself; a fresh session
/// that fails ends the attempts. Whatever a dead session held died with it, so another attempt never
/// doubles a lock. Returns the session with the outcome.
pub(crate) fn with_session<T>(
    pools: &Pools,
    mut f: impl FnMut(&mut Session) -> std::result::Result<T, postgres::Error>,
) -> Result<(Conn, std::result::Result<T, postgres::Error>)> {
    // Every idle session of the pool may be stale, and one fresh one follows them.
    let mut attempts = pools.size() + 1;
    loop {
        let mut conn = pools.get()?;
        let reused = conn.reused;
        let outcome = f(&mut conn);
        conn.reused = true;
        attempts = attempts.saturating_sub(1);
        match outcome {
            Err(e) if reused && attempts > 0 && conn.is_gone(&e) => {
                conn.poisoned = true;
            }
            other => return Ok((conn, other)),
        }
    }
}

/// The OID of the fence sequence, created if missing.
fn fence_sequence(session: &mut Session) -> std::result::Result<u32, postgres::Error> {
    let find = format!("SELECT to_regclass('{FENCE_SEQUENCE}')::oid");
    if let Some(oid) = last_value(&session.rows(&find)?, 0).and_then(|t| t.parse().ok()) {
        return Ok(oid);
    }
    match session.rows(&format!("CREATE SEQUENCE IF NOT EXISTS {FENCE_SEQUENCE}")) {
        Ok(_) => {}
        // Another client created it at the same moment.
        Err(e)
            if e.code()
                .is_some_and(|c| ["23505", "42P07"].contains(&c.code())) => {}
        Err(e) => return Err(e),
    }
    let rows = session.rows(&find)?;
    Ok(last_value(&rows, 0)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0))
}
