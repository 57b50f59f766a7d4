//! `redis://` and `rediss://`: leases on one Redis server.
//!
//! Waiting is native and first come, first served. A waiting `acquire` that finds the key taken
//! joins the key's queue and blocks in `BLPOP` on a list of its own. A release with waiters
//! queued hands the key straight to the queue's head (see `scripts.rs`): the head's token, TTL
//! and fence are written by the release script, which pushes the grant onto the head's list, so
//! the waiter wakes already holding the lease — a handoff is one message from the server, and
//! nobody races for the key. A process that releases and asks again at once goes to the back of
//! the line instead of starving the others. A list (not pub/sub) keeps a grant that arrives before
//! its waiter blocks; a waiter that stopped listening finds the grant by its next attempt (the key
//! holds its token), and its final attempt always runs, so no grant is stranded.
//!
//! The granted lease's local deadline counts from the send of the waiter's latest attempt (which
//! renewed its queue entry and TTL): the grant was made after that attempt reached the server.
//! When that leaves less than half the TTL, the waiter extends once at once. A waiter tells the
//! server how long it still takes a grant (its wait's end, less [`GRANT_MARGIN`]), and is never
//! granted past that. With `replicas=N` a grant could not wait for the replicas, so waiters are
//! woken to acquire for themselves instead, as shared locks' and semaphores' waiters are.
//!
//! A waiter never blocks past the holder's remaining TTL (which its failed attempt returned), so a
//! crashed holder's expiry is noticed on time, and never longer than its heartbeat interval: each
//! attempt renews its place, and a waiter that stops renewing (a crashed process) is dropped from
//! the queue `3 ×` that interval after its last attempt. Until then it may still be granted the key
//! it was due to get, which then stays held until that waiter's TTL runs out, as with a holder
//! that crashed just after acquiring (for a head that takes no grant the key stays reserved, up to
//! about four heartbeat intervals).

use crate::bounds::Bounds;
use crate::cluster::Cluster;
use crate::connection::ConnectSettings;
use crate::keys::RedisKeys;
use crate::node::{Attempt, Mode, Node, Signal, DEFAULT_FENCE_RETENTION};
use crate::pause;
use crate::routing::NodeTemplate;
use crate::sentinel::Sentinel;
use crate::topology::Topology;
use leasehold_core::config::RedisServer;
use leasehold_core::wait::{held_elsewhere, Polling, Turn, Waiter, Wake, Woken};
use leasehold_core::{
    BackendConfig, Config, Deadline, Error, Key, KeyInfo, LeaseKind, LockBackend,
};
use leasehold_core::{RawLease, Request, Result};
use leasehold_core::{Token, Ttl};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A grant must reach a waiter this long before its wait ends, by the server's clock: its request
/// needs about a round trip to arrive, and the grant another to come back.
const GRANT_MARGIN: Duration = Duration::from_millis(5);

/// How often a blocked waiter renews its place in the queue. Short, because a waiter that died (a
/// php-fpm worker killed at its request timeout) holds up the queue for about four of these; each
/// renewal costs one script call per waiter.
pub const DEFAULT_WAITER_HEARTBEAT: Duration = Duration::from_millis(250);
const MIN_WAITER_HEARTBEAT: Duration = Duration::from_millis(100);

/// Leases on Redis: one server (`redis://`, `rediss://`, `redis+unix://`), the master the
/// Sentinels name (`redis+sentinel://`), or a Cluster (`redis+cluster://`), each lease in its hash
/// slot's master (see `topology.rs`). The same scripts and key layout everywhere.
pub struct RedisBackend {
    topology: Topology,
    bounds: Bounds,
    blocks_fractionally: bool,
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
            .field("topology", &self.topology.describe())
            .finish()
    }
}

