//! Database sessions: the pool that hands them out (core's, which starts no threads and is
//! fork-aware), how each is set up so every statement is bounded, and how driver errors become
//! Leasehold errors.
//!
//! # Why every round trip has a client-side timeout
//!
//! Server-side `statement_timeout`, TCP keepalives and `tcp_user_timeout` do not help when the server
//! is stopped (SIGSTOP, a VM paused, a process wedged): the kernel still ACKs every packet and answers
//! keepalives, so the socket never fails and a blocking driver waits forever. So each session is
//! `tokio-postgres` driven by a current-thread tokio runtime of its own (no worker threads: nothing
//! is running between calls and nothing breaks after `fork()`), and every call is
//! `block_on(timeout(…))` with a budget drawn from the operation's [`Deadline`]. A session whose call
//! timed out is never reused: it may still have the statement in flight, or hold what it took.

use crate::tls::{Connector, Tls};
use leasehold_core::config::PostgresSslMode;
use leasehold_core::fork::PerProcess;
use leasehold_core::pool::{ManageConnection, Pool, PoolError, PooledConnection};
use leasehold_core::session_watch;
use leasehold_core::stale_session::StaleSession;
use leasehold_core::{Deadline, Error, Result, SessionWatch};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_postgres::config::Host;
use tokio_postgres::config::SslMode;
use tokio_postgres::types::ToSql;
use tokio_postgres::{
    AsyncMessage, Client, Connection, Row, SimpleQueryMessage, SimpleQueryRow, Statement,
};

pub(crate) use tokio_postgres::Notification;

/// How long the server lets a client's TCP connection stay silent (unacknowledged data, or failed
/// keepalives) before it ends the session and so frees its advisory locks: a holder whose host
/// vanishes loses its locks within about this long.
pub(crate) const SERVER_DEAD_PEER: Duration = Duration::from_secs(10);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_RETRIES: u32 = 5;
/// How soon the client's own socket may give up on a silent server: its TCP user timeout, or
/// without one its keepalives' idle time plus every probe (Linux's defaults where unset).
fn client_dead_peer(config: &tokio_postgres::Config) -> Duration {
    let user = config.get_tcp_user_timeout().copied();
    if let Some(timeout) = user.filter(|t| !t.is_zero()) {
        return timeout;
    }
    if !config.get_keepalives() {
        return Duration::MAX;
    }
    let interval = config
        .get_keepalives_interval()
        .unwrap_or(Duration::from_secs(75));
    let probes = config.get_keepalives_retries().unwrap_or(9);
    config
        .get_keepalives_idle()
        .saturating_add(interval.saturating_mul(probes))
}

/// How long dropping a healthy session waits for its Terminate message to go out (a local socket
/// write): the server then logs a clean disconnect instead of an unexpected EOF.
const CLOSE_GRACE: Duration = Duration::from_millis(50);

/// How many statements a session keeps prepared.
pub(crate) const PREPARED_SLOTS: usize = 5;

/// A statement that sessions prepare once and keep, under a slot of their own (below
/// [`PREPARED_SLOTS`]). A session belongs to one backend's pool, so one slot always holds one text.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub slot: usize,
    pub sql: String,
}

/// Why a round trip failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The driver's error: the server's, or the connection's.
    Pg(tokio_postgres::Error),
    /// No answer within the budget; the session is poisoned.
    TimedOut(Duration),
    /// The connection ended while we waited for a notification.
    Closed,
}

impl Failure {
    /// The SQLSTATE of a server error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Failure::Pg(e) => e.code().map(|c| c.code()),
            Failure::TimedOut(_) | Failure::Closed => None,
        }
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, Failure::TimedOut(_))
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

