//! Sessions on the `mysql` crate's synchronous `Conn`, pooled by core's thread-free pool, with every
//! round trip bounded by the caller's [`Deadline`].
//!
//! The driver fixes its socket timeouts when it connects; before each round trip the session sets the
//! socket's receive and send timeouts to what is left of the call's deadline (at most the I/O
//! timeout), so a stopped server (SIGSTOP: the kernel still ACKs, keepalives never fire) gives an
//! error in time, and registers the socket with the `watchdog`, which bounds the round trip as a
//! whole (a reply dripped a few bytes at a time keeps each read within its timeout). A session whose round trip failed is never reused: after a timeout or a broken
//! connection the server may still be running what was sent.

use crate::{tls, watchdog};
use leasehold_core::config::MysqlConfig;
use leasehold_core::pool::{ManageConnection, Pool, PoolError, PooledConnection};
use leasehold_core::resolve::resolve;
use leasehold_core::session_watch;
use leasehold_core::stale_session::{self, StaleSession};
use leasehold_core::{Deadline, Error, Result, SessionWatch};
use mysql::consts::CapabilityFlags;
use mysql::prelude::Queryable;
use mysql::{Conn, OptsBuilder, SslOpts, Value};
use mysql_common::proto::codec::error::PacketCodecError as mysql_common_io;
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the server sends back for one statement of a batch.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    pub rows: Vec<Vec<Value>>,
    /// Rows matched (the session asks for found rows, so an update to the same value counts).
    pub affected: u64,
    /// The OK packet's insert id: what the statement gave `LAST_INSERT_ID(expr)` (none of the
    /// crate's tables has an AUTO_INCREMENT column), 0 if it did not. A statement hands back a
    /// value this way without a second statement to read it.
    pub insert_id: u64,
}

/// The answers of a batch, one per statement. Reading past the end gives an empty answer (no rows,
/// nothing affected) rather than a panic: what a server (or something posing as one) sends back is
/// input like any other.
#[derive(Debug, Default)]
pub(crate) struct Answers(Vec<Answer>);

static NO_ANSWER: Answer = Answer {
    rows: Vec::new(),
    affected: 0,
    insert_id: 0,
};

impl Answers {
    /// The `k`-th answer from the end (1: the last).
    pub fn nth_last(&self, k: usize) -> &Answer {
        self.0
            .len()
            .checked_sub(k)
            .and_then(|i| self.0.get(i))
            .unwrap_or(&NO_ANSWER)
    }
}

impl Answers {
    /// The answers in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Answer> {
        self.0.iter()
    }
}

impl std::ops::Index<usize> for Answers {
    type Output = Answer;
    fn index(&self, i: usize) -> &Answer {
        self.0.get(i).unwrap_or(&NO_ANSWER)
    }
}

impl Answer {
    /// The first row's column `i`, if any.
    pub fn value(&self, i: usize) -> Option<&Value> {
        self.rows.first().and_then(|r| r.get(i))
    }

    pub fn int(&self, i: usize) -> Option<i64> {
        self.value(i).and_then(int)
    }
}

/// A column as an integer (`None` for NULL or anything else).
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::UInt(u) => i64::try_from(*u).ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// Why a round trip failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No answer within the deadline: the statement may still run on the server.
    Timeout,
    /// The connection broke (the server closed it, killed this session, or restarted).
    Closed(String),
    /// The server refused the statement (an SQL error); the session is still usable.
    Server(u16, String),
}

impl Failure {
    fn of(e: mysql::Error) -> Failure {
        if timed_out(&e) {
            return Failure::Timeout;
        }
        match e {
            mysql::Error::MySqlError(my) => match my.code {
                // Killed or shut down: the session is gone, not the statement refused.
                1053 | 1927 | 2006 | 2013 => Failure::Closed(my.message),
                code => Failure::Server(code, my.message),
            },
            other => Failure::Closed(other.to_string()),
        }
    }

    /// Whether another attempt may succeed: InnoDB gave up a row lock (deadlock, lock wait
    /// timeout) because another acquirer of the same key was busy with it.
    pub fn is_contention(&self) -> bool {
        matches!(self, Failure::Server(1205 | 1213, _))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout => f.write_str("no answer within the call's timeout"),
            Failure::Closed(m) => write!(f, "the connection broke: {m}"),
            Failure::Server(code, m) => write!(f, "server error {code}: {m}"),
        }
    }
}

