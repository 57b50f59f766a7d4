//! `redlock://h1,h2,h3[,…]`: one lease over a majority of N independent Redis masters.
//!
//! Acquire sends the single-node acquire script (SET NX PX plus the node's fence INCR) to all N
//! nodes at once (see `fanout.rs`) and stops listening as soon as the outcome is decided: a quorum
//! (N/2+1) granted, or too many refused or failed for a quorum to remain possible. So an acquire
//! costs about one round trip to the slowest node of the quorum. A hung node delays at most the
//! first call that meets it, by its own timeout (if that call was made on the caller's thread);
//! after that its calls go through its workers and the quorum answers without it.
//!
//! A granted quorum counts only with positive validity, `ttl − elapsed − drift` with drift
//! `ttl × 1 % + 2 ms` and elapsed measured from before the first send: the lease's local deadline
//! is the moment the validity runs out, `start + ttl − drift`. Every subtraction is checked, so a
//! TTL too short to outlast the round (a few ms) is refused, never wrapped. (A TTL below about
//! 3 ms can never be granted: the drift alone eats it.) Fences: see `fence.rs`.
//!
//! A failed round releases on every node that granted the key, all at once, then retries with
//! jitter until the wait runs out. A node that had not answered when the round was decided gets a
//! release too, queued behind its acquire (calls about one key reach each node in the order they
//! were made, see `fanout.rs`) and sent only if that acquire turns out to have been granted; an
//! acquire that had not even started by then is dropped unsent. Every round of one `acquire` uses
//! the same token, and the acquire script counts a key already holding that token as granted, so
//! a retry is never blocked by its own partial keys.
//!
//! A node that lost its data (restarted without persistence) grants nothing until every lease it
//! may have granted is over, so a lease that held a bare majority through it keeps its exclusion:
//! see `gate.rs`.
//!
//! Errors: other owners holding enough nodes that no quorum is possible is contention
//! (`NotAcquired` once the wait is over); failed nodes alone ruling a quorum out is `Unavailable`,
//! after one round, however long the wait: a cluster that is down does not come back within a
//! lock wait, and the caller must learn it within the timeouts. Release and extend fan out the
//! same way and need a quorum too: `Lost` when fewer than a quorum could still hold our token,
//! `Unavailable` when failed nodes leave it undecided; a successful extend sets the deadline from
//! its own validity.
//!
//! Waiting: Redlock polls, ordered by a queue on each node that ranks but never
//! reserves. The single-node backend's FIFO queue reserves a free key for its head; N nodes queue
//! independently, in their own arrival orders, so their heads can differ, and a key reserved for a
//! different waiter on each node would go to nobody. So a waiting round that is refused joins (or
//! renews its heartbeat in) Redlock's own queue on each node and learns how many live waiters are
//! ahead of it (`REDLOCK_ACQUIRE` in `scripts.rs`); the client takes the middle rank of the nodes'
//! answers and polls every 0.1–0.2 ms at the front, 2 ms more per waiter ahead otherwise (up to
//! 8 ms). The front therefore almost always takes a released key first; when the nodes disagree,
//! or a crashed waiter sits at the front (until its place lapses, 2 s after its last round), the
//! others are only slower, never blocked (the pacing is in `wait.rs`). A waiter keeps its
//! place through rounds that failed elsewhere and leaves on its release (or its last round). A
//! process that just released a key its own waiters found contended also holds back 4 ms before
//! trying it again, so a holder that asks again at once goes behind the waiters.
//!
//! Measured (tests/fairness.rs: 8 processes, 3 nodes, 2 ms holds, a loaded 2-core machine):
//! handoff p50 about 1 ms, p99 3–5 ms, longest wait 2.5–8× the median; with plain jittered
//! polling, the longest wait was 10–20× the median.

mod fanout;
mod fence;
mod gate;
mod kinds;
mod node;
mod pipeline;
mod records;
mod round;
mod swap;
mod tally;
mod wait;

use crate::connection::ConnectSettings;
use crate::kind_keys::SharedKeys;
use crate::node::Node;
use fanout::{Fanout, Timing};
use kinds::NodeOp;
use leasehold_core::wait::{Polling, Waiter};
use leasehold_core::{BackendConfig, Config, Deadline, Error, Key, KeyInfo, LockBackend};
use leasehold_core::{LeaseKind, RawLease, Request, Result};
use leasehold_core::{Token, Ttl};
use node::{Queueing, RedlockKeys};
use round::{listen_until, lost, Round};
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tally::{Taint, Tally};
use wait::{RecentContention, RoundWaiter};

