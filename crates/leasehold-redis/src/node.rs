//! One Redis server as Leasehold uses it: a pool for lease operations, a second pool for waiters
//! blocked in `BLPOP`, and the scripts. The single-server backend is one node; Redlock is N of
//! them.
//!
//! Every call is bounded by the operation's one [`Deadline`]: the pool checkout, the connect, a
//! resend on a fresh connection after a stale one and the command itself all take only what is left
//! of it (a command gets the I/O timeout, or less near the deadline, for all of its reads and
//! writes together, however slowly the reply comes; a `BLPOP` gets its block time on top, within
//! the same deadline).

use crate::connection::{Conn, ConnectSettings, Manager};
use crate::errors::{breaks_connection, from_pool, from_redis, is_dropped};
use crate::eviction::Screen;
use crate::keys::RedisKeys;
use crate::scripts::{ACQUIRE_SCRIPT, ALL, EXTEND_SCRIPT, RELEASE_SCRIPT};
use crate::wire::Wire;
use leasehold_core::config::RedisServer;
use leasehold_core::pool::{ManageConnection, Pool, PooledConnection};
use leasehold_core::retry::Retry;
use leasehold_core::{Deadline, Error, Result, Secrets, Token, Ttl};
use redis::{
    from_redis_value, ConnectionLike, ErrorKind, FromRedisValue, RedisError, RedisResult, Script,
    ServerErrorKind, Value,
};
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The outcome of one acquire script run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Attempt {
    /// Taken, with this fence.
    Acquired(u64),
    /// Held by someone else, whose lease has this much left (`None`: the key has no expiry, which
    /// only a foreign writer can cause).
    Held(Option<Duration>),
    /// Free, but reserved for the waiter at the head of the queue.
    Reserved,
}

/// How an acquire attempt treats the waiters' queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Mode {
    /// One attempt: refused while the key is held or reserved; never queues.
    Try,
    /// An attempt of a waiting `acquire`: refused, it joins the queue (or renews its heartbeat
    /// there); the queue entry lapses `waiter_ttl` after the last attempt. While `grant_within`
    /// has not passed since the attempt reached the server, a release may hand the key straight
    /// to this waiter (see [`Signal::Granted`]); zero: never.
    Wait {
        waiter_ttl: Duration,
        grant_within: Duration,
    },
    /// The final attempt of a waiting `acquire`: refused, it leaves the queue.
    Last,
}

/// What a blocked waiter learned from its signal list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Signal {
    /// The block time ran out (or the wait could not start): try again.
    TimedOut,
    /// Woken: the key was freed or its holder changed; try again.
    Woken,
    /// A release handed the key over: this waiter's token holds it now, with this fence and the
    /// waiter's own TTL, counted on the server from some moment after the waiter's latest attempt
    /// reached it.
    Granted(u64),
}

pub(crate) struct Node {
    /// `host:port`, for messages.
    name: String,
    pool: Pool<Manager>,
    /// Waiters block here, so however many wait, lease operations (including the release that will
    /// wake them) never queue behind them.
    waiters: Pool<Manager>,
    generation: Arc<AtomicU64>,
    /// Makes the one-off connection of [`Node::check`], outside the pools.
    probe: Manager,
    settings: ConnectSettings,
    secrets: Secrets,
    blocks_fractionally: bool,
    /// How long the fence high-water (Redlock: a key's fence counter) is kept after the last
    /// acquisition that drew from it (see the crate docs).
    fence_retention: Duration,
    /// `replicas=N` and its `WAIT` timeout (see [`Node::set_replicas`]).
    replicas: u32,
    replicas_timeout: Duration,
    /// How many replicas the last `WAIT` reported (-1: none yet), for `leasehold status`.
    last_acked: AtomicI64,
    /// Whether the server may evict lock keys (see `eviction.rs`).
    screen: Screen,
}

/// How long the fence high-water (Redlock: a key's counter) outlives the last acquisition that drew
/// from it: with no acquisition for that long, the clock alone orders the next fence (see the
/// crate docs).
pub(crate) const DEFAULT_FENCE_RETENTION: Duration = Duration::from_secs(24 * 3600);

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("server", &self.name)
            .field("tls", &self.settings.tls)
            .field("connect_timeout", &self.settings.connect_timeout)
            .field("io_timeout", &self.settings.io_timeout)
            .finish_non_exhaustive()
    }
}

/// Why a call failed, as far as routing cares (see `topology.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Hint {
    /// Nothing a new route could fix (a bug, a refused ACL, the operation's deadline).
    None,
    /// A Cluster node says the slot lives at `host:port` now (`MOVED`).
    Moved(String),
    /// A Cluster node says to ask `host:port` this once, the slot being migrated (`ASK`).
    Ask(String),
    /// The node is unreachable, hung, or no longer the master (`READONLY`, `MASTERDOWN`,
    /// `CLUSTERDOWN`, `TRYAGAIN`, `LOADING`): look for the master again.
    Reroute,
}

pub(crate) struct Failure {
    pub(crate) error: Error,
    /// No connection within the checkout time.
    checkout: bool,
    /// No answer within the read timeout.
    timed_out: bool,
    /// The server closed the connection.
    dropped: bool,
    pub(crate) hint: Hint,
}

impl Failure {
    pub(crate) fn into_error(self) -> Error {
        self.error
    }