/// One server session.
pub(crate) struct Session {
    conn: Conn,
    io_timeout: Duration,
    /// Set once a round trip failed in a way that leaves the session unusable.
    pub broken: bool,
    /// Whether a round trip ever ran on it: a session taken from the pool's idle list may have
    /// gone stale meanwhile (a server restart), a new one has not.
    pub used: bool,
    /// The watch of the lease this session holds ([`Session::watch`]), told of every round trip.
    watch: Option<Arc<SessionWatch>>,
}

impl Session {
    /// A watch on this session for the lease it now holds (see [`SessionWatch`]): told of every
    /// round trip from now on, and closed before the connection is. A watch attached before is
    /// closed first.
    pub fn watch(&mut self) -> Arc<SessionWatch> {
        let fd = if self.broken {
            -1
        } else {
            self.conn.as_raw_fd()
        };
        session_watch::attach(&mut self.watch, fd)
    }

    /// The session no longer holds a lease that relies on it: its watch is closed (the lease is
    /// over) and no longer told of round trips.
    pub fn unwatch(&mut self) {
        session_watch::detach(&mut self.watch);
    }
}

/// A server restart leaves an idle session closed: [`Session::batch`] says `used` itself, and a
/// failed batch has already marked the session broken, so the pool drops it.
impl StaleSession for Session {
    type Failure = Failure;

    fn reused(&self) -> bool {
        self.used
    }

    fn was_stale(&self, failure: &Failure) -> bool {
        matches!(failure, Failure::Closed(_))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Before the connection (dropped after this) closes the socket.
        self.unwatch();
    }
}

impl Session {
    /// Runs `sql` (one statement or several separated by `;`) and collects every answer, within
    /// what is left of `deadline` and never longer than the I/O timeout.
    pub fn batch(
        &mut self,
        sql: &str,
        deadline: Deadline,
    ) -> std::result::Result<Answers, Failure> {
        let budget = deadline.cap(self.io_timeout);
        if budget.is_zero() || self.broken {
            self.broken = true;
            return Err(Failure::Timeout);
        }
        if let Err(e) = self.set_timeouts(budget) {
            self.broken = true;
            return Err(Failure::Closed(format!(
                "cannot set the socket's timeouts: {e}"
            )));
        }
        // What arrives from now on is asked for: the lease's watch does not look meanwhile.
        if let Some(watch) = &self.watch {
            watch.call_begins();
        }
        // Socket timeouts bound each read; the watchdog bounds the round trip as a whole.
        let guard = watchdog::watch(self.conn.as_raw_fd(), Instant::now() + budget);
        let outcome = self.run(sql);
        let fired = guard.as_ref().is_some_and(|g| g.fired());
        drop(guard);
        if let Some(watch) = &self.watch {
            // A failed round trip leaves the lease's outcome to the caller (it ends the session).
            watch.call_ends(outcome.is_ok() && !fired);
        }
        let outcome = if fired {
            Err(Failure::Timeout)
        } else {
            outcome
        };
        self.used = true;
        // Even a refused statement ends the session: the server stops a batch at its first error,
        // which may leave a transaction open, or a lock taken by an earlier statement.
        if outcome.is_err() {
            self.broken = true;
        }
        outcome
    }

    fn run(&mut self, sql: &str) -> std::result::Result<Answers, Failure> {
        let mut result = self.conn.query_iter(sql).map_err(Failure::of)?;
        let mut answers = Vec::new();
        while let Some(set) = result.iter() {
            let affected = set.affected_rows();
            let insert_id = set.last_insert_id().unwrap_or(0);
            let mut rows = Vec::new();
            for row in set {
                // `Row::unwrap` hands over the row's values (it cannot fail).
                rows.push(row.map_err(Failure::of)?.unwrap());
            }
            answers.push(Answer {
                rows,
                affected,
                insert_id,
            });
        }
        Ok(Answers(answers))
    }