/// One pooled session. `poisoned` makes the pool close it instead of reusing it, for a session that may
/// hold an advisory lock or a LISTEN that nobody tracks any more, or whose call timed out.
pub(crate) struct Session {
    /// `None` only during drop. Declared (and dropped) before the runtime.
    client: Option<Client>,
    runtime: Option<Runtime>,
    notifications: mpsc::UnboundedReceiver<Notification>,
    /// Statements prepared on this session, by [`Prepared::slot`]: a handful (the advisory hot path),
    /// each parsed and planned once per session instead of once per call.
    prepared: [Option<Statement>; PREPARED_SLOTS],
    /// The task that runs the connection.
    driver: Option<tokio::task::JoinHandle<()>>,
    io_timeout: Duration,
    pub poisoned: bool,
    /// A channel the session still LISTENs on for nobody, UNLISTENed in front of its next statement
    /// (see [`Session::unlisten_later`]).
    unlisten: Option<String>,
    /// Whether a statement ran on it before: only such a session can be stale.
    pub reused: bool,
    /// A call on it timed out: it must not even be given time to close.
    timed_out: bool,
    /// The connection's socket (under TLS too: TLS wraps the same descriptor), taken before the
    /// stream went to the driver. Only ever polled through [`Session::watch`]'s watch.
    fd: RawFd,
    /// The watch of the lease this session holds ([`Session::watch`]), told of every call.
    watch: Option<Arc<SessionWatch>>,
}

impl Session {
    fn client(&self) -> &Client {
        self.client.as_ref().expect("client present until drop")
    }

    /// A watch on this session for the lease it now holds (see [`SessionWatch`]): told of every
    /// call from now on, and closed before the connection is (or as soon as the driver may have
    /// closed it). A watch attached before is closed first.
    pub fn watch(&mut self) -> Arc<SessionWatch> {
        let fd = if self.is_closed() { -1 } else { self.fd };
        session_watch::attach(&mut self.watch, fd)
    }

    /// The session no longer holds a lease that relies on it: its watch is closed (the lease is
    /// over) and no longer told of calls.
    pub fn unwatch(&mut self) {
        session_watch::detach(&mut self.watch);
    }

    /// Before a round trip (or any turn of the driver): the watch stops looking, since what
    /// arrives now is asked for.
    fn call_begins(&self) {
        if let Some(watch) = &self.watch {
            watch.call_begins();
        }
    }

    /// After it: `answered` when the server answered. The driver ends its task, and closes the
    /// socket, when the connection fails or the server sends something unasked that ends it (a
    /// FATAL error while idle): the socket's number is not the session's any more then.
    fn call_ends(&self, answered: bool) {
        if let Some(watch) = &self.watch {
            if self.client().is_closed() {
                watch.closed();
            } else {
                watch.call_ends(answered);
            }
        }
    }

    /// Runs `sql` (simple query protocol: several statements, one round trip) within the I/O timeout
    /// or what is left of `deadline`, whichever is shorter.
    pub fn rows(&mut self, sql: &str, deadline: Deadline) -> Result<Vec<SimpleQueryRow>, Failure> {
        let budget = deadline.cap(self.io_timeout);
        self.rows_within(sql, budget)
    }

    /// Like [`Session::rows`], for a statement that waits on the server (a lock queue) and may take
    /// all that is left of `deadline`.
    pub fn rows_waiting(
        &mut self,
        sql: &str,
        deadline: Deadline,
    ) -> Result<Vec<SimpleQueryRow>, Failure> {
        self.rows_within(sql, deadline.remaining())
    }

    fn rows_within(&mut self, sql: &str, budget: Duration) -> Result<Vec<SimpleQueryRow>, Failure> {
        Ok(self
            .statements_within(sql, budget)?
            .into_iter()
            .flatten()
            .collect())
    }

    /// Like [`Session::rows`], with the rows of each statement apart (one list per statement).
    pub fn statements(
        &mut self,
        sql: &str,
        deadline: Deadline,
    ) -> Result<Vec<Vec<SimpleQueryRow>>, Failure> {
        let budget = deadline.cap(self.io_timeout);
        self.statements_within(sql, budget)
    }

