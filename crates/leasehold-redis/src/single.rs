//! `redis://` and `rediss://`: leases on one Redis server.
//!
//! Waiting is native and first come, first served. A waiting `acquire` that finds the key taken
//! joins the key's queue and blocks in `BLPOP` on a list of its own; whatever frees the key (a
//! release, the head waiter leaving) pushes one signal onto the list of the queue's head only, and
//! a free key is granted to nobody else, so a handoff costs about one round trip, wakes one waiter,
//! and a process that releases and asks again at once goes to the back of the line instead of
//! starving the others. A list (not pub/sub) keeps a signal that arrives before its waiter blocks,
//! so no wake-up is lost; a stale signal costs one extra attempt.
//!
//! A waiter never blocks past the holder's remaining TTL (which its failed attempt returned), so a
//! crashed holder's expiry is noticed on time, and never longer than its heartbeat interval: each
//! attempt renews its place, and a waiter that stops renewing (a crashed process) is dropped from
//! the queue `3 ×` that interval after its last attempt. Until then a key it was due to get stays
//! reserved for it: a crashed waiter can delay the others by up to about four heartbeat intervals.

use crate::connection::ConnectSettings;
use crate::keys::RedisKeys;
use crate::node::{Attempt, Mode, Node};
use leasehold_core::wait::{deadline_after, held_elsewhere};
use leasehold_core::{BackendConfig, Config, Error, Key, KeyInfo, LockBackend, RawLease, Result};
use leasehold_core::{Token, Ttl};
use std::fmt;
use std::time::{Duration, Instant};

/// A waiter wakes this long after the holder's reported expiry, so its next attempt finds the key
/// already expired on the server rather than a hair before.
const EXPIRY_MARGIN: Duration = Duration::from_millis(1);

/// Blocks at most this long sleep locally instead of sending a BLPOP: the server's timer could end
/// the BLPOP up to 100 ms late, and a precise one would cost the connection (see
/// `Node::wait_signal`).
const SLEEP_INSTEAD: Duration = Duration::from_millis(3);

/// How often a blocked waiter renews its place in the queue. Short, because a waiter that died (a
/// php-fpm worker killed at its request timeout) holds up the queue for about four of these; each
/// renewal costs one script call per waiter.
pub const DEFAULT_WAITER_HEARTBEAT: Duration = Duration::from_millis(250);
const MIN_WAITER_HEARTBEAT: Duration = Duration::from_millis(100);

pub struct RedisBackend {
    node: Node,
    prefix: String,
    description: String,
    /// How long a wake-up signal nobody took stays: long enough to cover a waiter between its
    /// failed attempt and its `BLPOP` reaching the server (a checkout and one request at most).
    signal_ttl: Duration,
    heartbeat: Duration,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("server", &self.description)
            .field("prefix", &self.prefix)
            .field("node", &self.node)
            .finish()
    }
}

impl RedisBackend {
    /// Connects to the server a `redis://` or `rediss://` configuration names, and checks that it
    /// answers: a dead host or wrong credentials give `Unavailable` here, within about the connect
    /// timeout.
    pub fn connect(config: &Config) -> Result<RedisBackend> {
        let BackendConfig::Redis { server, tls } = &config.backend else {
            return Err(Error::invalid(format!(
                "the redis backend needs a redis:// or rediss:// URL, got {}",
                config.describe()
            )));
        };
        let settings = ConnectSettings {
            connect_timeout: config.connect_timeout,
            io_timeout: config.io_timeout,
            tls: *tls,
        };
        let node = Node::connect(server, settings, config.pool_size, config.secrets())?;
        Ok(RedisBackend {
            node,
            prefix: config.prefix.clone(),
            description: config.describe(),
            signal_ttl: config.connect_timeout.saturating_add(config.io_timeout),
            heartbeat: DEFAULT_WAITER_HEARTBEAT,
        })
    }