    fn set_timeouts(&self, budget: Duration) -> std::io::Result<()> {
        // SAFETY: the descriptor belongs to `self.conn`, which outlives this borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(self.conn.as_raw_fd()) };
        let socket = socket2::SockRef::from(&fd);
        socket.set_read_timeout(Some(budget))?;
        socket.set_write_timeout(Some(budget))
    }
}

/// Opens sessions: resolves the host under the deadline and connects with the remaining budget.
pub(crate) struct Manager {
    config: MysqlConfig,
    ssl: Option<SslOpts>,
    io_timeout: Duration,
    secrets: Vec<String>,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("host", &self.config.host)
            .field("port", &self.config.port)
            .finish_non_exhaustive()
    }
}

impl ManageConnection for Manager {
    type Connection = Session;
    type Error = String;

    fn connect(&self, budget: Duration) -> std::result::Result<Session, String> {
        let deadline = Deadline::after(budget);
        let addrs = resolve(&self.config.host, self.config.port, deadline)
            .map_err(|e| e.message().to_owned())?;
        // Checking the host name needs the name itself (the driver then looks it up again);
        // otherwise the address resolved under the deadline is used.
        let host = match (&self.ssl, addrs.first()) {
            (Some(ssl), _) if !ssl.skip_domain_validation() => self.config.host.clone(),
            (_, Some(addr)) => addr.ip().to_string(),
            (_, None) => self.config.host.clone(),
        };
        let left = deadline.cap(budget);
        if left.is_zero() {
            return Err("out of time before connecting".to_owned());
        }
        let opts = OptsBuilder::new()
            .ip_or_hostname(Some(host))
            .tcp_port(self.config.port)
            .user(self.config.user.clone())
            .pass(self.config.password.as_ref().map(|p| p.expose().to_owned()))
            .db_name(self.config.database.clone())
            .prefer_socket(false)
            .tcp_connect_timeout(Some(left))
            .read_timeout(Some(left))
            .write_timeout(Some(left))
            .tcp_keepalive_time_ms(Some(10_000))
            .tcp_keepalive_probe_interval_secs(Some(2))
            .tcp_keepalive_probe_count(Some(3))
            .tcp_user_timeout_ms(Some(10_000))
            // Known up front, so connecting asks the server for nothing more.
            .max_allowed_packet(Some(16 << 20))
            .stmt_cache_size(Some(0))
            .additional_capabilities(CapabilityFlags::CLIENT_FOUND_ROWS)
            .ssl_opts(self.ssl.clone());
        // Nothing is set on the session: table mode must work through a statement pooler, which
        // might not carry session settings from one statement to the next.
        let conn = self.open(opts, deadline)?;
        Ok(Session {
            conn,
            io_timeout: self.io_timeout,
            broken: false,
            used: false,
            watch: None,
        })
    }

    fn has_broken(&self, conn: &mut Session) -> bool {
        conn.broken
    }

    fn is_permanent(&self, error: &String) -> bool {
        // A wrong password or an unknown database will not fix itself by trying again.
        [
            "Access denied",
            "Unknown database",
            "certificate",
            "Certificate",
        ]
        .iter()
        .any(|m| error.contains(m))
    }
}

impl Manager {
    /// The driver's connect, on a short-lived thread: its handshake reads are bounded one by one
    /// (the socket timeout), not as a whole, so the caller stops waiting at the deadline and the
    /// thread finishes on its own (its late session is dropped, which closes it). A plain std
    /// thread, made on demand, so this keeps working after `fork()`.
    fn open(&self, opts: OptsBuilder, deadline: Deadline) -> std::result::Result<Conn, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        leasehold_core::threads::quietly(|| {
            std::thread::Builder::new()
                .name("leasehold-mysql-connect".into())
                .spawn(move || {
                    let _ = tx.send(Conn::new(opts));
                })
        })
        .map_err(|e| format!("cannot start a connect thread: {e}"))?;
        match rx.recv_timeout(deadline.remaining()) {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(self.redact(&describe_connect(&e))),
            Err(_) => Err("no answer within the connect timeout".to_owned()),
        }
    }

    fn redact(&self, text: &str) -> String {
        leasehold_core::secret::redact(text, &self.secrets)
    }
}