    fn statements_within(
        &mut self,
        sql: &str,
        budget: Duration,
    ) -> Result<Vec<Vec<SimpleQueryRow>>, Failure> {
        if budget.is_zero() {
            // Sending it would leave the statement running with nobody to read its answer.
            return Err(Failure::TimedOut(budget));
        }
        let client = self.client.as_ref().expect("client present until drop");
        let runtime = self.runtime.as_ref().expect("runtime present until drop");
        // In the statement's own implicit transaction: undone with it if it fails, so kept for the
        // next one then.
        let unlisten = self
            .unlisten
            .as_ref()
            .map(|channel| format!("UNLISTEN \"{channel}\"; {sql}"));
        let sent = unlisten.as_deref().unwrap_or(sql);
        self.call_begins();
        let outcome = runtime
            .block_on(async { tokio::time::timeout(budget, client.simple_query(sent)).await });
        self.call_ends(matches!(outcome, Ok(Ok(_))));
        match outcome {
            Ok(Ok(messages)) => {
                let mut statements = vec![Vec::new()];
                for m in messages {
                    match m {
                        SimpleQueryMessage::Row(r) => {
                            statements.last_mut().expect("never empty").push(r)
                        }
                        SimpleQueryMessage::CommandComplete(_) => statements.push(Vec::new()),
                        _ => {}
                    }
                }
                statements.pop();
                if unlisten.is_some() {
                    // The UNLISTEN's own (empty) result: the caller sees the statements it sent.
                    statements.remove(0);
                    self.unlisten = None;
                    while self.notifications.try_recv().is_ok() {}
                }
                Ok(statements)
            }
            Ok(Err(e)) => Err(Failure::Pg(e)),
            Err(_) => {
                self.timed_out = true;
                self.poisoned = true;
                Err(Failure::TimedOut(budget))
            }
        }
    }

    /// Runs one prepared statement with `params` (extended protocol: Bind, Execute and Sync in one
    /// message, so one round trip) within the I/O timeout or what is left of `deadline`. The first
    /// call of a statement on a session prepares it first, under the same bound. A statement is one
    /// implicit transaction, exactly as the same text sent as a simple query.
    pub fn query(
        &mut self,
        statement: &Prepared,
        params: &[&(dyn ToSql + Sync)],
        deadline: Deadline,
    ) -> Result<Vec<Row>, Failure> {
        // Only table mode leaves an UNLISTEN for later, and it sends simple queries only: a
        // prepared statement could not carry it.
        debug_assert!(
            self.unlisten.is_none(),
            "an UNLISTEN left for a prepared statement"
        );
        let budget = deadline.cap(self.io_timeout);
        if budget.is_zero() {
            return Err(Failure::TimedOut(budget));
        }
        let client = self.client.as_ref().expect("client present until drop");
        let runtime = self.runtime.as_ref().expect("runtime present until drop");
        self.call_begins();
        let slot = &mut self.prepared[statement.slot];
        let outcome = runtime.block_on(async {
            tokio::time::timeout(budget, async {
                let prepared = match slot {
                    Some(prepared) => prepared.clone(),
                    None => slot.insert(client.prepare(&statement.sql).await?).clone(),
                };
                client.query(&prepared, params).await
            })
            .await
        });
        self.call_ends(matches!(outcome, Ok(Ok(_))));
        match outcome {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => {
                // The server no longer has our prepared statements (a `DISCARD ALL` or
                // `DEALLOCATE` by a pooler, say): this session's cache is wrong for every later
                // call, so it is not reused.
                if e.code().is_some_and(|c| c.code() == "26000") {
                    self.poisoned = true;
                }
                Err(Failure::Pg(e))
            }
            Err(_) => {
                self.timed_out = true;
                self.poisoned = true;
                Err(Failure::TimedOut(budget))
            }
        }
    }

    /// Leaves `channel` without a round trip now: the UNLISTEN goes in front of the session's next
    /// statement, in that statement's round trip. For a queue's head that was just granted the key,
    /// whose granting statement already gave back everything else the line held (the queue lock,
    /// the short idle timeout), so that the lease is handed out one round trip sooner. Until then
    /// the session only collects notifications of `channel`, dropped when the UNLISTEN has run.
    /// For sessions that send simple queries only (table mode's): [`Session::query`] cannot carry it.
    pub fn unlisten_later(&mut self, channel: String) {
        self.unlisten = Some(channel);
    }