impl RedisBackend {
    /// Connects to what a `redis://`, `rediss://`, `redis+unix://`, `redis+sentinel://` or
    /// `redis+cluster://` configuration names, and checks that it answers: a dead host, no master
    /// or wrong credentials give `Unavailable` here, within about connect + I/O timeout (for
    /// Sentinel and Cluster, the lookup and the check share that bound).
    pub fn connect(config: &Config) -> Result<RedisBackend> {
        let settings = ConnectSettings::from_config(config)?;
        let template = NodeTemplate {
            settings: settings.clone(),
            pool_size: config.pool_size,
            secrets: config.secrets().into(),
            fence_retention: DEFAULT_FENCE_RETENTION,
            replicas: config.redis.replicas,
            replicas_timeout: config.redis.replicas_timeout,
        };
        let deadline = Deadline::for_call(settings.connect_timeout, settings.io_timeout);
        let single = |server: &RedisServer| -> Result<Topology> {
            let mut node = Node::connect(
                server,
                settings.clone(),
                config.pool_size,
                config.secrets().into(),
            )?;
            node.set_replicas(config.redis.replicas, config.redis.replicas_timeout);
            Ok(Topology::Single(Arc::new(node)))
        };
        let topology = match &config.backend {
            BackendConfig::Redis { server, .. } => single(server)?,
            BackendConfig::RedisUnix { path, server } => {
                // The node takes the socket's path where a host would be (see `connection.rs`).
                let path = path
                    .to_str()
                    .ok_or_else(|| Error::invalid("the Unix socket path must be valid UTF-8"))?;
                single(&RedisServer {
                    host: path.to_owned(),
                    ..server.clone()
                })?
            }
            BackendConfig::RedisCluster { seeds } => {
                crate::keys::check_prefix_for_cluster(&config.prefix)?;
                let cluster = Cluster::connect(seeds.clone(), template, deadline)?;
                Topology::Cluster(cluster)
            }
            BackendConfig::RedisSentinel {
                sentinels,
                service,
                master,
            } => Topology::Sentinel(Sentinel::connect(
                sentinels,
                service.clone(),
                master.clone(),
                template,
                deadline,
            )?),
            _ => {
                return Err(Error::invalid(format!(
                    "the redis backend needs a redis://, rediss://, redis+unix://, \
                     redis+sentinel:// or redis+cluster:// URL, got {}",
                    config.describe()
                )))
            }
        };
        let blocks_fractionally = match &topology {
            Topology::Single(node) => node.blocks_fractionally(),
            // Cluster and Sentinel need Redis ≥ 6 anyway (the scripts' `SET … PX` in a cluster,
            // ACL-era Sentinels); checked by the first NOSCRIPT reload otherwise.
            _ => true,
        };
        Ok(RedisBackend {
            bounds: Bounds::new(
                &settings,
                if config.redis.replicas == 0 {
                    Duration::ZERO
                } else {
                    config.redis.replicas_timeout
                },
            ),
            topology,
            blocks_fractionally,
            prefix: config.prefix.clone(),
            description: config.describe(),
            signal_ttl: config.connect_timeout.saturating_add(config.io_timeout),
            heartbeat: DEFAULT_WAITER_HEARTBEAT,
        })
    }