fn describe_connect(e: &mysql::Error) -> String {
    if timed_out(e) {
        "no answer within the connect timeout".to_owned()
    } else {
        e.to_string()
    }
}

/// Whether a driver error is a socket timeout (the receive or send timeout ran out: `EAGAIN`),
/// whichever layer wrapped it.
fn timed_out(e: &mysql::Error) -> bool {
    let io = match e {
        mysql::Error::IoError(io) => io,
        mysql::Error::CodecError(mysql_common_io::Io(io)) => io,
        _ => return false,
    };
    matches!(
        io.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// A pooled session.
pub(crate) type Conn2 = PooledConnection<Manager>;

/// The backend's sessions and what every call needs to bound and describe its failures.
pub(crate) struct Pools {
    pool: Pool<Manager>,
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    secrets: Vec<String>,
    describe: String,
}

impl Pools {
    pub fn new(
        config: &MysqlConfig,
        connect_timeout: Duration,
        io_timeout: Duration,
        pool_size: u32,
        secrets: Vec<String>,
        describe: String,
    ) -> Result<Pools> {
        let manager = Manager {
            ssl: tls::ssl_opts(config)?,
            config: config.clone(),
            io_timeout,
            secrets: secrets.clone(),
        };
        Ok(Pools {
            pool: Pool::new(manager, pool_size),
            connect_timeout,
            io_timeout,
            secrets,
            describe,
        })
    }

    /// The deadline of one call that is not a wait.
    pub fn call(&self) -> Deadline {
        Deadline::for_call(self.connect_timeout, self.io_timeout)
    }

    /// The deadline of an acquire whose wait ends at `end`.
    pub fn acquire_until(&self, end: std::time::Instant) -> Deadline {
        Deadline::for_acquire_until(end, self.connect_timeout, self.io_timeout)
    }

    /// A session by `deadline`: an idle one, or a new one while the pool has room.
    pub fn get(&self, deadline: Deadline) -> Result<Conn2> {
        match self.pool.get(deadline) {
            Ok(conn) => Ok(conn),
            Err(PoolError::Timeout(d)) => Err(self.unavailable(format!(
                "every pooled session stayed busy for {} ms (raise pool_size?)",
                d.as_millis()
            ))),
            Err(PoolError::Connect(e)) => Err(self.unavailable(format!("cannot connect: {e}"))),
            Err(other) => Err(self.unavailable(format!("cannot connect: {other}"))),
        }
    }

    /// An `Unavailable` error naming the server, with every secret masked.
    pub fn unavailable(&self, what: impl fmt::Display) -> Error {
        Error::unavailable(format!("{}: {what}", self.describe), &self.secrets)
    }

    /// `Lost`, for a lease whose session ended, with every secret masked.
    pub fn lost(&self, what: impl fmt::Display) -> Error {
        Error::Lost(leasehold_core::secret::redact(
            &what.to_string(),
            &self.secrets,
        ))
    }

    /// `Unavailable` for a failed round trip doing `what`.
    pub fn failed(&self, what: &str, failure: &Failure) -> Error {
        self.unavailable(format!("{what}: {failure}"))
    }

    pub fn size(&self) -> usize {
        self.pool.max_size()
    }
}

/// Runs `f` on a pooled session checked out by `deadline`, again on the next one while a reused
/// session turns out closed (core's [`stale_session::with_session`]): every idle session of the
/// pool may be stale, and one fresh one follows them. Returns the session with the outcome.
pub(crate) fn with_session<T>(
    pools: &Pools,
    deadline: Deadline,
    f: impl FnMut(&mut Session) -> std::result::Result<T, Failure>,
) -> Result<(Conn2, std::result::Result<T, Failure>)> {
    stale_session::with_session(pools.size() + 1, deadline, || pools.get(deadline), f)
}

/// One batch on a pooled session ([`with_session`]); a failure is `Unavailable` saying `what`
/// failed.
pub(crate) fn call(pools: &Pools, deadline: Deadline, sql: &str, what: &str) -> Result<Answers> {
    let (_conn, outcome) = with_session(pools, deadline, |s| s.batch(sql, deadline))?;
    outcome.map_err(|e| pools.failed(what, &e))
}
