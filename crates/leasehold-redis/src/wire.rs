//! A connection of our own to one server (TCP, TLS over TCP, or a Unix socket), whose every read
//! and write draws on the current call's deadline.
//!
//! Why not redis-rs's synchronous `Connection`: its socket timeout applies to each `read` on its
//! own, and a reply is read with as many `read`s as it takes. A server (or a proxy) that answers one
//! byte every 200 ms never lets a single `read` time out, so a call with a 500 ms I/O timeout ran
//! for seconds (a connect with its script loads, for minutes), and redis-rs gives no access to its
//! socket between those reads. Here no `read` or `write` of the socket may run past what is left of
//! the call ([`Wire::set_budget`]; the socket's timeout is shortened when it would), TLS records
//! and handshake included, so a call ends by its deadline, give or take a few milliseconds, however
//! the bytes trickle in. Replies are parsed by redis-rs's own parser, and the type implements
//! `ConnectionLike`, so commands, scripts and pipelines are built and read exactly as before. TLS is
//! rustls, configured as redis-rs configured it (see `connection`).

use redis::{
    ConnectionLike, ErrorKind, Parser, RedisConnectionInfo, RedisError, RedisResult,
    ServerErrorKind, Value,
};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use rustls::{ClientConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

enum Plain {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// How far past its deadline a call may end, so that the socket's timeouts need a system call only
/// when they would let a read or write run later than that: once per call at most when the call's
/// budget changes, and none at all on a fast call whose budget is the usual I/O timeout.
const SLACK: Duration = Duration::from_millis(5);

/// A socket timeout as it is set now (`None`: not set yet), for one direction.
#[derive(Default)]
struct Timeout(Option<Duration>);

impl Timeout {
    /// Makes the timeout `want` unless it is within [`SLACK`] of it already.
    fn set_to(
        &mut self,
        want: Duration,
        set: impl FnOnce(Duration) -> io::Result<()>,
    ) -> io::Result<()> {
        let close = self.0.is_some_and(|t| t.max(want) - t.min(want) <= SLACK);
        if !close {
            set(want)?;
            self.0 = Some(want);
        }
        Ok(())
    }

    /// Shortens the timeout to what is left until `deadline` if it would otherwise end more than
    /// [`SLACK`] past it.
    fn fit(
        &mut self,
        deadline: Instant,
        set: impl FnOnce(Duration) -> io::Result<()>,
    ) -> io::Result<()> {
        let left = left(deadline)?;
        if self.0.is_none_or(|t| t > left.saturating_add(SLACK)) {
            set(left)?;
            self.0 = Some(left);
        }
        Ok(())
    }
}

/// A socket none of whose reads and writes may end later than the current call's deadline (plus
/// [`SLACK`]). TLS runs on top of it, so each of the socket reads one TLS record takes is bounded
/// too.
struct Sock {
    plain: Plain,
    deadline: Instant,
    read_timeout: Timeout,
    write_timeout: Timeout,
}

impl Sock {
    fn new(plain: Plain, deadline: Instant) -> Sock {
        Sock {
            plain,
            deadline,
            read_timeout: Timeout::default(),
            write_timeout: Timeout::default(),
        }
    }

    fn set_budget(&mut self, budget: Duration) -> io::Result<()> {
        let now = Instant::now();
        self.deadline = now.checked_add(budget).unwrap_or(now);
        // The socket's timeouts start at the whole budget (a system call only when it changed).
        let plain = &self.plain;
        self.read_timeout.set_to(budget, |d| match plain {
            Plain::Tcp(s) => s.set_read_timeout(Some(d)),
            Plain::Unix(s) => s.set_read_timeout(Some(d)),
        })?;
        self.write_timeout.set_to(budget, |d| match plain {
            Plain::Tcp(s) => s.set_write_timeout(Some(d)),
            Plain::Unix(s) => s.set_write_timeout(Some(d)),
        })
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let plain = &self.plain;
        self.read_timeout.fit(self.deadline, |d| match plain {
            Plain::Tcp(s) => s.set_read_timeout(Some(d)),
            Plain::Unix(s) => s.set_read_timeout(Some(d)),
        })?;
        match &mut self.plain {
            Plain::Tcp(s) => s.read(buf),
            Plain::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let plain = &self.plain;
        self.write_timeout.fit(self.deadline, |d| match plain {
            Plain::Tcp(s) => s.set_write_timeout(Some(d)),
            Plain::Unix(s) => s.set_write_timeout(Some(d)),
        })?;
        match &mut self.plain {
            Plain::Tcp(s) => s.write(buf),
            Plain::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Stream {
    Plain(Sock),
    Tls(Box<StreamOwned<ClientConnection, Sock>>),
}

impl Stream {
    fn sock(&mut self) -> &mut Sock {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &mut t.sock,
        }
    }

    fn deadline(&self) -> Instant {
        match self {
            Stream::Plain(s) => s.deadline,
            Stream::Tls(t) => t.sock.deadline,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(t) => t.flush(),
        }
    }
}

/// The time left until `deadline`, or the timeout error once it has passed (the socket refuses a
/// zero timeout, which would mean "none").
fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the call's timeout ran out before the server answered in full",
        ));
    }
    Ok(left)
}

/// One connection to one server: plain TCP, TLS over TCP, or a Unix socket.
pub(crate) struct Wire {
    stream: Stream,
    parser: Parser,
    /// False after an I/O or protocol error: the stream may be mid-reply, so it is never reused.
    open: bool,
    db: i64,
}

impl Wire {
    /// Connects to `addr` within what is left until `deadline`, then authenticates and selects the
    /// database, still by `deadline`.
    pub(crate) fn tcp(
        addr: SocketAddr,
        info: &RedisConnectionInfo,
        deadline: Instant,
    ) -> RedisResult<Wire> {
        let sock = connect_tcp(addr, deadline)?;
        Wire::set_up(Stream::Plain(sock), info, deadline)
    }

    /// Like [`Wire::tcp`], with a TLS handshake (certificate checked against `name` as `config`
    /// says) in between, bounded by `deadline` like every read and write after it.
    pub(crate) fn tls(
        addr: SocketAddr,
        name: &str,
        config: Arc<ClientConfig>,
        info: &RedisConnectionInfo,
        deadline: Instant,
    ) -> RedisResult<Wire> {
        let sock = connect_tcp(addr, deadline)?;
        let server_name = ServerName::try_from(name.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is not a valid TLS server name: {e}"),
            )
        })?;
        let conn = ClientConnection::new(config, server_name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut tls = StreamOwned::new(conn, sock);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock)?;
        }
        Wire::set_up(Stream::Tls(Box::new(tls)), info, deadline)
    }

    /// Connects to the Unix socket at `path` (a local connect does not wait), then sets up as
    /// [`Wire::tcp`] does.
    pub(crate) fn unix(
        path: &str,
        info: &RedisConnectionInfo,
        deadline: Instant,
    ) -> RedisResult<Wire> {
        let stream = UnixStream::connect(path)?;
        let sock = Sock::new(Plain::Unix(stream), deadline);
        Wire::set_up(Stream::Plain(sock), info, deadline)
    }

    fn set_up(stream: Stream, info: &RedisConnectionInfo, deadline: Instant) -> RedisResult<Wire> {
        let _ = deadline; // the stream's socket carries it
        let mut wire = Wire {
            stream,
            parser: Parser::new(),
            open: true,
            db: info.db(),
        };
        if let Some(password) = info.password() {
            // As redis-rs does: a server older than ACLs (Redis < 6) refuses AUTH with a user name
            // by its argument count; it is asked again with the password alone.
            let with_user = auth(info.username(), password);
            if !authenticated(wire.req_command(&with_user)?)? {
                let reply = wire.req_command(&auth(None, password))?;
                if !authenticated(reply)? {
                    return Err(auth_failed());
                }
            }
        }
        if info.db() != 0 {
            match wire.req_command(redis::cmd("SELECT").arg(info.db()))? {
                Value::Okay => {}
                Value::ServerError(e) => return Err(e.into()),
                _ => {
                    return Err(RedisError::from((
                        ServerErrorKind::ResponseError.into(),
                        "Redis server refused to switch database",
                    )))
                }
            }
        }
        Ok(wire)
    }

    /// Bounds the call about to be made to `budget` from now: every read and write of it draws on
    /// that.
    pub(crate) fn set_budget(&mut self, budget: Duration) -> RedisResult<()> {
        Ok(self.stream.sock().set_budget(budget)?)
    }

    /// What is left of the current call.
    pub(crate) fn remaining(&self) -> Duration {
        self.stream
            .deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Sends `bytes` without reading a reply.
    pub(crate) fn send(&mut self, bytes: &[u8]) -> RedisResult<()> {
        // TLS buffers what it is given: the flush makes it go out (and reports a failure) now.
        let sent = write_all(&mut self.stream, bytes).and_then(|()| self.stream.flush());
        if sent.is_err() {
            self.open = false;
        }
        Ok(sent?)
    }

    /// Reads one reply (an error reply is a value, as redis-rs gives it).
    pub(crate) fn recv(&mut self) -> RedisResult<Value> {
        let reply = self.parser.parse_value(&mut self.stream);
        if reply.is_err() {
            // Cut off mid-reply or out of step: what is left on the socket belongs to nobody.
            self.open = false;
        }
        reply
    }
}