    pub(crate) fn from_error(error: Error) -> Failure {
        Failure {
            error,
            checkout: false,
            timed_out: false,
            dropped: false,
            hint: Hint::None,
        }
    }
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Error {
        f.error
    }
}

/// How a call is sent: plainly, or (Cluster, a slot being migrated) after `ASKING`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Via {
    pub(crate) asking: bool,
}

/// One script call: EVALSHA (loading the script on NOSCRIPT, on whichever node answers), after
/// `ASKING` if asked to, and followed in the same round trip by `WAIT` when replicas must
/// acknowledge it. The keys and arguments are written once, straight into their wire form (RESP
/// bulk strings), so a call costs one buffer rather than a vector per argument and a command
/// copied twice.
pub(crate) struct ScriptCall<'a> {
    script: &'a Script,
    keys: usize,
    args: usize,
    /// The keys, then the arguments, as RESP bulk strings.
    body: Vec<u8>,
}

/// What a script call takes as an argument.
pub(crate) trait Arg {
    fn write_to(&self, out: &mut Vec<u8>);
}

/// Bytes of any form (`&[u8]`, `&Vec<u8>`, `&str`): each goes as its bytes, so one impl serves.
impl<T: AsRef<[u8]> + ?Sized> Arg for &T {
    fn write_to(&self, out: &mut Vec<u8>) {
        bulk(out, (*self).as_ref());
    }
}

impl Arg for u64 {
    fn write_to(&self, out: &mut Vec<u8>) {
        let mut digits = [0u8; 20];
        bulk(out, decimal(*self, &mut digits));
    }
}

/// `n` in decimal, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        // `n % 10` is below 10: the cast cannot truncate.
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// A RESP bulk string: `$len\r\nbytes\r\n`.
fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut digits = [0u8; 20];
    out.push(b'$');
    out.extend_from_slice(decimal(bytes.len() as u64, &mut digits));
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

impl<'a> ScriptCall<'a> {
    pub(crate) fn new(script: &'a Script) -> Self {
        ScriptCall {
            script,
            keys: 0,
            args: 0,
            body: Vec::with_capacity(512),
        }
    }

    /// The script's KEYS, in order, before any argument: one list, so a call's keys stand on one
    /// line.
    pub(crate) fn keys<const N: usize>(self, keys: [&[u8]; N]) -> Self {
        self.key_list(&keys)
    }

    /// [`ScriptCall::keys`] for a list whose length is known only at run time.
    pub(crate) fn key_list(mut self, keys: &[&[u8]]) -> Self {
        debug_assert_eq!(self.args, 0, "a key after an argument");
        for key in keys {
            bulk(&mut self.body, key);
            self.keys += 1;
        }
        self
    }

    pub(crate) fn arg(mut self, arg: impl Arg) -> Self {
        arg.write_to(&mut self.body);
        self.args += 1;
        self
    }

    /// `EVALSHA sha numkeys keys… args…` in wire form, appended to `out`.
    fn write_evalsha(&self, out: &mut Vec<u8>) {
        let mut digits = [0u8; 20];
        out.push(b'*');
        out.extend_from_slice(decimal((3 + self.keys + self.args) as u64, &mut digits));
        out.extend_from_slice(b"\r\n$7\r\nEVALSHA\r\n");
        bulk(out, self.script.get_hash().as_bytes());
        bulk(out, decimal(self.keys as u64, &mut digits));
        out.extend_from_slice(&self.body);
    }

    /// The script's reply and, with `wait` (replicas, timeout ms), how many replicas acknowledged
    /// it.
    pub(crate) fn send<T: FromRedisValue>(
        &self,
        c: &mut Wire,
        via: Via,
        wait: Option<(u32, u64)>,
    ) -> RedisResult<(T, Option<i64>)> {
        let mut loaded = false;
        // The WAIT sent with this attempt: after a refused script, a shorter one or none.
        let mut wait_now = wait;
        loop {
            let mut packed = Vec::with_capacity(self.body.len() + 96);
            if via.asking {
                packed.extend_from_slice(b"*1\r\n$6\r\nASKING\r\n");
            }
            self.write_evalsha(&mut packed);
            if let Some((replicas, ms)) = wait_now {
                packed.extend(
                    redis::cmd("WAIT")
                        .arg(replicas)
                        .arg(ms)
                        .get_packed_command(),
                );
            }
            let count = 1 + usize::from(via.asking) + usize::from(wait_now.is_some());
            let reply = if count == 1 {
                // The common case: one reply, no vector of them.
                c.req_packed_command(&packed)
                    .and_then(|v| ok(Some(v)))
                    .map(|v| (v, None))
            } else {
                let mut replies = c.req_packed_commands(&packed, 0, count)?.into_iter();
                if via.asking {
                    ok(replies.next())?;
                }
                ok(replies.next()).map(|v| (v, Some(replies)))
            };
            match reply {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) && !loaded => {
                    // Flushed or never loaded on this node (a Cluster node, a promoted replica):
                    // load it and send again (an `ASK` target gets `ASKING` again too).
                    self.script.load(c)?;
                    loaded = true;
                    // The WAIT sent behind the refused script still waited, for nothing. The
                    // resend's gets only what is left of the call, less one server timer tick
                    // (a WAIT ends on the server's timer), so the call still ends within its
                    // bound; with no room for one, the write goes unconfirmed (and is given
                    // back by the caller).
                    if let Some((replicas, ms)) = wait_now {
                        let left = c.remaining();
                        let room = left.saturating_sub(SERVER_TIMER_SLACK);
                        wait_now = (!room.is_zero()).then(|| (replicas, ms.min(millis(room))));
                    }
                }
                Err(e) => return Err(e),
                Ok((value, mut rest)) => {
                    let acked = match (wait_now, rest.as_mut()) {
                        (Some(_), Some(rest)) => Some(from_redis_value::<i64>(ok(rest.next())?)?),
                        // Asked for, but no time was left to wait for replicas: none confirmed.
                        _ if wait.is_some() => Some(0),
                        _ => None,
                    };
                    return Ok((from_redis_value::<T>(value)?, acked));
                }
            }
        }
    }
}