    /// Which servers serve the leases now: `single server 127.0.0.1:6379`, `cluster of 3 masters
    /// (…)`, `sentinel service mymaster (via 3 sentinels): master 10.0.0.5:6379`, and with
    /// `replicas=N` how many replicas acknowledged the last write. For `leasehold status`.
    pub fn topology(&self) -> String {
        self.topology.describe()
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

    /// How long the server's fence high-water (one per slot on a Cluster) is kept after the last
    /// acquisition on it (default `DEFAULT_FENCE_RETENTION`, 24 h; at least 1 ms). Fences keep
    /// increasing whatever the retention; after that long without any acquisition the server's
    /// clock alone orders the next fence, so it bounds how far the clock may step back unnoticed
    /// (see the crate docs). A key's own fence goes with its lease, whatever the retention.
    pub fn with_fence_retention(mut self, retention: Duration) -> Self {
        self.topology
            .set_fence_retention(retention.max(Duration::from_millis(1)));
        self
    }

    fn keys(&self, key: &Key) -> RedisKeys {
        let keys = RedisKeys::new(&self.prefix, key);
        if matches!(self.topology, Topology::Cluster(_)) {
            return keys.in_cluster(&self.prefix);
        }
        keys
    }

    fn waiter_ttl(&self) -> Duration {
        self.heartbeat.saturating_mul(3)
    }

    /// One acquire attempt in `mode`: a call's connect + I/O at most (a dead server is reported
    /// within that, not retried for the whole wait), and never past the call's `bound`.
    fn attempt(
        &self,
        keys: &RedisKeys,
        token: &Token,
        ttl: Ttl,
        mode: Mode,
        bound: Deadline,
    ) -> Result<Attempt> {
        let deadline = bound.min(self.bounds.write());
        self.topology.run(keys, deadline, |node, via| {
            node.acquire_via(keys, token, ttl, mode, self.signal_ttl, deadline, via)
        })
    }

    /// A wait that fails with `error` ends with the final attempt anyway: it leaves the queue, so
    /// no release grants the key to a token nobody waits with, and it takes a key granted to us
    /// meanwhile (which would otherwise stay held until its TTL). Its own failure is not the news.
    fn give_up(
        &self,
        key: &Key,
        keys: &RedisKeys,
        token: &Token,
        ttl: Ttl,
        bound: Deadline,
        error: Error,
    ) -> Result<RawLease> {
        let sent = Instant::now();
        match self.attempt(keys, token, ttl, Mode::Last, bound) {
            Ok(Attempt::Acquired(fence)) => {
                Ok(RawLease::new(key.clone(), *token, fence, ttl, sent))
            }
            _ => Err(error),
        }
    }

    /// A granted lease counts from our latest queue renewal, which may be a heartbeat ago: if
    /// that leaves less than half the TTL, one extend now (compare-and-PEXPIRE, counted from its
    /// own send) gives the holder its full TTL. `None`: the grant has run out already.
    fn settle_grant(
        &self,
        keys: &RedisKeys,
        token: &Token,
        ttl: Ttl,
        mut lease: RawLease,
        bound: Deadline,
    ) -> Result<Option<RawLease>> {
        if lease.remaining() >= ttl.as_duration() / 2 {
            return Ok(Some(lease));
        }
        let sent = Instant::now();
        let deadline = bound.min(self.bounds.write());
        match self.topology.run_standing(
            keys,
            deadline,
            |node, via| node.extend_via(keys, token, ttl, self.signal_ttl, deadline, via),
            |done| *done,
        ) {
            Ok(true) => {
                lease.renewed(ttl, sent);
                Ok(Some(lease))
            }
            Ok(false) => Ok(None),
            // Given back for want of replicas: the key is gone, so is the grant.
            Err(Error::Lost(_)) => Ok(None),
            // The lease stands with its shorter, still conservative deadline.
            Err(_) if !lease.remaining().is_zero() => Ok(Some(lease)),
            Err(error) => Err(error),
        }
    }
}

/// A waiter in the key's queue: attempts renew its place (or take the key), and in between it blocks
/// on its signal list, where a release wakes it or hands it the key. An error ends the wait at once
/// (a caller must tell contention from a broken server), after a final attempt that leaves the
/// queue ([`RedisBackend::give_up`]).
struct QueueWaiter<'a> {
    backend: &'a RedisBackend,
    key: &'a Key,
    keys: RedisKeys,
    token: Token,
    signal: Vec<u8>,
    ttl: Ttl,
    /// The wait's end.
    end: Instant,
    /// The whole call's bound, from the wait's end: every attempt, checkout and block draws on it,
    /// so the call returns within wait + connect + I/O.
    bound: Deadline,
    /// When the latest attempt that renewed our queue entry was sent: a grant can only be made
    /// after that attempt reached the server, so the granted TTL counts from no earlier.
    renewed: Instant,
}

