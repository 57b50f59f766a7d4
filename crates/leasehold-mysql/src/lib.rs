//! Leasehold's MySQL/MariaDB backends, chosen by the URL (`mysql://` or `mariadb://`, the same):
//!
//! * **named** (`?lock=named`, the default): `GET_LOCK` on a session the lease owns for its whole
//!   life, like PostgreSQL's advisory locks. The TTL, the holder's session id and the key's fence
//!   live in a small InnoDB table (`<table>_fences`, `leasehold_locks_fences` by default); an
//!   acquirer that finds an expired holder ends its session (`KILL CONNECTION`). Exclusive locks
//!   and semaphores; no shared locks (a named lock is exclusive), no restore (a named lock belongs
//!   to its session). See the `named` module.
//! * **table** (`?lock=table[&table=name]`): rows of an InnoDB table with a unique key, expiry by the
//!   server's clock, compare-and-delete by token; exclusive, shared and permit leases, restore and
//!   force-release. Nothing is kept on a session between statements, so it works through ProxySQL.
//!   A shared lease is promoted (and an exclusive one demoted) with its token in one transaction
//!   that holds the key's row locked, as every acquire does: the reader count, the new fence and
//!   the change of kind happen at once, with no moment in which another holder could get in.
//!   See the `table` module.
//!
//! # Lock names (named mode)
//!
//! MySQL limits a lock name to 64 characters, so a key's name is `lh:` and the first 20 bytes (160
//! bits) of SHA-256 over `prefix ‖ key` in hex: [`lock_name`]. It will never change. A SQL job
//! takes the same lock with
//! `GET_LOCK(CONCAT('lh:', LEFT(SHA2(CONCAT('leasehold:', 'report'), 256), 40)), 10)`.
//!
//! # Guarantees and their mechanisms
//!
//! * Fences: `GREATEST(stored + 1, server clock in µs)`, stored in InnoDB (the fence table in named
//!   mode, the key's row in table mode), drawn once the key is ours; strictly increasing per key,
//!   also across a server crash or a lost table, as long as the server's clock does not step back
//!   by more than the time since the key's last grant. The clock is read independently of the
//!   session's time zone (`UNIX_TIMESTAMP()` and the µs of `NOW(6)`).
//! * Bounded: one [`leasehold_core::Deadline`] per call (an acquire: wait + connect + I/O; anything
//!   else: connect + I/O), from which the pool checkout, the name lookup (core's bounded resolver),
//!   the connect and every round trip draw; before each round trip the socket's receive and send
//!   timeouts are set to what is left (at most the I/O timeout), and a watchdog thread (one per
//!   process, started on first use) shuts the socket down if the round trip as a whole outlives it,
//!   so a stopped or dripping server gives `Unavailable` in time. A session whose round trip failed
//!   is never reused. The driver's connect (handshake, and its own name lookup under
//!   `ssl-mode=VERIFY_IDENTITY` with a host name) runs on a short-lived thread that the caller
//!   stops waiting for at the deadline.
//! * A named lease whose session broke (killed, server restarted) is `Lost` at its next call; one
//!   whose release or extend timed out gives `Unavailable` and is lost from then on (its session is
//!   closed, which frees the lock once the server reads the close).
//! * Sessions are pooled by core's thread-free pool (fork-safe: a child never uses or closes its
//!   parent's sessions); named mode holds one session per lease and per waiter, so `pool_size`
//!   bounds them.
//! * One size per semaphore, both modes: while a semaphore has a live holder (unexpired,
//!   unreleased), an acquire asking for another number of permits is refused with
//!   `InvalidArgument` ([`leasehold_core::wait::other_size`]) at its first attempt, a waiting one
//!   too; once every holder is gone, a new size may be used. Each holder's row says the size it
//!   was granted under (`permits`: the slot's row of `<table>_fences` in named mode, the permit's
//!   row of `<table>_permits` in table mode), and a grant refuses while a live row of the
//!   semaphore has another, checked in the transaction that holds the semaphore's row locked, so
//!   two sizes are never granted at once. Live means, in named mode, a row that names a holder
//!   whose lease has not expired and whose session still holds the slot (`IS_USED_LOCK`): a
//!   released or expired holder binds nobody. Tables made by 0.2 get the column at the first
//!   connect (`ALTER TABLE … ADD COLUMN permits INT UNSIGNED NULL DEFAULT NULL`, which needs
//!   `ALTER` on the table: run it once as its owner otherwise); their rows read NULL, size
//!   unknown, which binds nobody.
//! * Bounded state: rows of leases that ended over a minute ago are deleted (1000 per table at a
//!   time, at most once a minute per client, from release): table mode's rows, and named mode's
//!   fence rows of names nobody holds. A fence lost with its row is replaced by the clock term.

mod doctor;
pub mod gate;
mod mode;
mod named;
mod names;
mod records;
mod session;
mod sweep;
mod table;
mod tls;
mod waiting;
mod watchdog;

pub use names::lock_name;

pub(crate) use leasehold_core::ask::Ask;
use leasehold_core::config::{BackendConfig, MysqlLockMode};
use leasehold_core::wait::{self, Turn, Waiter};
use leasehold_core::{
    Config, Error, Key, KeyInfo, LeaseKind, LockBackend, RawLease, Request, Result, Token, Ttl,
};
use mode::LockMode;
use named::Named;
use session::{call, Pools};
use std::fmt;
use std::time::Instant;
use table::Table;