    /// Drops notifications received so far (including those that reached the socket but were not
    /// read yet).
    pub fn drain_notifications(&mut self) {
        if let Some(runtime) = &self.runtime {
            // One turn of the connection task reads whatever the socket holds.
            self.call_begins();
            runtime.block_on(tokio::task::yield_now());
            self.call_ends(false);
        }
        while self.notifications.try_recv().is_ok() {}
    }

    /// Waits up to `nap` for a notification. `Ok(true)` when one came, `Ok(false)` when the nap ended,
    /// an error when the connection closed.
    pub fn wait_notification(&mut self, nap: Duration) -> Result<bool, Failure> {
        let runtime = self.runtime.as_ref().expect("runtime present until drop");
        self.call_begins();
        let notifications = &mut self.notifications;
        let woke =
            runtime.block_on(async { tokio::time::timeout(nap, notifications.recv()).await });
        self.call_ends(false);
        match woke {
            Ok(Some(_)) => Ok(true),
            Ok(None) => Err(Failure::Closed),
            Err(_) => Ok(false),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.client().is_closed()
    }

    /// Whether the session died (closed, terminated by an administrator or by its idle timeout, its
    /// connection failed, or a call on it timed out): anything it held on the server is gone with it,
    /// or will be once the server notices the closed connection.
    pub fn is_gone(&self, e: &Failure) -> bool {
        match e {
            Failure::TimedOut(_) | Failure::Closed => true,
            Failure::Pg(e) => self.is_closed() || e.is_closed() || is_fatal(e),
        }
    }

    /// Whether `e` says the session was dead before the statement ran, so running it again on another
    /// session cannot double anything. A timeout is not: the statement may have run.
    pub fn was_stale(&self, e: &Failure) -> bool {
        match e {
            Failure::TimedOut(_) => false,
            Failure::Closed => true,
            Failure::Pg(e) => self.is_closed() || e.is_closed() || is_fatal(e),
        }
    }
}

/// A session set aside as stale is poisoned: the pool closes it rather than keep it idle.
impl StaleSession for Session {
    type Failure = Failure;

    fn reused(&self) -> bool {
        self.reused
    }

    fn called(&mut self) {
        self.reused = true;
    }

    fn was_stale(&self, failure: &Failure) -> bool {
        Session::was_stale(self, failure)
    }