/// One reply of a pipeline, an error reply turned into an error.
fn ok(reply: Option<Value>) -> RedisResult<Value> {
    match reply {
        Some(Value::ServerError(e)) => Err(e.into()),
        Some(v) => Ok(v),
        None => Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "a reply is missing from the pipeline",
        ))),
    }
}

/// A public call of [`Node`]: its crate-private form (`…_via`, `…_routed`, which keeps what routing
/// needs to know about a failure) with these arguments and any given after `;` (`Via::default()`:
/// sent plainly), its failure as a plain [`Error`]. A macro so that each parameter list stands once.
macro_rules! plain {
    ($(#[$doc:meta])* $name:ident = $inner:ident($($arg:ident: $ty:ty),* $(; $extra:expr)?) -> $out:ty) => {
        $(#[$doc])*
        pub(crate) fn $name(&self, $($arg: $ty),*) -> Result<$out> {
            self.$inner($($arg,)* $($extra)?).map_err(Failure::into_error)
        }
    };
}

#[cfg(test)]
impl Node {
    /// A node on `server` with short timeouts, for this crate's unit tests.
    pub(crate) fn for_test(server: &leasehold_testkit::RedisServer) -> Node {
        let config = leasehold_core::Config::parse(&server.url()).unwrap();
        let leasehold_core::BackendConfig::Redis {
            server: address, ..
        } = &config.backend
        else {
            unreachable!()
        };
        let settings = ConnectSettings {
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            tls: None,
            allow_eviction: false,
        };
        Node::connect(address, settings, 2, Default::default()).unwrap()
    }
}

impl Node {
    /// Builds the pools and checks that the server answers (and accepts our credentials), so a dead
    /// host or a wrong password is reported here, within about the connect timeout.
    pub(crate) fn connect(
        server: &RedisServer,
        settings: ConnectSettings,
        pool_size: u32,
        secrets: Secrets,
    ) -> Result<Node> {
        let deadline = Deadline::for_call(settings.connect_timeout, settings.io_timeout);
        let mut node = Node::unchecked(server, settings, pool_size, secrets)?;
        node.blocks_fractionally = node.check(deadline)?;
        Ok(node)
    }

    /// Builds the pools without talking to the server (only a malformed address fails here), for
    /// Redlock, which must start with a minority of its nodes down. Connections are made on first
    /// use; [`Node::check`] tests the server.
    ///
    /// A `server.host` starting with `/` is the path of a Unix socket (`redis+unix://`).
    pub(crate) fn unchecked(
        server: &RedisServer,
        settings: ConnectSettings,
        pool_size: u32,
        secrets: Secrets,
    ) -> Result<Node> {
        let name = if server.host.starts_with('/') {
            format!("unix:{}", server.host)
        } else {
            server.to_string()
        };
        let manager = Manager::new(server, settings.clone()).map_err(|e| {
            Error::invalid(leasehold_core::secret::redact(&e.to_string(), &secrets))
        })?;
        let generation = manager.generation();
        let make = || {
            Manager::new(server, settings.clone())
                .map(|m| m.with_generation(generation.clone()))
                .map_err(|e| {
                    Error::invalid(leasehold_core::secret::redact(&e.to_string(), &secrets))
                })
        };
        let waiter_manager = make()?;
        let probe = make()?;
        Ok(Node {
            probe,
            name,
            // Connections are made on demand: a backend nobody uses holds no server resources.
            pool: Pool::new(manager, pool_size),
            waiters: Pool::new(waiter_manager, pool_size),
            generation,
            secrets,
            blocks_fractionally: true,
            fence_retention: DEFAULT_FENCE_RETENTION,
            replicas: 0,
            replicas_timeout: Duration::ZERO,
            last_acked: AtomicI64::new(-1),
            screen: Screen::new(settings.allow_eviction),
            settings,
        })
    }

    /// How long the fence high-water and Redlock's counters are kept after their last draw (at
    /// least 1 ms).
    pub(crate) fn set_fence_retention(&mut self, retention: Duration) {
        self.fence_retention = retention.max(Duration::from_millis(1));
    }

    pub(crate) fn fence_retention(&self) -> Duration {
        self.fence_retention
    }

    /// `replicas=N`: an acquire or extend succeeds only once `WAIT N timeout` (sent in the same
    /// round trip as the script) confirms that `replicas` replicas have it; short of that, the
    /// lease is given back and the call is `Unavailable`. 0: no `WAIT`.
    pub(crate) fn set_replicas(&mut self, replicas: u32, timeout: Duration) {
        self.replicas = replicas;
        self.replicas_timeout = timeout.max(Duration::from_millis(1));
    }

    pub(crate) fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How many replicas acknowledged the last acquire or extend that waited for them.
    pub(crate) fn last_acknowledged(&self) -> Option<u32> {
        u32::try_from(self.last_acked.load(Ordering::Relaxed)).ok()
    }

    /// How much longer than a plain call an acquire or extend may take: the `WAIT`.
    pub(crate) fn replicas_allowance(&self) -> Duration {
        if self.replicas == 0 {
            Duration::ZERO
        } else {
            self.replicas_timeout
        }
    }

    /// Checks that the server answers, accepts our credentials and runs our scripts (loading them,
    /// so the first calls need no NOSCRIPT round trip). Returns whether it takes fractional `BLPOP`
    /// timeouts.
    pub(crate) fn check(&self, deadline: Deadline) -> Result<bool> {
        let left = deadline.check(&format!("redis {}: connect", self.name))?;
        // The check runs on a connection of its own rather than through the pool, whose checkout
        // would retry a refused connection or a wrong password until the connect timeout: the
        // caller learns at once, with the server's own reason.
        let mut first = self
            .probe
            .connect(left)
            .map_err(|e| from_redis(&e, "connect", &self.name, &self.secrets))?;
        // A TLS server refuses a missing client certificate, and a TLS-only one a plain-text
        // client, only once the first command is sent: these errors are explained too.
        first
            .bound_io(self.settings.io_timeout, deadline)
            .and_then(|()| load_scripts(&mut first.inner))
            .map_err(|e| {
                from_redis(&self.probe.explain(e), "connect", &self.name, &self.secrets)
            })?;
        // INFO may be denied by an ACL; a server that does not say is taken to be current, and
        // used whatever its eviction policy (see `eviction.rs`). Both sections in one round trip.
        let generation = first.generation;
        let screening = self.screen.needed(generation);
        let mut packed = redis::cmd("INFO").arg("server").get_packed_command();
        if screening {
            packed.extend(redis::cmd("INFO").arg("memory").get_packed_command());
        }
        let count = 1 + usize::from(screening);
        // Failed on the way (not refused): nothing is recorded, and the first call screens.
        let replies = first.inner.req_packed_commands(&packed, 0, count).ok();
        let text = |i: usize| {
            replies
                .as_ref()
                .and_then(|r| r.get(i))
                .and_then(|v| from_redis_value::<String>(v.clone()).ok())
        };
        if screening && replies.is_some() {
            if let Some(refusal) = self
                .screen
                .record(&self.name, generation, text(1).as_deref())
            {
                return Err(refusal);
            }
        }
        Ok(text(0)
            .and_then(|info| major_version(&info))
            .is_none_or(|major| major >= 6))
    }

    /// Reads `INFO memory` on `c`, a connection of `generation`, and records whether the server
    /// may evict lock keys (see `eviction.rs`). An error reply (INFO denied) counts as not saying;
    /// a failed connection fails the call it was made for.
    fn screen_on(&self, c: &mut Wire, generation: u64) -> RedisResult<()> {
        let info = match redis::cmd("INFO").arg("memory").query::<String>(c) {
            Ok(info) => Some(info),
            Err(e) if e.is_io_error() || e.is_timeout() || is_dropped(&e) => return Err(e),
            Err(_) => None,
        };
        self.screen.record(&self.name, generation, info.as_deref());
        Ok(())
    }

    /// The server's `run_id` (`INFO server`): it names one server process whatever address
    /// reached it. `None` when the server does not say (INFO denied by an ACL, a failed call).
    pub(crate) fn run_id(&self, deadline: Deadline) -> Option<String> {
        let info = self
            .run(&self.pool, "info", deadline, |c| {
                redis::cmd("INFO").arg("server").query::<String>(c)
            })
            .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_owned())
            .filter(|id| !id.is_empty())
    }

    /// Whether the server takes fractional `BLPOP` timeouts (Redis ≥ 6), which native waiting
    /// needs.
    pub(crate) fn blocks_fractionally(&self) -> bool {
        self.blocks_fractionally
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn settings(&self) -> &ConnectSettings {
        &self.settings
    }

    /// `ROLE`'s first word: `master`, `slave` or `sentinel`.
    pub(crate) fn role(&self, deadline: Deadline) -> std::result::Result<String, Failure> {
        self.run(&self.pool, "role", deadline, |c| {
            let reply: Value = redis::cmd("ROLE").query(c)?;
            match reply {
                Value::Array(items) => items
                    .into_iter()
                    .next()
                    .map(from_redis_value::<String>)
                    .transpose()?
                    .ok_or_else(|| {
                        RedisError::from((ErrorKind::UnexpectedReturnType, "empty ROLE"))
                    }),
                _ => Err(RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "ROLE is not an array",
                ))),
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire_via(
        &self,
        keys: &RedisKeys,
        token: &Token,
        ttl: Ttl,
        mode: Mode,
        signal_ttl: Duration,
        deadline: Deadline,
        via: Via,
    ) -> std::result::Result<Attempt, Failure> {
        let (mode, waiter_ttl, grant_within) = match mode {
            Mode::Try => ("try", Duration::from_millis(1), Duration::ZERO),
            Mode::Wait {
                waiter_ttl,
                grant_within,
            } => ("wait", waiter_ttl, grant_within),
            Mode::Last => ("last", Duration::from_millis(1), Duration::ZERO),
        };
        let call = ScriptCall::new(&ACQUIRE_SCRIPT)
            .keys([
                &keys.lock,
                &keys.fence,
                &keys.queue,
                &keys.heartbeats,
                &keys.high_water,
            ])
            .arg(token.as_str())
            .arg(ttl.as_millis())
            .arg(mode)
            .arg(millis(waiter_ttl))
            .arg(&keys.signal_prefix)
            .arg(&keys.signal_suffix)
            .arg(millis(signal_ttl))
            .arg(millis(self.fence_retention))
            .arg(u64::try_from(grant_within.as_millis()).unwrap_or(u64::MAX));
        let ((taken, value), acked): ((i64, i64), _) =
            self.confirmed("acquire", deadline, via, &call)?;
        if taken == 1 {
            let fence = u64::try_from(value)
                .ok()
                .filter(|f| *f >= 1)
                .ok_or_else(|| {
                    Failure::from_error(Error::Internal(format!(
                        "redis {}: fence counter gave {value}",
                        self.name
                    )))
                })?;
            self.check_acked(acked, "acquire", keys, token, signal_ttl, deadline, via)?;
            return Ok(Attempt::Acquired(fence));
        }
        Ok(match value {
            -3 => Attempt::Reserved,
            // No expiry: someone else wrote the key by hand.
            -1 => Attempt::Held(None),
            ms => Attempt::Held(Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))),
        })
    }

    /// Runs a script that writes a lease (acquire, extend), with `WAIT` in the same round trip when
    /// replicas must confirm it; the socket may then wait for `WAIT` on top of the I/O timeout.
    pub(crate) fn confirmed<T: FromRedisValue>(
        &self,
        what: &str,
        deadline: Deadline,
        via: Via,
        call: &ScriptCall<'_>,
    ) -> std::result::Result<(T, Option<i64>), Failure> {
        let wait = (self.replicas > 0).then(|| {
            // WAIT gets what is left of the deadline after a round trip, at most its timeout.
            let left = deadline
                .remaining()
                .saturating_sub(self.settings.io_timeout / 4);
            (self.replicas, millis(left.min(self.replicas_timeout)))
        });
        let io = self
            .settings
            .io_timeout
            .saturating_add(self.replicas_allowance());
        self.run_io(&self.pool, what, deadline, io, |c| call.send(c, via, wait))
    }

    /// With `replicas=N`: how many replicas acknowledged a write, when fewer than N did (the
    /// count is kept for `leasehold status` either way). `None`: no `WAIT` was asked for, or it
    /// was satisfied.
    pub(crate) fn short_of_replicas(&self, acked: Option<i64>) -> Option<i64> {
        let acked = acked?;
        self.last_acked.store(acked, Ordering::Relaxed);
        (acked < i64::from(self.replicas)).then_some(acked)
    }

    /// Why a write that only `acked` replicas acknowledged does not count, and what became of it:
    /// `given_back` is the outcome of the give-back (`Ok(true)`: deleted; `Ok(false)`: the key no
    /// longer held our token; an error: not known).
    pub(crate) fn unconfirmed(&self, what: &str, acked: i64, given_back: &Result<bool>) -> String {
        let fate = match given_back {
            Ok(true) => "the lease was given back (deleted)".to_owned(),
            Ok(false) => "the key no longer held this lease's token".to_owned(),
            Err(e) => {
                format!("giving the lease back failed ({e}); it is abandoned and lapses at its TTL")
            }
        };
        format!(
            "redis {}: {what} reached {acked} of the {} replicas asked for within {} ms; {fate}",
            self.name,
            self.replicas,
            self.replicas_timeout.as_millis()
        )
    }

    /// With `replicas=N`: a write that fewer than N replicas acknowledged is given back (the
    /// release script removes it only while it holds our token). An acquire is then
    /// `Unavailable`. An extend is `Lost`: the library itself has just deleted the key (or, should
    /// the give-back fail, abandoned it), so the lease must not go on counting down a deadline
    /// that nothing stands behind any more; another owner may take the key at once.
    #[allow(clippy::too_many_arguments)]
    fn check_acked(
        &self,
        acked: Option<i64>,
        what: &str,
        keys: &RedisKeys,
        token: &Token,
        signal_ttl: Duration,
        deadline: Deadline,
        via: Via,
    ) -> std::result::Result<(), Failure> {
        let Some(acked) = self.short_of_replicas(acked) else {
            return Ok(());
        };
        // Within the same deadline; should it fail, the key lapses at its TTL.
        let given_back = self
            .release_via(keys, token, signal_ttl, deadline, via)
            .map_err(Failure::into_error);
        let message = self.unconfirmed(what, acked, &given_back);
        Err(Failure::from_error(if what == "extend" {
            Error::Lost(message)
        } else {
            Error::Unavailable(message)
        }))
    }

    pub(crate) fn release_via(
        &self,
        keys: &RedisKeys,
        token: &Token,
        signal_ttl: Duration,
        deadline: Deadline,
        via: Via,
    ) -> std::result::Result<bool, Failure> {
        let call = ScriptCall::new(&RELEASE_SCRIPT)
            .keys([
                &keys.lock,
                &keys.queue,
                &keys.heartbeats,
                &keys.fence,
                &keys.high_water,
            ])
            .arg(token.as_str())
            .arg(&keys.signal_prefix)
            .arg(&keys.signal_suffix)
            .arg(millis(signal_ttl))
            .arg(millis(self.fence_retention));
        let (done, _): (i64, _) =
            self.run(&self.pool, "release", deadline, |c| call.send(c, via, None))?;
        Ok(done == 1)
    }

    plain!(
        /// Compare-and-PEXPIRE. `false`: the key does not hold this token.
        extend = extend_via(keys: &RedisKeys, token: &Token, ttl: Ttl, signal_ttl: Duration,
            deadline: Deadline; Via::default()) -> bool
    );

    pub(crate) fn extend_via(
        &self,
        keys: &RedisKeys,
        token: &Token,
        ttl: Ttl,
        signal_ttl: Duration,
        deadline: Deadline,
        via: Via,
    ) -> std::result::Result<bool, Failure> {
        let call = ScriptCall::new(&EXTEND_SCRIPT)
            .keys([&keys.lock, &keys.queue, &keys.heartbeats, &keys.fence])
            .arg(token.as_str())
            .arg(ttl.as_millis())
            .arg(&keys.signal_prefix)
            .arg(&keys.signal_suffix)
            .arg(millis(signal_ttl));
        let (done, acked): (i64, _) = self.confirmed("extend", deadline, via, &call)?;
        if done == 1 {
            self.check_acked(acked, "extend", keys, token, signal_ttl, deadline, via)?;
        }
        Ok(done == 1)
    }

    /// Runs `f` on a pooled lease-operation connection, bounded and retried like every call here:
    /// for the scripts only Redlock uses (see `redlock/node.rs`).
    pub(crate) fn call<T>(
        &self,
        what: &str,
        deadline: Deadline,
        f: impl FnMut(&mut Wire) -> RedisResult<T>,
    ) -> Result<T> {
        self.run(&self.pool, what, deadline, f)
            .map_err(Failure::into_error)
    }

    /// [`Node::call`], keeping what routing needs to know about a failure.
    pub(crate) fn call_routed<T>(
        &self,
        what: &str,
        deadline: Deadline,
        f: impl FnMut(&mut Wire) -> RedisResult<T>,
    ) -> std::result::Result<T, Failure> {
        self.run(&self.pool, what, deadline, f)
    }

    /// [`Node::wait_signal`], keeping what routing needs to know about a failure (a Cluster node
    /// that no longer has the slot answers `MOVED` at once).
    pub(crate) fn wait_signal_routed(
        &self,
        signal: &[u8],
        block: Duration,
        precise: bool,
        deadline: Deadline,
    ) -> std::result::Result<bool, Failure> {
        self.wait_grant_routed(signal, block, precise, deadline)
            .map(|s| s != Signal::TimedOut)
    }

    /// [`Node::wait_signal_routed`], telling a grant (the key handed over by its release) from a
    /// plain wake-up.
    pub(crate) fn wait_grant_routed(
        &self,
        signal: &[u8],
        block: Duration,
        precise: bool,
        deadline: Deadline,
    ) -> std::result::Result<Signal, Failure> {
        let block = block.max(Duration::from_millis(1));
        let io = self.settings.io_timeout;
        let (server_block, read_timeout) = if precise {
            (block.saturating_add(SERVER_TIMER_SLACK), block)
        } else {
            (block, block.saturating_add(io))
        };
        // A checkout no longer than the block itself, nor past the operation's deadline.
        let checkout = deadline.min(Deadline::after(block.min(self.settings.connect_timeout)));
        let got = self.run(&self.waiters, "wait", checkout, |c| {
            let read_timeout = deadline.cap(read_timeout).max(Duration::from_millis(1));
            c.set_budget(read_timeout)?;
            let popped: Option<(Value, Value)> = redis::cmd("BLPOP")
                .arg(signal)
                .arg(blpop_timeout(server_block))
                .query(c)?;
            // The read timeout stays as set: waiter connections serve only this call, which
            // sets its own every time (one system call per wait, not two).
            Ok(match popped {
                None => Signal::TimedOut,
                Some((_, Value::BulkString(v))) => grant(&v).map_or(Signal::Woken, Signal::Granted),
                Some(_) => Signal::Woken,
            })
        });
        match got {
            Ok(signal) => Ok(signal),
            Err(f) if f.checkout => Ok(Signal::TimedOut),
            Err(f) if f.timed_out && precise => Ok(Signal::TimedOut),
            // The server went away under a blocked waiter (a restart, say): whatever it knew about
            // the key may be gone with it, so the waiter tries the lock again at once rather than
            // blocking anew. If the server is down for good, that attempt says so.
            Err(f) if f.dropped => Ok(Signal::TimedOut),
            Err(f) => Err(f),
        }
    }

    /// Runs `f` on a pooled connection. A reused connection that finds the server gone (restarted,
    /// or it closed the idle connection) is stale rather than a sign of an outage: the call is made
    /// once more on a fresh connection, which every script here tolerates (acquire recognises its
    /// own token; release and extend compare the token).
    fn run<T>(
        &self,
        pool: &Pool<Manager>,
        what: &str,
        deadline: Deadline,
        f: impl FnMut(&mut Wire) -> RedisResult<T>,
    ) -> std::result::Result<T, Failure> {
        self.run_io(pool, what, deadline, self.settings.io_timeout, f)
    }

    /// [`Node::run`] with the socket's timeouts at `io` (or less near the deadline).
    fn run_io<T>(
        &self,
        pool: &Pool<Manager>,
        what: &str,
        deadline: Deadline,
        io: Duration,
        mut f: impl FnMut(&mut Wire) -> RedisResult<T>,
    ) -> std::result::Result<T, Failure> {
        let started = Instant::now();
        // A checkout (which retries a refused connect) takes at most the connect timeout, so a dead
        // server is reported after that, leaving the rest of the deadline to the caller (a Redlock
        // round's fence claim, say).
        let checkout = deadline.min(Deadline::after(self.settings.connect_timeout));
        // A waiter whose connection went stale goes back to its acquire attempt instead (see
        // `wait_signal`).
        let pool_is_main = std::ptr::eq(pool, &self.pool);
        let mut retried = false;
        let mut fresh_drops = Retry::DROPPED_AT_ONCE.start(deadline);
        if let Some(refusal) = self.screen.refusal() {
            return Err(Failure::from_error(refusal));
        }
        loop {
            let mut conn = self.checkout(pool, checkout).map_err(|error| Failure {
                error,
                checkout: true,
                timed_out: false,
                dropped: false,
                hint: Hint::Reroute,
            })?;
            let reused = conn.made < started;
            // Waiter connections get their read timeout from `wait_signal`.
            let bounded = if pool_is_main {
                conn.bound_io(io, deadline)
            } else {
                Ok(())
            };
            // A server is screened for eviction on its first call, and again after it was found
            // gone: one `INFO memory` then, never on later calls.
            let generation = conn.generation;
            let screened = if pool_is_main && self.screen.needed(generation) {
                bounded.and_then(|()| self.screen_on(&mut conn.inner, generation))
            } else {
                bounded
            };
            let outcome = screened.and_then(|()| match self.screen.refusal() {
                Some(refusal) => Ok(Err(refusal)),
                None => f(&mut conn.inner).map(Ok),
            });
            match outcome {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(refusal)) => return Err(Failure::from_error(refusal)),
                Err(err) => {
                    if breaks_connection(&err) {
                        conn.broken = true;
                    }
                    let dropped = is_dropped(&err);
                    if dropped {
                        self.generation
                            .fetch_max(conn.generation.saturating_add(1), Ordering::AcqRel);
                    }
                    drop(conn);
                    // The resend draws on the same deadline: it gets what is left, no more.
                    if dropped && reused && !retried && pool_is_main && !deadline.is_past() {
                        retried = true;
                        continue;
                    }
                    // A fresh connection dropped at once: a server in the middle of a restart
                    // (the old process closing what it accepted). A few more tries, a moment
                    // apart, still within the deadline.
                    if dropped && !reused && pool_is_main && fresh_drops.pause() {
                        continue;
                    }
                    // rustls handshakes on a connection's first I/O, and a TLS-only server drops a
                    // plain-text client only once it sends: on a connection made for this call, a
                    // certificate problem or a wrong scheme shows up here, not at checkout. Said
                    // in words as `Node::check` does (Cluster and Sentinel nodes are never
                    // checked); hint and flags still come from the original error.
                    let explained = if reused {
                        None
                    } else {
                        Some(self.probe.explain(err.clone()))
                    };
                    return Err(Failure {
                        error: from_redis(
                            explained.as_ref().unwrap_or(&err),
                            what,
                            &self.name,
                            &self.secrets,
                        ),
                        checkout: false,
                        timed_out: err.is_timeout(),
                        dropped,
                        hint: hint(&err),
                    });
                }
            }
        }
    }

    /// A connection made after the last time the server was found gone.
    fn checkout(
        &self,
        pool: &Pool<Manager>,
        deadline: Deadline,
    ) -> Result<PooledConnection<Manager>> {
        loop {
            let mut conn = pool
                .get(deadline)
                .map_err(|e| from_pool(&e, &self.name, &self.secrets))?;
            if conn.generation >= self.generation.load(Ordering::Acquire) {
                return Ok(conn);
            }
            // Stale: made before the server went away. Dropping it marked broken removes it from
            // the pool; the loop ends because each pass removes one of finitely many old
            // connections.
            mark_broken(&mut conn);
        }
    }
}

/// What a failed command tells routing.
fn hint(err: &RedisError) -> Hint {
    if let Some((addr, _slot)) = err.redirect_node() {
        return match err.kind() {
            ErrorKind::Server(ServerErrorKind::Ask) => Hint::Ask(addr.to_owned()),
            _ => Hint::Moved(addr.to_owned()),
        };
    }
    let moved_on = matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::ReadOnly
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::TryAgain
                | ServerErrorKind::BusyLoading
        )
    ) || err.code().is_some_and(|c| {
        matches!(
            c,
            "READONLY" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN" | "LOADING"
        )
    });
    if moved_on || err.is_io_error() || err.is_timeout() || is_dropped(err) {
        Hint::Reroute
    } else {
        Hint::None
    }
}