/// A MySQL/MariaDB lock backend in either mode. Thread-safe; share it through a
/// [`leasehold_core::Client`].
pub struct MysqlBackend {
    mode: Box<dyn LockMode>,
    pools: Pools,
    prefix: String,
    describe: String,
}

impl fmt::Debug for MysqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlBackend")
            .field("backend", &self.describe)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl MysqlBackend {
    /// Connects and creates the mode's tables if missing. `Unavailable` if the server cannot be
    /// reached within the timeouts; `InvalidArgument` for a configuration that is not MySQL's.
    pub fn connect(config: &Config) -> Result<MysqlBackend> {
        let BackendConfig::Mysql(my) = &config.backend else {
            return Err(Error::invalid(format!(
                "not a MySQL URL: {}",
                config.describe()
            )));
        };
        let pools = Pools::new(
            my,
            config.connect_timeout,
            config.io_timeout,
            config.pool_size,
            config.secrets(),
            config.describe(),
        )?;
        // Setting up is one call: bounded by one connect and one I/O timeout in all.
        let deadline = pools.call();
        let version = call(&pools, deadline, "SELECT VERSION()", "connecting")?;
        let version = match version[0].value(0) {
            Some(mysql::Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        tracing::debug!(
            "leasehold-mysql: connected to {} ({version})",
            config.describe()
        );
        let mode: Box<dyn LockMode> = match my.mode {
            MysqlLockMode::Table => {
                let table = Table::new(&my.table);
                table.ensure(&pools, deadline)?;
                Box::new(table)
            }
            _ => {
                let named = Named::new(&my.table);
                named.ensure(&pools, deadline)?;
                Box::new(named)
            }
        };
        Ok(MysqlBackend {
            mode,
            pools,
            prefix: config.prefix.clone(),
            describe: config.describe(),
        })
    }

    fn ask<'a>(&self, key: &'a Key, ttl: Ttl) -> Ask<'a> {
        Ask::new(key, &self.prefix, ttl)
    }
}

/// Adds `column` (`definition`) to the table `quoted` made by an older version, looking first, so
/// an account that may not alter the table can use one its owner has upgraded. The look selects the
/// column itself (error 1054 when it is missing) rather than reading `information_schema`: MariaDB
/// 10.11 answers `information_schema.COLUMNS` through a temporary table, and was seen to crash
/// dropping one (`ha_maria::drop_table`) while another session aborted. MySQL has no
/// `ADD COLUMN IF NOT EXISTS`; a client that adds it at the same moment makes ours fail with 1060
/// (duplicate column), which is success too.
pub(crate) fn add_column(
    pools: &Pools,
    deadline: leasehold_core::Deadline,
    quoted: &str,
    column: &str,
    definition: &str,
) -> Result<()> {
    let what = format!("adding the column {column} to {quoted}");
    let look = format!("SELECT {column} FROM {quoted} LIMIT 0");
    let (_conn, found) = session::with_session(pools, deadline, |s| s.batch(&look, deadline))?;
    match found {
        Ok(_) => return Ok(()),
        Err(session::Failure::Server(1054, _)) => {}
        Err(e) => return Err(pools.failed(&what, &e)),
    }
    let alter = format!("ALTER TABLE {quoted} ADD COLUMN {column} {definition}");
    let (_conn, outcome) = session::with_session(pools, deadline, |s| s.batch(&alter, deadline))?;
    match outcome {
        Ok(_) | Err(session::Failure::Server(1060, _)) => Ok(()),
        Err(e) => Err(pools.failed(&what, &e)),
    }
}

impl LockBackend for MysqlBackend {
    fn diagnose(&self) -> Result<leasehold_core::doctor::Diagnosis> {
        let facts = doctor::gather(&self.pools)?;
        Ok(doctor::judge(&facts, self.mode.session_held()))
    }

    fn name(&self) -> &'static str {
        self.mode.name()
    }

    /// The waiter's attempt, as the final one of a wait: bounded like any call, and a writer does
    /// not mark itself as waiting.
    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        let now = Instant::now();
        match self.waiter(request, now)?.attempt(true, now)? {
            Turn::Granted(lease) => Ok(lease),
            Turn::NotYet { .. } => Err(wait::refused(request.key(), request.kind())),
        }
    }

    fn waiter<'a>(&'a self, request: &'a Request, end: Instant) -> Result<Box<dyn Waiter + 'a>> {
        let ask = self.ask(request.key(), request.ttl());
        self.mode.waiter(&self.pools, ask, request.kind(), end)
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        self.mode.release(&self.pools, &self.prefix, lease)
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.mode.extend(&self.pools, &self.prefix, lease, ttl)
    }

    fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.mode.try_promote(&self.pools, &self.prefix, lease, ttl)
    }

    fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.mode.demote(&self.pools, &self.prefix, lease, ttl)
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

    /// Rows of a records table, in both modes (see `records.rs`).
    fn records(&self) -> Option<&dyn leasehold_core::records::RecordStore> {
        Some(self)
    }
}