impl Waiter for QueueWaiter<'_> {
    fn attempt(&mut self, last: bool, _block_until: Instant) -> Result<Turn> {
        let (bound, end) = (self.bound, self.end);
        let backend = self.backend;
        let sent = Instant::now();
        // The final attempt also gives up our place if refused, so the next in line is not kept
        // waiting for a key reserved to us. It also takes a key granted to us meanwhile (the
        // script sees our own token).
        let mode = if last {
            Mode::Last
        } else {
            // Grants need no confirmation round; with `replicas=N` each acquire must wait for its
            // replicas, so the head is woken to acquire for itself instead. A release grants the
            // key to us only while our wait has not ended, by the server's clock and with a margin
            // for the grant to reach us.
            let grants = backend.bounds.replicas_allowance.is_zero();
            Mode::Wait {
                waiter_ttl: backend.waiter_ttl(),
                grant_within: if grants {
                    end.saturating_duration_since(sent)
                        .saturating_sub(GRANT_MARGIN)
                } else {
                    Duration::ZERO
                },
            }
        };
        let holder_left = match backend.attempt(&self.keys, &self.token, self.ttl, mode, bound)? {
            Attempt::Acquired(fence) => {
                let lease = RawLease::new(self.key.clone(), self.token, fence, self.ttl, sent);
                return Ok(Turn::Granted(lease));
            }
            Attempt::Held(left) => left,
            // Free but another waiter's turn: it has been woken; ours comes by signal.
            Attempt::Reserved => None,
        };
        self.renewed = sent;
        Ok(Turn::NotYet { holder_left })
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        let Some((block, precise)) = pause::block_for(wake) else {
            return Ok(Woken::Quiet);
        };
        let bound = self.bound;
        let (backend, keys) = (self.backend, &self.keys);
        // On the slot's own node (Cluster): the release that wakes us runs there.
        let signalled = backend.topology.run(keys, bound, |node, _via| {
            node.wait_grant_routed(&self.signal, block, precise, bound)
        })?;
        let fence = match signalled {
            Signal::Granted(fence) => fence,
            Signal::Woken => return Ok(Woken::Attempt),
            Signal::TimedOut => return Ok(Woken::Quiet),
        };
        let lease = RawLease::new(self.key.clone(), self.token, fence, self.ttl, self.renewed);
        // `None`: the grant ran out before we could use it: try again.
        Ok(
            match backend.settle_grant(keys, &self.token, self.ttl, lease, bound)? {
                Some(lease) => Woken::Granted(lease),
                None => Woken::Attempt,
            },
        )
    }

    fn give_up(&mut self, error: Error) -> Result<RawLease> {
        let bound = self.bound;
        self.backend
            .give_up(self.key, &self.keys, &self.token, self.ttl, bound, error)
    }

    fn heartbeat(&self) -> Option<Duration> {
        Some(self.backend.heartbeat)
    }
}

fn lost(key: &Key) -> Error {
    Error::Lost(format!(
        "key \"{key}\" no longer holds this lease's token (it expired, or another owner took it)"
    ))
}

impl LockBackend for RedisBackend {
    fn topology(&self) -> Option<String> {
        Some(RedisBackend::topology(self))
    }

    fn diagnose(&self) -> Result<leasehold_core::doctor::Diagnosis> {
        crate::doctor::diagnose_topology(&self.topology, &self.prefix, || self.bounds.call())
    }