/// How much longer than its node calls' deadline a fan-out waits for their answers: scheduling slack
/// for the worker threads on a loaded machine (a node call itself never runs past its deadline).
const ANSWER_SLACK: Duration = Duration::from_millis(20);

pub struct RedlockBackend {
    fanout: Fanout,
    quorum: usize,
    prefix: String,
    description: String,
    signal_ttl: Duration,
    connect_timeout: Duration,
    io_timeout: Duration,
    /// The courtesy pause's memory (see `wait.rs`).
    contended: RecentContention,
    /// How far this client moved each node's horizon (see `gate.rs`).
    horizons: Arc<gate::Horizons>,
    /// The nodes that answered an acquire without a stamp, to be stamped (see `gate.rs`).
    unstamped: Arc<Vec<AtomicBool>>,
}

impl fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("servers", &self.description)
            .field("quorum", &self.quorum)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedlockBackend {
    /// Builds one node (`node.rs`) per server of a `redlock://` configuration and checks them all at once:
    /// fewer than a quorum answering (or accepting our credentials) gives `Unavailable` within
    /// about the connect timeout; a minority may be down and is used once it comes back.
    pub fn connect(config: &Config) -> Result<RedlockBackend> {
        let BackendConfig::Redlock { servers } = &config.backend else {
            return Err(Error::invalid(format!(
                "the redlock backend needs a redlock:// URL, got {}",
                config.describe()
            )));
        };
        if servers.len() < 3 {
            return Err(Error::invalid("redlock needs at least 3 servers"));
        }
        let settings = ConnectSettings::from_config(config)?;
        let nodes = servers
            .iter()
            .map(|s| {
                Node::unchecked(
                    s,
                    settings.clone(),
                    config.pool_size,
                    config.secrets().into(),
                )
            })
            .collect::<Result<Vec<Node>>>()?;
        let quorum = servers.len() / 2 + 1;
        let backend = RedlockBackend {
            fanout: Fanout::new(nodes, config.pool_size as usize),
            quorum,
            prefix: config.prefix.clone(),
            description: config.describe(),
            signal_ttl: config.connect_timeout.saturating_add(config.io_timeout),
            connect_timeout: config.connect_timeout,
            io_timeout: config.io_timeout,
            contended: RecentContention::default(),
            horizons: Arc::new(gate::Horizons::new(servers.len())),
            unstamped: Arc::new((0..servers.len()).map(|_| AtomicBool::new(false)).collect()),
        };
        let calls = backend.call_deadline();
        let gate = node::gate_key(&backend.prefix);
        let mut replies =
            backend
                .fanout
                .call_all(b"", backend.answer_timing(calls), move |_, node| {
                    node.check(calls)?;
                    let run_id = node.run_id(calls);
                    Ok((run_id, gate::stamped(node, &gate, calls)?))
                });
        let mut tally = Tally::new(backend.fanout.len(), quorum);
        let mut run_ids: Vec<(usize, String)> = Vec::new();
        let mut unstamped = false;
        while let Some((i, r)) = tally.hear_all(&mut replies, "connect") {
            match r {
                Ok((run_id, stamped)) => {
                    tally.yes += 1;
                    run_ids.extend(run_id.map(|id| (i, id)));
                    unstamped |= !stamped;
                }
                Err(e) => tally.failed.push(e),
            }
        }
        // One node that may evict keys refuses the deployment, however many others answered:
        // its votes could vanish under memory pressure (see `eviction.rs`).
        if let Some(refusal) = tally.failed.iter().find(|e| e.is_refused_deployment()) {
            return Err(refusal.clone());
        }
        backend.check_distinct(&run_ids)?;
        if tally.yes < quorum {
            return Err(Error::unavailable(
                tally.unavailable("connect").message(),
                &config.secrets(),
            ));
        }
        // A new deployment (or a node back without its data) is stamped now rather than by the
        // first acquire, which would be refused by nodes that grant nothing until stamped, or
        // spend its whole bound stamping them. Best effort: a round that meets an unstamped node
        // stamps it too (see `gate.rs`).
        if unstamped {
            let _ = backend.stamp(backend.call_deadline());
        }
        for (i, node) in backend.fanout.nodes().enumerate() {
            if !tally.answered(i) {
                tracing::warn!(
                    "redlock: {} is not answering; going on with a quorum",
                    node.name()
                );
            }
        }
        Ok(backend)
    }

    /// Refuses one server listed twice under different names (`localhost:6379` and
    /// `127.0.0.1:6379`, a DNS alias): its one vote would count twice, so a "majority" could be a
    /// minority of the real servers. Told by the servers' `run_id`s (nodes that did not say are
    /// not compared).
    fn check_distinct(&self, run_ids: &[(usize, String)]) -> Result<()> {
        for (n, (i, id)) in run_ids.iter().enumerate() {
            if let Some((j, _)) = run_ids[..n].iter().find(|(_, other)| other == id) {
                let name = |k: usize| self.fanout.nodes().nth(k).map_or("?", |node| node.name());
                return Err(Error::invalid(format!(
                    "redlock: {} and {} are the same server (run_id {id}); every node must be \
                     an independent Redis master",
                    name(*j),
                    name(*i)
                )));
            }
        }
        Ok(())
    }

    /// The number of nodes that must agree.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    fn keys(&self, key: &Key) -> Arc<RedlockKeys> {
        Arc::new(RedlockKeys::new(&self.prefix, key))
    }

    /// The bound of one operation that is not a wait: connect + I/O from now.
    fn call_deadline(&self) -> Deadline {
        Deadline::for_call(self.connect_timeout, self.io_timeout)
    }

    /// The deadline of node calls made now for an operation bounded by `bound`: a node call's own
    /// connect + I/O, or less when the operation's bound is nearer (a round late in a wait gets
    /// only what is left, never a fresh full timeout).
    fn calls_by(&self, bound: Deadline) -> Deadline {
        bound.min(self.call_deadline())
    }

    /// For calls whose answer matters only while the caller listens: until their deadline (plus
    /// scheduling slack).
    fn answer_timing(&self, calls: Deadline) -> Timing {
        Timing {
            listen_until: listen_until(calls),
            inline_until: calls.instant(),
            run_until: calls.instant(),
            only_while_heard: true,
        }
    }

    /// For releases: still worth sending late, until the key would have expired anyway.
    fn release_timing(&self, expires: Instant, calls: Deadline) -> Timing {
        Timing {
            listen_until: listen_until(calls),
            inline_until: calls.instant(),
            run_until: expires.max(calls.instant()),
            only_while_heard: false,
        }
    }
}