    fn set_aside(&mut self) {
        self.poisoned = true;
    }
}

impl Session {
    /// Closes the session without waiting for its Terminate message to go out: for a session the
    /// server has most likely ended already, closed from inside a caller's bounded call.
    fn close_at_once(mut self) {
        self.timed_out = true;
        drop(self);
    }
}

/// How long after a detached lease's TTL its session is closed on the client side. The server ends
/// the session by itself at its idle timeout (the TTL, counted from the end of the last statement,
/// so a little after the lease's local deadline); closing later than that only frees the client's
/// end, while closing earlier would free the key before its TTL.
const DETACHED_MARGIN: Duration = Duration::from_secs(1);

/// Sessions of detached advisory leases, by when they may be closed. Each is the lock it holds, so it
/// stays open until its lease's TTL; then it is closed by the next checkout of any pool in this
/// process ([`reap_detached`]), since nothing else runs between calls (sessions start no threads).
///
/// Kept outside every pool so detaching cannot use one up (a persistent php-fpm client detaches on
/// every request), and per process rather than per client so the key stays held until its TTL even
/// after the client that took it is freed, as detaching promises. A `fork()` child gets a list of its
/// own and never closes its parent's sessions.
static DETACHED: PerProcess<Mutex<BTreeMap<(Instant, u64), Session>>> = PerProcess::new();
static DETACHED_SEQ: AtomicU64 = AtomicU64::new(0);

fn detached() -> MutexGuard<'static, BTreeMap<(Instant, u64), Session>> {
    DETACHED
        .get(|| Mutex::new(BTreeMap::new()))
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Keeps `session`, which holds a detached lease's lock, open until `deadline` (the lease's local
/// deadline) plus `drift` (the allowance taken off it) and [`DETACHED_MARGIN`]: by then the server has
/// ended it at its idle timeout.
pub(crate) fn keep_detached(session: Session, deadline: Instant, drift: Duration) {
    let until = deadline
        .checked_add(drift.saturating_add(DETACHED_MARGIN))
        .unwrap_or(deadline);
    let seq = DETACHED_SEQ.fetch_add(1, Ordering::Relaxed);
    detached().insert((until, seq), session);
    reap_detached();
}

/// Closes the sessions of detached leases whose time is up.
pub(crate) fn reap_detached() {
    let now = Instant::now();
    let due = {
        let mut kept = detached();
        match kept.first_key_value() {
            Some((&(until, _), _)) if until <= now => {
                let later = kept.split_off(&(now, u64::MAX));
                std::mem::replace(&mut *kept, later)
            }
            _ => return,
        }
    };
    // Closed outside the lock, each without a grace period: the call reaping them is bounded.
    for session in due.into_values() {
        session.close_at_once();
    }
}

/// Sessions of detached leases kept open now in this process.
#[cfg(test)]
pub(crate) fn detached_sessions() -> usize {
    detached().len()
}

impl Drop for Session {
    fn drop(&mut self) {
        // Before anything may close the socket.
        self.unwatch();
        let client = self.client.take();
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        drop(client);
        if let (false, Some(driver)) = (self.timed_out, self.driver.take()) {
            // With the client gone the connection task sends Terminate and ends: give it a moment.
            let grace = CLOSE_GRACE.min(self.io_timeout);
            runtime.block_on(async move {
                let _ = tokio::time::timeout(grace, driver).await;
            });
        }
        // Never blocks, whatever the connection task is waiting for.
        runtime.shutdown_background();
    }
}

fn is_fatal(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        let c = c.code();
        c.starts_with("57P") || c.starts_with("08")
    })
}

pub(crate) struct SessionManager {
    config: tokio_postgres::Config,
    tls: Tls,
    setup: String,
    /// Whether new sessions get `setup` now (see [`SessionSettings::Later`]).
    apply_setup: AtomicBool,
    io_timeout: Duration,
}

impl ManageConnection for SessionManager {
    type Connection = Session;
    type Error = ConnectError;

    fn connect(&self, budget: Duration) -> Result<Session, ConnectError> {
        let budget = match self.config.get_connect_timeout() {
            Some(given) if !given.is_zero() => budget.min(*given),
            _ => budget,
        };
        let deadline = Deadline::after(budget);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| ConnectError::Other(format!("cannot build a tokio runtime: {e}")))?;
        let (tx, notifications) = mpsc::unbounded_channel();
        let client = runtime.block_on(async {
            match tokio::time::timeout(budget, self.open(deadline, tx)).await {
                Ok(outcome) => outcome,
                Err(_) => Err(ConnectError::TimedOut(budget)),
            }
        });
        let (client, driver, fd) = match client {
            Ok(opened) => opened,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e);
            }
        };
        let mut session = Session {
            client: Some(client),
            runtime: Some(runtime),
            notifications,
            prepared: Default::default(),
            driver: Some(driver),
            io_timeout: self.io_timeout,
            poisoned: false,
            unlisten: None,
            reused: false,
            timed_out: false,
            fd,
            watch: None,
        };
        if self.apply_setup.load(Ordering::Relaxed) && !self.setup.is_empty() {
            session
                .rows_within(&self.setup, deadline.remaining())
                .map_err(|e| match e {
                    Failure::Pg(e) => ConnectError::Pg(e),
                    Failure::TimedOut(_) => ConnectError::TimedOut(budget),
                    Failure::Closed => ConnectError::Other("the connection closed".into()),
                })?;
        }
        Ok(session)
    }

    fn has_broken(&self, session: &mut Session) -> bool {
        session.poisoned || session.is_closed()
    }

    /// A refused certificate, a failed login or a missing database stays so until someone changes
    /// the configuration; a refused or silent connect (a restart) may not.
    fn is_permanent(&self, error: &ConnectError) -> bool {
        let ConnectError::Pg(e) = error else {
            return false;
        };
        if let Some(code) = e.code() {
            let code = code.code();
            return code.starts_with("28") || code == "3D000";
        }
        std::error::Error::source(e).is_some_and(|cause| cause.is::<crate::tls::TlsError>())
    }
}

