//! Database sessions: the pool that hands them out (core's, which starts no threads and so stays
//! usable after `fork()`), how each is set up so every statement is
//! bounded, and how driver errors become Leasehold errors.

use leasehold_core::pool::{ManageConnection, Pool, PoolError, PooledConnection};
use leasehold_core::{Error, Result};
use postgres::{Client, NoTls, SimpleQueryMessage, SimpleQueryRow};
use std::sync::Mutex;
use std::time::Duration;

/// How long the server lets a client's TCP connection stay silent (unacknowledged data, or failed
/// keepalives) before it ends the session and so frees its advisory locks: a holder whose host
/// vanishes loses its locks within about this long.
pub(crate) const SERVER_DEAD_PEER: Duration = Duration::from_secs(10);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_RETRIES: u32 = 5;

/// One pooled session. `poisoned` makes the pool close it instead of reusing it, for a session that may
/// hold an advisory lock or a LISTEN that nobody tracks any more.
pub(crate) struct Session {
    pub client: Client,
    pub poisoned: bool,
    /// Whether a statement ran on it before: only such a session can be stale.
    pub reused: bool,
}

impl Session {
    /// Runs `sql` with the simple query protocol (several statements, one round trip) and returns the
    /// rows of every statement, in order.
    pub fn rows(&mut self, sql: &str) -> Result<Vec<SimpleQueryRow>, postgres::Error> {
        Ok(self
            .client
            .simple_query(sql)?
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(r),
                _ => None,
            })
            .collect())
    }

    /// Whether the session died (closed, terminated by an administrator or by its idle timeout, or
    /// its connection failed): anything it held on the server is gone with it.
    pub fn is_gone(&self, e: &postgres::Error) -> bool {
        self.client.is_closed() || e.is_closed() || is_fatal(e)
    }
}

fn is_fatal(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        let c = c.code();
        c.starts_with("57P") || c.starts_with("08")
    })
}

pub(crate) struct SessionManager {
    config: postgres::Config,
    setup: String,
}

impl ManageConnection for SessionManager {
    type Connection = Session;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Session, postgres::Error> {
        let mut client = self.config.connect(NoTls)?;
        if !self.setup.is_empty() {
            client.batch_execute(&self.setup)?;
        }
        Ok(Session {
            client,
            poisoned: false,
            reused: false,
        })
    }

    fn has_broken(&self, session: &mut Session) -> bool {
        session.poisoned || session.client.is_closed()
    }
}

pub(crate) type Conn = PooledConnection<SessionManager>;

/// The pool, rebuilt in a child after `fork()`: the parent's sessions must never be used (nor closed)
/// by the child.
pub(crate) struct Pools {
    current: Mutex<(u32, Pool<SessionManager>)>,
    config: postgres::Config,
    setup: String,
    size: u32,
    checkout: Duration,
    pub secrets: Vec<String>,
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pools")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Pools {
    pub fn new(
        connection: &str,
        connect_timeout: Duration,
        io_timeout: Duration,
        size: u32,
        secrets: Vec<String>,
        session_settings: bool,
    ) -> Result<Pools> {
        let mut config: postgres::Config = connection.parse().map_err(|e: postgres::Error| {
            Error::invalid(leasehold_core::secret::redact(
                &format!("bad PostgreSQL connection parameters: {}", describe(&e)),
                &secrets.iter().map(String::as_str).collect::<Vec<_>>(),
            ))
        })?;
        let given = |name: &str| {
            connection
                .split_once('?')
                .is_some_and(|(_, q)| q.split('&').any(|p| p.split('=').next() == Some(name)))
        };
        if !given("connect_timeout") {
            config.connect_timeout(connect_timeout);
        }
        if !given("keepalives") {
            config.keepalives(true);
        }
        if !given("keepalives_idle") {
            config.keepalives_idle(KEEPALIVE_IDLE);
        }
        if !given("keepalives_interval") {
            config.keepalives_interval(KEEPALIVE_INTERVAL);
        }
        if !given("keepalives_retries") {
            config.keepalives_retries(KEEPALIVE_RETRIES);
        }
        if !given("tcp_user_timeout") {
            // Below half a second one lost packet (TCP's minimum retransmit timeout is 200 ms) would
            // end a healthy session, and with it a held advisory lock.
            config.tcp_user_timeout(io_timeout.max(Duration::from_millis(500)));
        }
        if !given("application_name") {
            config.application_name("leasehold");
        }
        let io_ms = io_timeout.as_millis().max(1);
        // Defaults for every statement of a session that holds advisory locks; calls that wait set
        // their own with SET LOCAL. The server-side TCP settings make the server notice a dead client
        // in seconds, not hours, and so free its locks.
        let setup = if !session_settings {
            String::new()
        } else {
            format!(
                "SET statement_timeout = {io_ms}; SET lock_timeout = {io_ms}; \
                 SET idle_in_transaction_session_timeout = {io_ms}; SET idle_session_timeout = 0; \
                 SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; \
                 SET tcp_keepalives_count = {KEEPALIVE_RETRIES}; SET tcp_user_timeout = {}",
                KEEPALIVE_IDLE.as_secs(),
                KEEPALIVE_INTERVAL.as_secs(),
                SERVER_DEAD_PEER.as_millis()
            )
        };
        let pool = build(&config, &setup, size);
        Ok(Pools {
            current: Mutex::new((std::process::id(), pool)),
            config,
            setup,
            size,
            checkout: connect_timeout,
            secrets,
        })
    }

