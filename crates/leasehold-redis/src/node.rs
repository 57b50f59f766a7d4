//! One Redis server as Leasehold uses it: a pool for lease operations, a second pool for waiters
//! blocked in `BLPOP`, and the scripts. The single-server backend is one node; Redlock is N of
//! them.
//!
//! Every call is bounded: a checkout waits at most the connect timeout, and every command runs on a
//! connection whose read and write timeouts are the I/O timeout (a `BLPOP` gets its block time on
//! top).

use crate::connection::{Conn, ConnectSettings, Manager};
use crate::errors::{breaks_connection, from_pool, from_redis, is_dropped};
use crate::keys::RedisKeys;
use crate::scripts::{
    ACQUIRE_SCRIPT, ALL, EXTEND_SCRIPT, INSPECT_SCRIPT, RAISE_FENCE_SCRIPT, RELEASE_SCRIPT,
};
use leasehold_core::config::RedisServer;
use leasehold_core::pool::{ManageConnection, Pool, PooledConnection};
use leasehold_core::{Error, KeyInfo, Result, Token, Ttl};
use redis::{Connection, RedisResult};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The outcome of one acquire script run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempt {
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
pub enum Mode {
    /// One attempt: refused while the key is held or reserved; never queues.
    Try,
    /// An attempt of a waiting `acquire`: refused, it joins the queue (or renews its heartbeat
    /// there); the queue entry lapses `waiter_ttl` after the last attempt.
    Wait { waiter_ttl: Duration },
    /// The final attempt of a waiting `acquire`: refused, it leaves the queue.
    Last,
}

pub struct Node {
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
    secrets: Vec<String>,
    blocks_fractionally: bool,
}

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

enum Failure {
    /// No connection within the checkout time.
    Checkout(Error),
    /// The command failed (`timed_out`: no answer within the read timeout; `dropped`: the server
    /// closed the connection).
    Command {
        error: Error,
        timed_out: bool,
        dropped: bool,
    },
}

impl Failure {
    fn into_error(self) -> Error {
        match self {
            Failure::Checkout(e) | Failure::Command { error: e, .. } => e,
        }
    }
}

impl Node {
    /// Builds the pools and checks that the server answers (and accepts our credentials), so a dead
    /// host or a wrong password is reported here, within about the connect timeout.
    pub fn connect(
        server: &RedisServer,
        settings: ConnectSettings,
        pool_size: u32,
        secrets: Vec<String>,
    ) -> Result<Node> {
        let mut node = Node::unchecked(server, settings, pool_size, secrets)?;
        node.blocks_fractionally = node.check()?;
        Ok(node)
    }

    /// Builds the pools without talking to the server (only a malformed address fails here), for
    /// Redlock, which must start with a minority of its nodes down. Connections are made on first
    /// use; [`Node::check`] tests the server.
    pub fn unchecked(
        server: &RedisServer,
        settings: ConnectSettings,
        pool_size: u32,
        secrets: Vec<String>,
    ) -> Result<Node> {
        let name = server.to_string();
        let refs: Vec<&str> = secrets.iter().map(String::as_str).collect();
        let manager = Manager::new(server, settings.clone())
            .map_err(|e| Error::invalid(leasehold_core::secret::redact(&e.to_string(), &refs)))?;
        let generation = manager.generation();
        let make = || {
            Manager::new(server, settings.clone())
                .map(|m| m.with_generation(generation.clone()))
                .map_err(|e| Error::invalid(leasehold_core::secret::redact(&e.to_string(), &refs)))
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
            settings,
            secrets,
            blocks_fractionally: true,
        })
    }

    /// Checks that the server answers, accepts our credentials and runs our scripts (loading them,
    /// so the first calls need no NOSCRIPT round trip). Returns whether it takes fractional `BLPOP`
    /// timeouts.
    pub fn check(&self) -> Result<bool> {
        let refs = self.secret_refs();
        // The check runs on a connection of its own rather than through the pool, whose checkout
        // would retry a refused connection or a wrong password until the connect timeout: the
        // caller learns at once, with the server's own reason.
        let mut first = self
            .probe
            .connect()
            .map_err(|e| from_redis(&e, "connect", &self.name, &refs))?;
        load_scripts(&mut first.inner).map_err(|e| from_redis(&e, "connect", &self.name, &refs))?;
        // INFO may be denied by an ACL; a server that does not say is taken to be current.
        Ok(redis::cmd("INFO")
            .arg("server")
            .query::<String>(&mut first.inner)
            .ok()
            .and_then(|info| major_version(&info))
            .map_or(true, |major| major >= 6))
    }

    /// Whether the server takes fractional `BLPOP` timeouts (Redis ≥ 6), which native waiting
    /// needs.
    pub fn blocks_fractionally(&self) -> bool {
        self.blocks_fractionally
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn settings(&self) -> &ConnectSettings {
        &self.settings
    }

    pub fn ping(&self) -> Result<()> {
        self.run(&self.pool, "ping", self.settings.connect_timeout, |c| {
            redis::cmd("PING").query::<()>(c)
        })
        .map_err(Failure::into_error)
    }

    /// One run of the acquire script: SET NX PX and the fence INCR, or the holder's time left.
    pub fn acquire(
        &self,
        keys: &RedisKeys,
        token: &Token,
        ttl: Ttl,
        mode: Mode,
        signal_ttl: Duration,
    ) -> Result<Attempt> {
        let (mode, waiter_ttl) = match mode {
            Mode::Try => ("try", Duration::from_millis(1)),
            Mode::Wait { waiter_ttl } => ("wait", waiter_ttl),
            Mode::Last => ("last", Duration::from_millis(1)),
        };
        let (taken, value): (i64, i64) = self
            .run(&self.pool, "acquire", self.settings.connect_timeout, |c| {
                ACQUIRE_SCRIPT
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .key(&keys.queue)
                    .key(&keys.heartbeats)
                    .arg(token.as_str())
                    .arg(ttl.as_millis())
                    .arg(mode)
                    .arg(millis(waiter_ttl))
                    .arg(&keys.signal_prefix)
                    .arg(&keys.signal_suffix)
                    .arg(millis(signal_ttl))
                    .invoke(c)
            })
            .map_err(Failure::into_error)?;
        if taken == 1 {
            return u64::try_from(value)
                .ok()
                .filter(|f| *f >= 1)
                .map(Attempt::Acquired)
                .ok_or_else(|| {
                    Error::Internal(format!("redis {}: fence counter gave {value}", self.name))
                });
        }
        Ok(match value {
            -3 => Attempt::Reserved,
            // No expiry: someone else wrote the key by hand.
            -1 => Attempt::Held(None),
            ms => Attempt::Held(Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))),
        })
    }

    /// Compare-and-delete plus a wake-up for the first waiter. `false`: the key does not hold this
    /// token.
    pub fn release(&self, keys: &RedisKeys, token: &Token, signal_ttl: Duration) -> Result<bool> {
        let done: i64 = self
            .run(&self.pool, "release", self.settings.connect_timeout, |c| {
                RELEASE_SCRIPT
                    .key(&keys.lock)
                    .key(&keys.queue)
                    .key(&keys.heartbeats)
                    .arg(token.as_str())
                    .arg(&keys.signal_prefix)
                    .arg(&keys.signal_suffix)
                    .arg(millis(signal_ttl))
                    .invoke(c)
            })
            .map_err(Failure::into_error)?;
        Ok(done == 1)
    }

    /// Compare-and-PEXPIRE. `false`: the key does not hold this token.
    pub fn extend(
        &self,
        keys: &RedisKeys,
        token: &Token,
        ttl: Ttl,
        signal_ttl: Duration,
    ) -> Result<bool> {
        let done: i64 = self
            .run(&self.pool, "extend", self.settings.connect_timeout, |c| {
                EXTEND_SCRIPT
                    .key(&keys.lock)
                    .key(&keys.queue)
                    .key(&keys.heartbeats)
                    .arg(token.as_str())
                    .arg(ttl.as_millis())
                    .arg(&keys.signal_prefix)
                    .arg(&keys.signal_suffix)
                    .arg(millis(signal_ttl))
                    .invoke(c)
            })
            .map_err(Failure::into_error)?;
        Ok(done == 1)
    }

    pub fn inspect(&self, keys: &RedisKeys) -> Result<KeyInfo> {
        let (pttl, fence, _waiters): (i64, i64, i64) = self
            .run(&self.pool, "inspect", self.settings.connect_timeout, |c| {
                INSPECT_SCRIPT
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .key(&keys.queue)
                    .invoke(c)
            })
            .map_err(Failure::into_error)?;
        let held = pttl >= 0 || pttl == -1;
        let remaining = u64::try_from(pttl).ok().map(Duration::from_millis);
        let fence = u64::try_from(fence).ok();
        Ok(KeyInfo::new(held, remaining, fence))
    }

    /// Runs `f` on a pooled lease-operation connection, bounded and retried like every call here:
    /// for the scripts only Redlock uses (see `redlock_node.rs`).
    pub(crate) fn call<T>(
        &self,
        what: &str,
        f: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run(&self.pool, what, self.settings.connect_timeout, f)
            .map_err(Failure::into_error)
    }

    /// Raises the key's fence counter to at least `fence` (never lowers it), for Redlock's fence
    /// write-back. Returns the counter afterwards.
    pub fn raise_fence(&self, keys: &RedisKeys, fence: u64) -> Result<u64> {
        let now: i64 = self
            .run(&self.pool, "fence", self.settings.connect_timeout, |c| {
                RAISE_FENCE_SCRIPT.key(&keys.fence).arg(fence).invoke(c)
            })
            .map_err(Failure::into_error)?;
        u64::try_from(now)
            .map_err(|_| Error::Internal(format!("redis {}: fence counter gave {now}", self.name)))
    }

    /// Blocks up to `block` (at least 1 ms) for a wake-up signal on the waiter's own list `signal`.
    /// `Ok(true)`: a signal came; `Ok(false)`: the block time ran out, or every waiter connection
    /// is busy (the caller simply tries the lock again).
    ///
    /// Redis checks blocking timeouts only on its cron tick (every 100 ms at the default `hz 10`),
    /// so a `BLPOP` timeout fires up to 100 ms late. Where that matters, `precise` (the block ends
    /// when a crashed holder's lease expires) makes the client's own read timeout end the block on
    /// time instead, with the server's timeout as a backstop; the connection, whose `BLPOP` is
    /// still pending, is then dropped. Otherwise the read timeout is `block` plus the I/O timeout,
    /// so a hung server still ends the wait within that.
    pub fn wait_signal(&self, signal: &[u8], block: Duration, precise: bool) -> Result<bool> {
        let block = block.max(Duration::from_millis(1));
        let io = self.settings.io_timeout;
        let (server_block, read_timeout) = if precise {
            (block.saturating_add(SERVER_TIMER_SLACK), block)
        } else {
            (block, block.saturating_add(io))
        };
        let checkout = block.min(self.settings.connect_timeout);
        let got = self.run(&self.waiters, "wait", checkout, |c| {
            c.set_read_timeout(Some(read_timeout))?;
            let popped: Option<(Vec<u8>, Vec<u8>)> = redis::cmd("BLPOP")
                .arg(signal)
                .arg(blpop_timeout(server_block))
                .query(c)?;
            c.set_read_timeout(Some(io))?;
            Ok(popped.is_some())
        });
        match got {
            Ok(signalled) => Ok(signalled),
            Err(Failure::Checkout(_)) => Ok(false),
            Err(Failure::Command {
                timed_out: true, ..
            }) if precise => Ok(false),
            // The server went away under a blocked waiter (a restart, say): whatever it knew about
            // the key may be gone with it, so the waiter tries the lock again at once rather than
            // blocking anew. If the server is down for good, that attempt says so.
            Err(Failure::Command { dropped: true, .. }) => Ok(false),
            Err(Failure::Command { error, .. }) => Err(error),
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
        checkout: Duration,
        mut f: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<T, Failure> {
        let started = Instant::now();
        let deadline = started.checked_add(checkout).unwrap_or(started);
        // A waiter whose connection went stale goes back to its acquire attempt instead (see
        // `wait_signal`).
        let pool_is_main = std::ptr::eq(pool, &self.pool);
        let mut retried = false;
        loop {
            let mut conn = self.checkout(pool, deadline).map_err(Failure::Checkout)?;
            let reused = conn.made < started;
            match f(&mut conn.inner) {
                Ok(value) => return Ok(value),
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
                    if dropped && reused && !retried && pool_is_main {
                        retried = true;
                        continue;
                    }
                    return Err(Failure::Command {
                        error: from_redis(&err, what, &self.name, &self.secret_refs()),
                        timed_out: err.is_timeout(),
                        dropped,
                    });
                }
            }
        }
    }

    /// A connection made after the last time the server was found gone.
    fn checkout(
        &self,
        pool: &Pool<Manager>,
        deadline: Instant,
    ) -> Result<PooledConnection<Manager>> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut conn = pool
                .get_timeout(left)
                .map_err(|e| from_pool(&e, &self.name, &self.secret_refs()))?;
            if conn.generation >= self.generation.load(Ordering::Acquire) {
                return Ok(conn);
            }
            // Stale: made before the server went away. Dropping it marked broken removes it from
            // the pool; the loop ends because each pass removes one of finitely many old
            // connections.
            mark_broken(&mut conn);
        }
    }

    fn secret_refs(&self) -> Vec<&str> {
        self.secrets.iter().map(String::as_str).collect()
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
fn load_scripts(conn: &mut Connection) -> RedisResult<()> {
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

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
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
    fn blpop_timeouts_are_fractional_and_never_zero() {
        assert_eq!(blpop_timeout(Duration::ZERO), "0.001");
        assert_eq!(blpop_timeout(Duration::from_micros(1500)), "0.001");
        assert_eq!(blpop_timeout(Duration::from_millis(1234)), "1.234");
        assert_eq!(
            blpop_timeout(Duration::from_secs(7 * 24 * 3600)),
            "604800.000"
        );
    }
}