/// The deadline of a give-back that runs on a node's worker: the caller's `calls`, or, for one
/// that runs after the caller stopped listening (queued behind a slow call), a node call's bound of
/// its own.
fn late_call(calls: Deadline, connect: Duration, io: Duration) -> Deadline {
    if calls.is_past() {
        Deadline::for_call(connect, io)
    } else {
        calls
    }
}

impl LockBackend for RedlockBackend {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn diagnose(&self) -> Result<leasehold_core::doctor::Diagnosis> {
        let nodes: Vec<&Node> = self.fanout.nodes().collect();
        let mut d = crate::doctor::diagnose_nodes(
            &nodes,
            || self.call_deadline(),
            crate::doctor::Failover::Redlock,
            None,
        )?;
        d.fact("quorum", format!("{} of {}", self.quorum, nodes.len()));
        Ok(d)
    }

    /// Exclusive waiters rank themselves in the nodes' queues and poll by rank (`RoundWaiter`);
    /// shares and permits poll (core's jittered backoff): Redlock's queues only rank exclusive
    /// waiters, which is what gives a waiting writer precedence over new readers.
    fn waiter<'a>(&'a self, request: &'a Request, end: Instant) -> Result<Box<dyn Waiter + 'a>> {
        if request.kind() != LeaseKind::Exclusive {
            return Ok(Box::new(Polling::new(self, request, end)));
        }
        Ok(Box::new(RoundWaiter::new(
            self,
            request.key(),
            request.ttl(),
            end,
        )?))
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let keys = self.keys(lease.key());
        let token = lease.token();
        let calls = self.call_deadline();
        let timing = self.release_timing(lease.deadline(), calls);
        let (connect, io) = (self.connect_timeout, self.io_timeout);
        let op = NodeOp::new(&self.prefix, lease.key(), lease.kind());
        let signal_ttl = self.signal_ttl;
        let replies = {
            let lock = matches!(op, NodeOp::Lock);
            let call_keys = keys.clone();
            let call = move |_: usize, node: &Node| {
                // A release that runs after the caller stopped listening (queued behind a slow
                // call) still gets a node call's bound.
                let deadline = late_call(calls, connect, io);
                kinds::settle(
                    node, &call_keys, &op, &token, None, true, signal_ttl, deadline,
                )
            };
            let all: Vec<usize> = (0..self.fanout.len()).collect();
            let affinity = keys.base.lock.clone();
            if lock {
                self.fanout.call_pipelined(
                    &all,
                    &affinity,
                    timing,
                    "release",
                    calls,
                    |_, _| node::release_request(&keys, &token, true),
                    |_, node, value| node::release_reply(node, value),
                    call,
                )
            } else {
                self.fanout.call(&all, &affinity, timing, call)
            }
        };
        let result = self.by_quorum("release", lease.key(), replies);
        self.contended.note_released(&keys);
        result
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let keys = self.keys(lease.key());
        let token = lease.token();
        let signal_ttl = self.signal_ttl;
        let start = Instant::now();
        let calls = self.call_deadline();
        let op = NodeOp::new(&self.prefix, lease.key(), lease.kind());
        let replies = {
            let (keys, op, horizons) = (keys.clone(), op.clone(), self.horizons.clone());
            self.fanout.call_all(
                &keys.base.lock.clone(),
                self.answer_timing(calls),
                move |i, node| {
                    gate::reach(&horizons, i, node, &keys.gate, ttl, calls)?;
                    kinds::extend_on(node, &keys, &op, &token, ttl, signal_ttl, calls)
                },
            )
        };
        match self.by_slot_quorum("extend", lease.key(), replies) {
            Ok(elsewhere) => {
                // Nodes holding our token in another slot are no part of the permit: free them
                // (worth it until what they just extended would lapse anyway).
                let expires = start.checked_add(ttl.as_duration()).unwrap_or(start);
                self.release_on(
                    &elsewhere, &keys, &op, token, expires, false, None, calls, None,
                );
                let valid_until = ttl.deadline_from(start);
                if Instant::now() < valid_until {
                    lease.set_deadline(valid_until);
                    Ok(())
                } else {
                    lease.expire();
                    Err(Error::Lost(format!(
                        "key \"{}\": extended on a quorum, but a TTL of {} ms left no validity",
                        lease.key(),
                        ttl.as_millis()
                    )))
                }
            }
            Err(e) => {
                if matches!(e, Error::Lost(_)) {
                    // Ours on a minority at most: free those nodes for the next owner now rather
                    // than at their expiry.
                    let all: Vec<usize> = (0..self.fanout.len()).collect();
                    // Nobody waits for these beyond what is left of the extend's bound.
                    self.release_on(
                        &all,
                        &keys,
                        &op,
                        token,
                        lease.deadline(),
                        true,
                        None,
                        calls,
                        None,
                    );
                }
                Err(e)
            }
        }
    }