    /// A session from the pool, waiting at most the connect timeout.
    pub fn get(&self) -> Result<Conn> {
        let pool = {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            let pid = std::process::id();
            if current.0 != pid {
                let fresh = build(&self.config, &self.setup, self.size);
                let inherited = std::mem::replace(&mut current.1, fresh);
                // Dropping it would close the parent's sessions (and free the parent's locks).
                std::mem::forget(inherited);
                current.0 = pid;
            }
            current.1.clone()
        };
        pool.get_timeout(self.checkout).map_err(|e| match e {
            PoolError::Connect(cause) => self.unavailable(format!(
                "cannot open a PostgreSQL session within {} ms: {}",
                self.checkout.as_millis(),
                describe(&cause)
            )),
            _ => self.unavailable(format!(
                "no PostgreSQL session within {} ms: all {} sessions of the pool are held by \
                 leases and waiters (raise pool_size)",
                self.checkout.as_millis(),
                self.size
            )),
        })
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// `error` with every secret of the configuration masked in its message.
    pub fn redacted(&self, error: Error) -> Error {
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        error.redacted(&secrets)
    }

    pub fn unavailable(&self, msg: impl std::fmt::Display) -> Error {
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        Error::unavailable(msg, &secrets)
    }

    /// `Unavailable` for a failed statement.
    pub fn failed(&self, what: &str, e: &postgres::Error) -> Error {
        self.unavailable(format!("PostgreSQL {what} failed: {}", describe(e)))
    }
}

/// Sessions are opened on demand; a stale one (server restarted) is found by the statement itself
/// and retried once on a fresh one, since a test query per checkout would cost a round trip per call.
fn build(config: &postgres::Config, setup: &str, size: u32) -> Pool<SessionManager> {
    Pool::new(
        SessionManager {
            config: config.clone(),
            setup: setup.to_owned(),
        },
        size,
    )
}

/// A driver error as one line: the server's message and SQLSTATE, or the client-side cause.
pub(crate) fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// The first column of the last row, if any.
pub(crate) fn last_value(rows: &[SimpleQueryRow], column: usize) -> Option<&str> {
    rows.last().and_then(|r| r.get(column))
}

/// `Some(value)` of a column that holds a number, `None` for NULL.
pub(crate) fn number<T: std::str::FromStr>(text: Option<&str>) -> Result<Option<T>> {
    match text {
        None => Ok(None),
        Some(t) => t.parse().map(Some).map_err(|_| {
            Error::Internal(format!("PostgreSQL answered `{t}` where a number belongs"))
        }),
    }
}