    fn name(&self) -> &'static str {
        match self.topology {
            Topology::Single(_) => "redis",
            Topology::Cluster(_) => "redis-cluster",
            Topology::Sentinel(_) => "redis-sentinel",
        }
    }

    /// An exclusive lease here (FIFO-queued, see the module docs); shared locks and semaphores
    /// in `kinds.rs`.
    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        match request.kind() {
            LeaseKind::Exclusive => self.try_lock(request.key(), request.ttl()),
            other => self
                .kinds()
                .try_acquire_as(request.key(), other, request.ttl()),
        }
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        if lease.kind() != LeaseKind::Exclusive {
            return self.kinds().release(lease);
        }
        let keys = self.keys(lease.key());
        let (token, deadline) = (lease.token(), self.bounds.call());
        if self.topology.run_standing(
            &keys,
            deadline,
            |node, via| node.release_via(&keys, &token, self.signal_ttl, deadline, via),
            |done| *done,
        )? {
            Ok(())
        } else {
            Err(lost(lease.key()))
        }
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        if lease.kind() != LeaseKind::Exclusive {
            return self.kinds().extend(lease, ttl);
        }
        let keys = self.keys(lease.key());
        let sent = Instant::now();
        let (token, deadline) = (lease.token(), self.bounds.write());
        if self.topology.run_standing(
            &keys,
            deadline,
            |node, via| node.extend_via(&keys, &token, ttl, self.signal_ttl, deadline, via),
            |done| *done,
        )? {
            lease.renewed(ttl, sent);
            Ok(())
        } else {
            Err(lost(lease.key()))
        }
    }

    /// Shared ⇄ exclusive with the same token, each one script (see `kinds.rs`).
    fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.kinds().try_promote(lease, ttl)
    }

    fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.kinds().demote(lease, ttl)
    }

    /// With its holders: 1 for an exclusive lease, the number of shares for a shared one (see
    /// `kinds.rs`, as restore and force-release).
    fn inspect(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo> {
        self.kinds().inspect_as(key, kind)
    }

    /// The lock's native FIFO wait (see the module docs), a share's or a permit's (`kinds.rs`).
    fn waiter<'a>(&'a self, request: &'a Request, end: Instant) -> Result<Box<dyn Waiter + 'a>> {
        if !self.blocks_fractionally {
            // Redis < 6 rounds BLPOP timeouts to whole seconds: poll instead.
            return Ok(Box::new(Polling::new(self, request, end)));
        }
        let (key, kind, ttl) = (request.key(), request.kind(), request.ttl());
        if kind != LeaseKind::Exclusive {
            return self
                .kinds()
                .waiter(key, kind, ttl, end)
                .map(|w| Box::new(w) as _);
        }
        let keys = self.keys(key);
        // One token for every attempt of this call: it is the waiter's place in the queue, and the
        // acquire script recognises it if a resent attempt finds its own earlier attempt succeeded.
        let token = Token::generate()?;
        Ok(Box::new(QueueWaiter {
            backend: self,
            key,
            signal: keys.signal(&token),
            keys,
            token,
            ttl,
            end,
            bound: self.bounds.acquire_until(end),
            renewed: Instant::now(),
        }))
    }

    fn restore(&self, key: &Key, token: Token) -> Result<RawLease> {
        self.kinds().restore(key, token)
    }

    fn force_release(&self, key: &Key) -> Result<bool> {
        self.kinds().force_release(key)
    }

    /// Fenced hashes beside the lease's keys, routed like them (see `records.rs`).
    fn records(&self) -> Option<&dyn leasehold_core::records::RecordStore> {
        Some(self)
    }
}

impl RedisBackend {
    /// One attempt at the key alone.
    fn try_lock(&self, key: &Key, ttl: Ttl) -> Result<RawLease> {
        let keys = self.keys(key);
        let token = Token::generate()?;
        let sent = Instant::now();
        let deadline = self.bounds.write();
        let attempt = self.topology.run(&keys, deadline, |node, via| {
            node.acquire_via(
                &keys,
                &token,
                ttl,
                Mode::Try,
                self.signal_ttl,
                deadline,
                via,
            )
        })?;
        match attempt {
            Attempt::Acquired(fence) => Ok(RawLease::new(key.clone(), token, fence, ttl, sent)),
            _ => Err(held_elsewhere(key)),
        }
    }

    pub(crate) fn kinds(&self) -> crate::kinds::Single<'_> {
        crate::kinds::Single {
            topology: &self.topology,
            bounds: self.bounds,
            prefix: &self.prefix,
            signal_ttl: self.signal_ttl,
            heartbeat: self.heartbeat,
        }
    }
}