    /// How often a blocked waiter renews its place in the queue (default 1 s, at least 100 ms); a
    /// waiter that stops renewing loses its place after three intervals. Shorter lets the others
    /// get past a crashed waiter sooner, at one round trip per waiter per interval. (The floor
    /// keeps a live waiter's renewal, which the server's 100 ms timer tick may delay, inside its
    /// deadline.)
    pub fn with_waiter_heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every.max(MIN_WAITER_HEARTBEAT);
        self
    }

    fn keys(&self, key: &Key) -> RedisKeys {
        RedisKeys::new(&self.prefix, key)
    }

    fn waiter_ttl(&self) -> Duration {
        self.heartbeat.saturating_mul(3)
    }

    fn wait_for_turn(
        &self,
        key: &Key,
        keys: &RedisKeys,
        token: &Token,
        ttl: Ttl,
        wait: Duration,
    ) -> Result<RawLease> {
        let deadline = deadline_after(wait);
        let mode = Mode::Wait {
            waiter_ttl: self.waiter_ttl(),
        };
        let signal = keys.signal(token);
        let mut attempts = 0u32;
        loop {
            if attempts > 0 {
                leasehold_core::stats::note_retry();
            }
            attempts = attempts.saturating_add(1);
            // Once the wait is over, one more attempt, which also gives up our place if refused,
            // so the next in line is not kept waiting for a key reserved to us.
            let last = Instant::now() >= deadline;
            let sent = Instant::now();
            let attempt = self.node.acquire(
                keys,
                token,
                ttl,
                if last { Mode::Last } else { mode },
                self.signal_ttl,
            )?;
            let holder_left = match attempt {
                Attempt::Acquired(fence) => {
                    return Ok(RawLease::new(key.clone(), *token, fence, ttl, sent))
                }
                _ if last => return Err(held_elsewhere(key)),
                Attempt::Held(left) => left,
                // Free but another waiter's turn: it has been woken; ours comes by signal.
                _ => None,
            };
            let wait_left = deadline.saturating_duration_since(Instant::now());
            if wait_left.is_zero() {
                continue;
            }
            // Until our signal, the holder's expiry (on time: a crashed holder), the next
            // heartbeat, or the end of the wait, whichever comes first. Only the expiry needs
            // waking on time; the others may come a server timer tick late (see
            // `Node::wait_signal`).
            let mut block = wait_left.min(self.heartbeat);
            let mut precise = false;
            if let Some(left) = holder_left {
                let expiry = left.saturating_add(EXPIRY_MARGIN);
                if expiry < block {
                    block = expiry;
                    precise = true;
                }
            }
            if block <= SLEEP_INSTEAD {
                // A block this short ends before a BLPOP could be served on time; a signal
                // meanwhile is noticed at most this late.
                std::thread::sleep(block);
            } else {
                // Woken or timed out, the next step is the same: try again.
                self.node.wait_signal(&signal, block, precise)?;
            }
        }
    }
}

fn lost(key: &Key) -> Error {
    Error::Lost(format!(
        "key \"{key}\" no longer holds this lease's token (it expired, or another owner took it)"
    ))
}

impl LockBackend for RedisBackend {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl) -> Result<RawLease> {
        let keys = self.keys(key);
        let token = Token::generate()?;
        let sent = Instant::now();
        match self
            .node
            .acquire(&keys, &token, ttl, Mode::Try, self.signal_ttl)?
        {
            Attempt::Acquired(fence) => Ok(RawLease::new(key.clone(), token, fence, ttl, sent)),
            _ => Err(held_elsewhere(key)),
        }
    }

    fn acquire(&self, key: &Key, ttl: Ttl, wait: Duration) -> Result<RawLease> {
        if !self.node.blocks_fractionally() {
            // Redis < 6 rounds BLPOP timeouts to whole seconds: poll instead.
            return leasehold_core::wait::poll_acquire(self, key, ttl, wait);
        }
        let keys = self.keys(key);
        // One token for every attempt of this call: it is the waiter's place in the queue, and the
        // acquire script recognises it if a resent attempt finds its own earlier attempt succeeded.
        let token = Token::generate()?;
        // An error ends the wait at once (a caller must tell contention from a broken server); the
        // place in the queue then lapses at its heartbeat deadline.
        self.wait_for_turn(key, &keys, &token, ttl, wait)
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let keys = self.keys(lease.key());
        if self.node.release(&keys, &lease.token(), self.signal_ttl)? {
            Ok(())
        } else {
            Err(lost(lease.key()))
        }
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let keys = self.keys(lease.key());
        let sent = Instant::now();
        if self
            .node
            .extend(&keys, &lease.token(), ttl, self.signal_ttl)?
        {
            lease.renewed(ttl, sent);
            Ok(())
        } else {
            Err(lost(lease.key()))
        }
    }

    fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        self.node.inspect(&self.keys(key))
    }
}