fn write_all(stream: &mut Stream, mut rest: &[u8]) -> io::Result<()> {
    while !rest.is_empty() {
        match stream.write(rest) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn connect_tcp(addr: SocketAddr, deadline: Instant) -> io::Result<Sock> {
    let stream = TcpStream::connect_timeout(&addr, left(deadline)?)?;
    // Every call is one small request and one small reply: never let Nagle hold one back.
    stream.set_nodelay(true)?;
    Ok(Sock::new(Plain::Tcp(stream), deadline))
}

impl ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send(cmd)?;
        self.recv()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send(cmd)?;
        let mut replies = Vec::with_capacity(count);
        for i in 0..offset + count {
            let reply = self.recv()?;
            if i >= offset {
                replies.push(reply);
            }
        }
        Ok(replies)
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

fn auth(username: Option<&str>, password: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("AUTH");
    if let Some(user) = username {
        cmd.arg(user);
    }
    cmd.arg(password);
    cmd
}

/// `true` when AUTH succeeded, `false` when it should be tried without a user name; otherwise the
/// error redis-rs gives (the server's words are not kept: they could echo the password).
fn authenticated(reply: Value) -> RedisResult<bool> {
    match reply {
        Value::Okay => Ok(true),
        Value::ServerError(e)
            if e.details()
                .is_some_and(|d| d.contains("wrong number of arguments for 'auth' command")) =>
        {
            Ok(false)
        }
        _ => Err(auth_failed()),
    }
}

fn auth_failed() -> RedisError {
    RedisError::from((
        ErrorKind::AuthenticationFailed,
        "Password authentication failed",
    ))
}