/// The major version in an `INFO server` reply (`redis_version:7.0.15`).
fn major_version(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.trim().split('.').next())
        .and_then(|m| m.parse().ok())
}

/// Loads every script (which also proves the server answers, accepts our credentials and lets us
/// run Lua), so the first calls need no NOSCRIPT round trip.
fn load_scripts(conn: &mut Wire) -> RedisResult<()> {
    for script in ALL {
        script.load(conn)?;
    }
    Ok(())
}

fn mark_broken(conn: &mut PooledConnection<Manager>) {
    let c: &mut Conn = conn;
    c.broken = true;
}

/// How much later than the client's own deadline a precise `BLPOP` asks the server to give up: more
/// than one server cron tick, so the client's deadline comes first.
const SERVER_TIMER_SLACK: Duration = Duration::from_millis(250);

/// BLPOP's timeout in seconds with millisecond precision (Redis ≥ 6 takes fractions). Never 0,
/// which would mean "forever".
fn blpop_timeout(block: Duration) -> String {
    let ms = block.as_millis().max(1);
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// The fence of a grant (`g<fence>`, see the release script); `None` for a plain wake-up.
fn grant(signal: &[u8]) -> Option<u64> {
    let digits = signal.strip_prefix(b"g")?;
    std::str::from_utf8(digits)
        .ok()?
        .parse()
        .ok()
        .filter(|f| *f >= 1)
}

/// A duration as a script's whole-ms argument, at least 1: never a zero expiry or timeout.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// What pipelined calls need of a node (Redlock's hot path, see `pipeline.rs`): requests written
/// to several nodes before any answer is read cannot go through [`Node::run`], which sends and
/// reads one call at a time.
impl Node {
    /// An idle connection of the lease pool, made since the server was last found gone, with its
    /// socket timeouts bounded by `deadline`; `None` rather than connecting or waiting (a worker
    /// makes that call instead, in parallel with the others).
    pub(crate) fn pipelined_connection(
        &self,
        deadline: Deadline,
    ) -> Option<PooledConnection<Manager>> {
        loop {
            let mut conn = self.pool.try_idle()?;
            // Not screened yet (or refused): the ordinary path says so.
            if self.screen.needed(conn.generation) || self.screen.refusal().is_some() {
                return None;
            }
            if conn.generation < self.generation.load(Ordering::Acquire) {
                mark_broken(&mut conn);
                continue;
            }
            if conn.bound_io(self.settings.io_timeout, deadline).is_err() {
                mark_broken(&mut conn);
                return None;
            }
            return Some(conn);
        }
    }

    /// What a failed command tells about `conn` and the server, recorded as [`Node::run`] does;
    /// the error in Leasehold's terms.
    pub(crate) fn pipelined_failure(
        &self,
        conn: &mut PooledConnection<Manager>,
        err: &RedisError,
        what: &str,
    ) -> Error {
        if breaks_connection(err) {
            mark_broken(conn);
        }
        if is_dropped(err) {
            self.generation
                .fetch_max(conn.generation.saturating_add(1), Ordering::AcqRel);
        }
        from_redis(err, what, &self.name, &self.secrets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(major_version(info), Some(7));
        assert_eq!(major_version("redis_version:5.0.14\n"), Some(5));
        assert_eq!(major_version("# Server\r\n"), None);
    }

    #[test]
    fn grants_parse_and_wake_ups_are_not_grants() {
        assert_eq!(grant(b"g1764590000000001"), Some(1_764_590_000_000_001));
        assert_eq!(grant(b"1"), None);
        assert_eq!(grant(b"g"), None);
        assert_eq!(grant(b"g0"), None);
        assert_eq!(grant(b"g1e15"), None);
    }

    #[test]
    fn blpop_timeouts_are_fractional_and_never_zero() {
        assert_eq!(blpop_timeout(Duration::ZERO), "0.001");
        assert_eq!(blpop_timeout(Duration::from_micros(1500)), "0.001");
        assert_eq!(blpop_timeout(Duration::from_millis(1234)), "1.234");
        assert_eq!(
            blpop_timeout(Duration::from_secs(7 * 24 * 3600)),
            "604800.000"
        );
    }

    /// An acquire resent with our token, as the single-node backend sends it.
    fn acquire_again(node: &Node, keys: &RedisKeys, token: &Token, ttl: Ttl) -> Attempt {
        let deadline = Deadline::after(Duration::from_secs(2));
        let signal = Duration::from_secs(1);
        node.acquire_via(
            keys,
            token,
            ttl,
            Mode::Try,
            signal,
            deadline,
            Via::default(),
        )
        .map_err(Failure::into_error)
        .unwrap()
    }

    /// A single-node acquire resent with the same token (the first send ran, its reply was lost)
    /// counts as taken with the same fence, and its expiry restarts from the resend.
    #[test]
    fn an_acquire_resent_with_our_token_resets_the_expiry() {
        let server = leasehold_testkit::RedisServer::start();
        let node = Node::for_test(&server);
        let key =
            leasehold_core::Key::new(leasehold_testkit::unique_key("resend").as_bytes()).unwrap();
        let keys = crate::keys::RedisKeys::new("leasehold:", &key);
        let token = leasehold_core::Token::generate().unwrap();
        let ttl = leasehold_core::Ttl::new(Duration::from_secs(10)).unwrap();
        let first = acquire_again(&node, &keys, &token, ttl);
        std::thread::sleep(Duration::from_millis(1200));
        let again = acquire_again(&node, &keys, &token, ttl);
        assert_eq!(first, again, "same lease, same fence");
        assert!(matches!(again, Attempt::Acquired(_)));
        let reply = server.command(&[b"PTTL", &keys.lock]);
        let left: i64 = reply.trim().trim_start_matches(':').parse().unwrap();
        assert!(
            left > 9_500,
            "expiry reset to the new 10 s TTL, {left} ms left"
        );
    }
}