    // Promote and demote: see `swap.rs`.
    fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.promote(lease, ttl)
    }

    fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        RedlockBackend::demote(self, lease, ttl)
    }

    /// One round of the kind's script on every node (shared locks, semaphores, restore and
    /// force-release: see `kinds.rs`).
    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        let (key, kind, ttl) = (request.key(), request.kind(), request.ttl());
        let keys = self.keys(key);
        let bound = self.call_deadline();
        let token = Token::generate()?;
        let mut op = NodeOp::new(&self.prefix, key, kind);
        let mut split = false;
        let tainted = Taint::new(self.fanout.len());
        loop {
            match self.round(
                key,
                &keys,
                &op,
                token,
                ttl,
                Queueing::Never,
                bound,
                &tainted,
            ) {
                Round::Granted(lease) => return Ok(lease),
                Round::Down(e) | Round::Invalid(e) => return Err(e),
                // The nodes offered different permit slots: once more, asking every node for the
                // highest one offered (see `round`).
                Round::Refused(_, _, Some(slot)) if !split && !bound.is_past() => {
                    split = true;
                    op = op.with_hint(slot);
                }
                Round::Refused(_, why, _) => return Err(Error::NotAcquired(why)),
            }
        }
    }

    /// With the holders' count and kind (`leasehold status` shows readers).
    fn inspect(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo> {
        let prefix = self.prefix.clone();
        let calls = self.call_deadline();
        let k = key.clone();
        let affinity = self.keys(key).base.lock.clone();
        let mut replies =
            self.fanout
                .call_all(&affinity, self.answer_timing(calls), move |_, node| {
                    crate::kinds::inspect_on(node, &prefix, &k, kind, calls)
                });
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        let mut infos = Vec::with_capacity(n);
        while let Some((_, r)) = tally.hear_all(&mut replies, "inspect") {
            match r {
                Ok(info) => infos.push(info),
                Err(e) => tally.failed.push(e),
            }
        }
        if infos.len() < self.quorum {
            return Err(tally.unavailable("inspect"));
        }
        // What a quorum agrees on: the quorum-th largest of each figure.
        let q = self.quorum - 1;
        let mut left: Vec<Duration> = infos
            .iter()
            .filter(|i| i.held)
            .map(|i| i.remaining.unwrap_or(Duration::MAX))
            .collect();
        left.sort_unstable_by(|a, b| b.cmp(a));
        let held = left.len() >= self.quorum;
        let remaining = if held {
            left.get(q).copied().filter(|d| *d != Duration::MAX)
        } else {
            None
        };
        let mut holders: Vec<u32> = infos.iter().map(|i| i.holders.unwrap_or(0)).collect();
        holders.sort_unstable_by(|a, b| b.cmp(a));
        let shared = infos.iter().filter(|i| i.shared == Some(true)).count() >= self.quorum;
        // The fence a quorum's counters reach: the last one handed out (an acquire leaves it on
        // a quorum); a node that granted after its round was decided may have drawn past it.
        let mut fences: Vec<u64> = infos.iter().filter_map(|i| i.fence).collect();
        fences.sort_unstable_by(|a, b| b.cmp(a));
        let fence = fences.get(q).or(fences.first()).copied();
        Ok(KeyInfo::new(held, remaining, fence)
            .with_holders(holders.get(q).copied().unwrap_or(0), shared))
    }

    /// A quorum of nodes must hold the token; the validity is an acquire's, from the quorum's
    /// shortest time left, and the fence the value a quorum of them drew for the token (the
    /// acquire handed out only such a value, and no two values can each stand on a quorum; see
    /// `fence::agreed`).
    fn restore(&self, key: &Key, token: Token) -> Result<RawLease> {
        let shared = Arc::new(SharedKeys::new(&self.prefix, key));
        let start = Instant::now();
        let calls = self.call_deadline();
        let affinity = shared.base.lock.clone();
        let mut replies = {
            let shared = shared.clone();
            self.fanout
                .call_all(&affinity, self.answer_timing(calls), move |_, node| {
                    kinds::restore(node, &shared, &token, calls)
                })
        };
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        // (node, (kind: 1 lock / 2 share, fence, ms left)) from the nodes that hold the token.
        let mut held: Vec<(usize, (i64, i64, i64))> = Vec::new();
        let mut agreed = None;
        // Past a quorum too, until a quorum agrees on the fence (see `fence::agreed`).
        while let Some((i, r)) = tally.hear_all(&mut replies, "restore") {
            match r {
                Ok(reply) if reply.0 != 0 => {
                    tally.yes += 1;
                    held.push((i, reply));
                    agreed = fence::agreed(&fences_of(&held), self.quorum);
                }
                Ok(_) => tally.no += 1,
                Err(e) => tally.failed.push(e),
            }
            if agreed.is_some() || tally.no + tally.failed.len() > n - self.quorum {
                break;
            }
        }
        if tally.yes >= self.quorum {
            let how = held[0].1 .0;
            let fence = match agreed {
                Some(fence) => fence,
                None => {
                    let keys = Arc::new(RedlockKeys::new(&self.prefix, key));
                    let op = if how == 2 {
                        NodeOp::Shared(shared)
                    } else {
                        NodeOp::Lock
                    };
                    self.settle_fence(&keys, &op, token, &fences_of(&held), calls)?
                }
            };
            let left = held.iter().map(|h| h.1 .2).min().unwrap_or(0);
            let lease = crate::kinds::restored(key, token, (how, fence as i64, left), start)?;
            if lease.remaining().is_zero() {
                return Err(lost(key));
            }
            return Ok(lease);
        }
        if tally.no > n - self.quorum {
            return Err(lost(key));
        }
        Err(tally.unavailable("restore"))
    }

    /// On every node; a quorum must answer, so that no quorum can still hold the key.
    fn force_release(&self, key: &Key) -> Result<bool> {
        let shared = Arc::new(SharedKeys::new(&self.prefix, key));
        let calls = self.call_deadline();
        let affinity = shared.base.lock.clone();
        let mut replies =
            self.fanout
                .call_all(&affinity, self.answer_timing(calls), move |_, node| {
                    kinds::force_release(node, &shared, calls)
                });
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        let mut any = false;
        while let Some((_, r)) = tally.hear_all(&mut replies, "force_release") {
            match r {
                Ok(held) => {
                    tally.yes += 1;
                    any |= held;
                }
                Err(e) => tally.failed.push(e),
            }
        }
        if tally.yes >= self.quorum {
            return Ok(any);
        }
        Err(tally.unavailable("force_release"))
    }

    /// The single-node record on every node, read and written by quorum (see `records.rs`).
    fn records(&self) -> Option<&dyn leasehold_core::records::RecordStore> {
        Some(self)
    }
}

/// The fences of restore replies, as the fence rules take them.
fn fences_of(held: &[(usize, (i64, i64, i64))]) -> Vec<(usize, u64)> {
    held.iter().map(|&(i, h)| (i, h.1 as u64)).collect()
}