impl SessionManager {
    /// Opens the connection to the first host that answers and spawns its driver task.
    async fn open(
        &self,
        deadline: Deadline,
        tx: mpsc::UnboundedSender<Notification>,
    ) -> Result<Opened, ConnectError> {
        let hosts = self.config.get_hosts();
        let hostaddrs = self.config.get_hostaddrs();
        let ports = self.config.get_ports();
        let count = hosts.len().max(hostaddrs.len());
        let mut last = ConnectError::Other("no host to connect to".into());
        for i in 0..count {
            let port = ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432);
            let outcome = match (hostaddrs.get(i), hosts.get(i)) {
                (Some(ip), host) => {
                    // TLS checks the host name when the URL gives one beside hostaddr.
                    let name = match host {
                        Some(Host::Tcp(name)) => name.clone(),
                        _ => ip.to_string(),
                    };
                    self.open_tcp(&[SocketAddr::new(*ip, port)], &name, tx.clone())
                        .await
                }
                (None, Some(Host::Tcp(name))) => {
                    // Names resolve on a thread of core's under the deadline, never on tokio's
                    // blocking pool (unbounded, and threads of its own).
                    match leasehold_core::resolve::resolve(name, port, deadline) {
                        Ok(addrs) => self.open_tcp(&addrs, name, tx.clone()).await,
                        Err(e) => Err(ConnectError::Other(e.to_string())),
                    }
                }
                (None, Some(Host::Unix(dir))) => {
                    let path = dir.join(format!(".s.PGSQL.{port}"));
                    // As libpq: no TLS over a Unix socket, whatever sslmode says.
                    let mut plain = self.config.clone();
                    plain.ssl_mode(SslMode::Disable);
                    match tokio::net::UnixStream::connect(&path).await {
                        Ok(stream) => {
                            let fd = stream.as_raw_fd();
                            self.handshake(&plain, stream, fd, Connector::plain(), tx.clone())
                                .await
                        }
                        Err(e) => Err(ConnectError::Other(format!("{}: {e}", path.display()))),
                    }
                }
                (None, None) => continue,
            };
            match outcome {
                Ok(client) => return Ok(client),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn open_tcp(
        &self,
        addrs: &[SocketAddr],
        host: &str,
        tx: mpsc::UnboundedSender<Notification>,
    ) -> Result<Opened, ConnectError> {
        let connector = || self.tls.connector(host).map_err(ConnectError::Other);
        let mut last = ConnectError::Other("the host has no addresses".into());
        for addr in addrs {
            let stream = match tokio::net::TcpStream::connect(addr).await {
                Ok(s) => s,
                Err(e) => {
                    last = ConnectError::Other(format!("{addr}: {e}"));
                    continue;
                }
            };
            if let Err(e) = self.tune(&stream) {
                last = ConnectError::Other(format!("{addr}: setting socket options: {e}"));
                continue;
            }
            let fd = stream.as_raw_fd();
            match self
                .handshake(&self.config, stream, fd, connector()?, tx.clone())
                .await
            {
                Ok(client) => return Ok(client),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// TCP_NODELAY, keepalives and `tcp_user_timeout` as the configuration says, as libpq would.
    fn tune(&self, stream: &tokio::net::TcpStream) -> std::io::Result<()> {
        stream.set_nodelay(true)?;
        let socket = socket2::SockRef::from(stream);
        if self.config.get_keepalives() {
            let mut keepalive =
                socket2::TcpKeepalive::new().with_time(self.config.get_keepalives_idle());
            if let Some(interval) = self.config.get_keepalives_interval() {
                keepalive = keepalive.with_interval(interval);
            }
            if let Some(retries) = self.config.get_keepalives_retries() {
                keepalive = keepalive.with_retries(retries);
            }
            socket.set_tcp_keepalive(&keepalive)?;
        }
        if let Some(timeout) = self.config.get_tcp_user_timeout() {
            socket.set_tcp_user_timeout(Some(*timeout))?;
        }
        Ok(())
    }

    async fn handshake<S>(
        &self,
        config: &tokio_postgres::Config,
        stream: S,
        fd: RawFd,
        tls: Connector,
        tx: mpsc::UnboundedSender<Notification>,
    ) -> Result<Opened, ConnectError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (client, connection) = config
            .connect_raw(stream, tls)
            .await
            .map_err(ConnectError::Pg)?;
        let driver = tokio::spawn(drive(connection, tx));
        Ok((client, driver, fd))
    }
}

/// The client, the task that drives its connection, and the connection's socket.
type Opened = (Client, tokio::task::JoinHandle<()>, RawFd);

/// Runs the connection (it only makes progress while a call is in `block_on`), forwarding
/// LISTEN notifications to the session.
async fn drive<S, T>(mut connection: Connection<S, T>, tx: mpsc::UnboundedSender<Notification>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) => {
                let _ = tx.send(n);
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::debug!(error = %e, "PostgreSQL connection failed");
                return;
            }
            None => return,
        }
    }
}

/// Why a session could not be opened.
#[derive(Debug)]
pub(crate) enum ConnectError {
    Pg(tokio_postgres::Error),
    TimedOut(Duration),
    Other(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Pg(e) => f.write_str(&describe_pg(e)),
            ConnectError::TimedOut(d) => write!(
                f,
                "no answer from the server within {} ms (connect, startup and setup)",
                d.as_millis()
            ),
            ConnectError::Other(s) => f.write_str(s),
        }
    }
}

pub(crate) type Conn = PooledConnection<SessionManager>;

/// Whether a pool's sessions get the session settings (advisory mode's statement bounds and the
/// server-side TCP settings) when they open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionSettings {
    /// Never (table mode: nothing is left on a session).
    None,
    /// From the first session on.
    Now,
    /// Once [`Pools::begin_session_settings`] says so: until then it is not known whether they
    /// may be set (a transaction pooler would hand them to other clients).
    Later,
}

pub(crate) struct Pools {
    pool: Pool<SessionManager>,
    size: u32,
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    pub secrets: Vec<String>,
    /// How long either side may go without hearing from the other before it ends the session (and
    /// with it the session's advisory locks): the server's [`SERVER_DEAD_PEER`], or the client
    /// socket's own give-up time when the connection string makes that shorter.
    pub dead_peer: Duration,
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pools")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Pools {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        connection: &str,
        connect_timeout: Duration,
        io_timeout: Duration,
        size: u32,
        secrets: Vec<String>,
        session_settings: SessionSettings,
        tls: Tls,
        password: Option<&str>,
    ) -> Result<Pools> {
        let mut config: tokio_postgres::Config =
            connection.parse().map_err(|e: tokio_postgres::Error| {
                Error::invalid(format!(
                    "bad PostgreSQL connection parameters: {}",
                    describe_pg(&e)
                ))
                .redacted(&secrets)
            })?;
        let given = |name: &str| {
            connection
                .split_once('?')
                .is_some_and(|(_, q)| q.split('&').any(|p| p.split('=').next() == Some(name)))
                || connection
                    .split_whitespace()
                    .any(|p| p.split('=').next() == Some(name))
        };
        config.ssl_mode(match tls.mode {
            PostgresSslMode::Disable => SslMode::Disable,
            PostgresSslMode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        });
        if let Some(password) = password {
            config.password(password);
        }
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
            // The server's own: a client socket that gave up sooner (one unanswered keepalive probe,
            // with a timeout as short as a call's) would reset the session once the network is back,
            // and the server would free the advisory locks of a holder that still relies on them.
            // Calls are bounded by their own deadlines, not by this.
            config.tcp_user_timeout(SERVER_DEAD_PEER);
        }
        let dead_peer = SERVER_DEAD_PEER.min(client_dead_peer(&config));
        if !given("application_name") {
            config.application_name("leasehold");
        }
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            // libpq's default.
            config.host("localhost");
        }
        let io_ms = io_timeout.as_millis().max(1);
        // Defaults for every statement of a session that holds advisory locks; calls that wait set
        // their own with SET LOCAL. The server-side TCP settings make the server notice a dead client
        // in seconds, not hours, and so free its locks.
        let setup = if session_settings == SessionSettings::None {
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
        // Sessions are opened on demand; a stale one (server restarted) is found by the statement
        // itself and retried on a fresh one, since a test query per checkout would cost a round trip
        // per call. The pool itself leaves a parent's sessions alone in a child after fork().
        let pool = Pool::new(
            SessionManager {
                config,
                tls,
                setup,
                apply_setup: (session_settings == SessionSettings::Now).into(),
                io_timeout,
            },
            size,
        );
        Ok(Pools {
            pool,
            size,
            connect_timeout,
            io_timeout,
            secrets,
            dead_peer,
        })
    }

    /// Until when a session that answered a request sent at `contact` is sure to be alive, and its
    /// advisory locks held: [`Pools::dead_peer`] later, less 2 % for the timers' slack.
    pub fn alive_until(&self, contact: Instant) -> Instant {
        let window = self.dead_peer.saturating_sub(self.dead_peer / 50);
        contact.checked_add(window).unwrap_or(contact)
    }

    /// The deadline of a call that does not wait.
    pub fn call(&self) -> Deadline {
        Deadline::for_call(self.connect_timeout, self.io_timeout)
    }

    /// A session from the pool, by `deadline`.
    pub fn get(&self, deadline: Deadline) -> Result<Conn> {
        let started = std::time::Instant::now();
        reap_detached();
        self.pool.get(deadline).map_err(|e| match e {
            PoolError::Connect(cause) => self.unavailable(format!(
                "cannot open a PostgreSQL session within {} ms: {cause}",
                started.elapsed().as_millis()
            )),
            _ => self.unavailable(format!(
                "no PostgreSQL session within {} ms: all {} sessions of the pool are held by \
                 leases and waiters (raise pool_size)",
                started.elapsed().as_millis(),
                self.size
            )),
        })
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Gives sessions opened from now on the session settings ([`SessionSettings::Later`]), and
    /// `session`, opened before, too.
    pub fn begin_session_settings(
        &self,
        session: &mut Session,
        deadline: Deadline,
    ) -> Result<(), Failure> {
        let manager = self.pool.manager();
        manager.apply_setup.store(true, Ordering::Relaxed);
        if manager.setup.is_empty() {
            return Ok(());
        }
        session.rows(&manager.setup, deadline).map(drop)
    }

    /// A session of this pool's kind opened outside the pool, by `deadline`, closed when dropped:
    /// for a look at the server that must not take a place in the pool (a pooler probe).
    pub fn open_apart(&self, deadline: Deadline) -> Result<Session> {
        self.pool
            .manager()
            .connect(deadline.remaining())
            .map_err(|e| self.unavailable(format!("cannot open a PostgreSQL session: {e}")))
    }

    /// `error` with every secret of the configuration masked in its message.
    pub fn redacted(&self, error: Error) -> Error {
        error.redacted(&self.secrets)
    }

    pub fn unavailable(&self, msg: impl std::fmt::Display) -> Error {
        Error::unavailable(msg, &self.secrets)
    }

    /// `Unavailable` for a failed statement.
    pub fn failed(&self, what: &str, e: &Failure) -> Error {
        self.unavailable(format!("PostgreSQL {what} failed: {}", describe(e)))
    }
}

/// A failure as one line: the server's message and SQLSTATE, the client-side cause, or the timeout.
pub(crate) fn describe(e: &Failure) -> String {
    match e {
        Failure::Pg(e) => describe_pg(e),
        Failure::TimedOut(d) => format!(
            "no answer within {} ms (the session is closed and not reused)",
            d.as_millis()
        ),
        Failure::Closed => "the session's connection closed".into(),
    }
}

fn describe_pg(e: &tokio_postgres::Error) -> String {
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
