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
//! Errors: other owners holding enough nodes that no quorum is possible is contention
//! (`NotAcquired` once the wait is over); failed nodes alone ruling a quorum out is `Unavailable`,
//! after one round, however long the wait: a cluster that is down does not come back within a
//! lock wait, and the caller must learn it within the timeouts. Release and extend fan out the
//! same way and need a quorum too: `Lost` when fewer than a quorum could still hold our token,
//! `Unavailable` when failed nodes leave it undecided; a successful extend sets the deadline from
//! its own validity.
//!
//! Waiting (issue 7): Redlock polls, ordered by a queue on each node that ranks but never
//! reserves. The single-node backend's FIFO queue reserves a free key for its head; N nodes queue
//! independently, in their own arrival orders, so their heads can differ, and a key reserved for a
//! different waiter on each node would go to nobody. So a waiting round that is refused joins (or
//! renews its heartbeat in) Redlock's own queue on each node and learns how many live waiters are
//! ahead of it (`REDLOCK_ACQUIRE` in `scripts.rs`); the client takes the middle rank of the nodes'
//! answers and polls every 0.1–0.2 ms at the front, 2 ms more per waiter ahead otherwise (up to
//! 8 ms). The front therefore almost always takes a released key first; when the nodes disagree,
//! or a crashed waiter sits at the front (until its place lapses, 2 s after its last round), the
//! others are only slower, never blocked (the pacing is in `redlock_wait.rs`). A waiter keeps its
//! place through rounds that failed elsewhere and leaves on its release (or its last round). A
//! process that just released a key its own waiters found contended also holds back 4 ms before
//! trying it again, so a holder that asks again at once goes behind the waiters.
//!
//! Measured (tests/fairness.rs: 8 processes, 3 nodes, 2 ms holds, a loaded 2-core machine):
//! handoff p50 about 1 ms, p99 3–5 ms, longest wait 2.5–8× the median; with plain jittered
//! polling, the longest wait was 10–20× the median.

use crate::connection::ConnectSettings;
use crate::fanout::{Fanout, Replies, Timing};
use crate::fence::{plan, FencePlan};
use crate::node::Node;
use crate::redlock_node::{self, Answer, Queueing, RedlockKeys};
use crate::redlock_wait::{poll_delay, seed, RecentContention, WAITER_TTL};
use leasehold_core::wait::{deadline_after, held_elsewhere};
use leasehold_core::{BackendConfig, Config, Error, Key, KeyInfo, LockBackend, RawLease, Result};
use leasehold_core::{Token, Ttl};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How much longer than one node call's own bound (connect + I/O timeout) a fan-out waits for its
/// answers: scheduling slack for the worker threads on a loaded machine.
const ANSWER_SLACK: Duration = Duration::from_millis(50);

pub struct RedlockBackend {
    fanout: Fanout,
    quorum: usize,
    prefix: String,
    description: String,
    signal_ttl: Duration,
    /// How long a fan-out waits for its answers.
    answer_within: Duration,
    /// The courtesy pause's memory (see `redlock_wait.rs`).
    contended: RecentContention,
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

/// How one acquire round ended.
enum Round {
    Granted(RawLease),
    /// Refused for now (other owners, or the validity ran out): worth another round. With how many
    /// waiters are ahead of us, when the nodes said.
    Refused(Option<u64>, String),
    /// Too few nodes answered for any quorum.
    Down(Error),
}

/// Tallies one fan-out's answers against the quorum.
struct Tally {
    nodes: usize,
    quorum: usize,
    yes: usize,
    no: usize,
    failed: Vec<Error>,
}

impl Tally {
    fn new(nodes: usize, quorum: usize) -> Tally {
        Tally {
            nodes,
            quorum,
            yes: 0,
            no: 0,
            failed: Vec::new(),
        }
    }

    fn decided(&self) -> bool {
        self.yes >= self.quorum || self.no + self.failed.len() > self.nodes - self.quorum
    }

    /// Whether failures alone rule a quorum out.
    fn down(&self) -> bool {
        self.failed.len() > self.nodes - self.quorum
    }

    /// Counts nodes that never answered as failed.
    fn silent(&mut self, answered: &[bool], what: &str) {
        for _ in answered.iter().filter(|a| !**a) {
            self.failed.push(Error::Unavailable(format!(
                "a node gave no {what} answer within the timeouts"
            )));
        }
    }

    fn unavailable(&self, what: &str) -> Error {
        let answered = self.yes + self.no;
        let mut reasons: Vec<String> = self.failed.iter().map(|e| e.message().to_owned()).collect();
        reasons.dedup();
        Error::Unavailable(format!(
            "redlock {what}: {answered} of {} nodes answered, a quorum is {}: {}",
            self.nodes,
            self.quorum,
            reasons.join("; ")
        ))
    }
}

impl RedlockBackend {
    /// Builds one [`Node`] per server of a `redlock://` configuration and checks them all at once:
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
        let settings = ConnectSettings {
            connect_timeout: config.connect_timeout,
            io_timeout: config.io_timeout,
            tls: false,
        };
        let nodes = servers
            .iter()
            .map(|s| Node::unchecked(s, settings.clone(), config.pool_size, config.secrets()))
            .collect::<Result<Vec<Node>>>()?;
        let quorum = servers.len() / 2 + 1;
        let backend = RedlockBackend {
            fanout: Fanout::new(nodes, config.pool_size as usize),
            quorum,
            prefix: config.prefix.clone(),
            description: config.describe(),
            signal_ttl: config.connect_timeout.saturating_add(config.io_timeout),
            answer_within: config
                .connect_timeout
                .saturating_add(config.io_timeout)
                .saturating_add(ANSWER_SLACK),
            contended: RecentContention::default(),
        };
        let mut replies = backend
            .fanout
            .call_all(b"", backend.answer_timing(), |_, node| {
                node.check().map(|_| ())
            });
        let mut tally = Tally::new(backend.fanout.len(), quorum);
        let mut answered = vec![false; backend.fanout.len()];
        while let Some((i, r)) = replies.next() {
            answered[i] = true;
            match r {
                Ok(()) => tally.yes += 1,
                Err(e) => tally.failed.push(e),
            }
        }
        tally.silent(&answered, "connect");
        if tally.yes < quorum {
            let secrets = config.secrets();
            let refs: Vec<&str> = secrets.iter().map(String::as_str).collect();
            return Err(Error::unavailable(
                tally.unavailable("connect").message(),
                &refs,
            ));
        }
        for (node, ok) in backend.fanout.nodes().zip(&answered) {
            if !ok {
                tracing::warn!(
                    "redlock: {} is not answering; going on with a quorum",
                    node.name()
                );
            }
        }
        Ok(backend)
    }

    /// The number of nodes that must agree.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    fn keys(&self, key: &Key) -> Arc<RedlockKeys> {
        Arc::new(RedlockKeys::new(&self.prefix, key))
    }

    /// For calls whose answer matters only while the caller listens.
    fn answer_timing(&self) -> Timing {
        Timing::answer_by(deadline_after(self.answer_within))
    }

    /// For releases: still worth sending late, until the key would have expired anyway.
    fn release_timing(&self, expires: Instant) -> Timing {
        let listen_until = deadline_after(self.answer_within);
        Timing {
            listen_until,
            run_until: expires.max(listen_until),
            only_while_heard: false,
        }
    }

    /// One acquire round on every node with `token`.
    fn round(
        &self,
        key: &Key,
        keys: &Arc<RedlockKeys>,
        token: Token,
        ttl: Ttl,
        queueing: Queueing,
    ) -> Round {
        let start = Instant::now();
        let n = self.fanout.len();
        // Which nodes granted, as the nodes' own workers saw it, even after we stopped listening.
        let took_at: Arc<Vec<AtomicBool>> =
            Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
        let mut replies = {
            let (keys, took_at) = (keys.clone(), took_at.clone());
            let affinity = keys.base.lock.clone();
            // Every node gets the acquire even when a quorum answers first: a lease held on a bare
            // majority would be lost to a single node restarting empty. Calls still unsent when the
            // round's deadline passes are dropped, which bounds the work a slow node can pile up.
            let timing = Timing {
                only_while_heard: false,
                ..self.answer_timing()
            };
            self.fanout.call_all(&affinity, timing, move |i, node| {
                let answer = redlock_node::acquire(node, &keys, &token, ttl, queueing);
                if let (Ok(Answer::Granted(_)), Some(took)) = (&answer, took_at.get(i)) {
                    took.store(true, Ordering::Release);
                }
                answer
            })
        };
        let mut tally = Tally::new(n, self.quorum);
        let mut answered = vec![false; n];
        let mut granted: Vec<(usize, u64)> = Vec::with_capacity(n);
        let mut ranks: Vec<u64> = Vec::new();
        let mut timed_out = false;
        while !tally.decided() {
            let Some((i, r)) = replies.next() else {
                timed_out = true;
                break;
            };
            answered[i] = true;
            match r {
                Ok(Answer::Granted(fence)) => {
                    tally.yes += 1;
                    granted.push((i, fence));
                }
                Ok(Answer::Held { rank }) => {
                    tally.no += 1;
                    ranks.extend(rank);
                }
                Err(e) => tally.failed.push(e),
            }
        }
        // The deadline of a lease granted now: where `ttl − elapsed − drift` reaches zero.
        let valid_until = start
            .checked_add(ttl.as_duration().saturating_sub(ttl.drift()))
            .unwrap_or(start);
        let mut fence_failed = None;
        if tally.yes >= self.quorum && Instant::now() < valid_until {
            match self.settle_fence(keys, &granted) {
                Ok(fence) if Instant::now() < valid_until => {
                    let mut lease = RawLease::new(key.clone(), token, fence, ttl, start);
                    lease.set_deadline(valid_until);
                    return Round::Granted(lease);
                }
                Ok(_) => {}
                Err(e) => fence_failed = Some(e),
            }
        }
        // Failed: give back what we took, waiting so that the next round (ours or another owner's)
        // finds it free; and what we may yet take where no answer came, without waiting for nodes
        // that may be down (the release reaches each after our acquire, see `fanout.rs`). Keeping
        // our places in the nodes' queues: the next round is ours too.
        drop(replies);
        let took: Vec<usize> = granted.iter().map(|&(i, _)| i).collect();
        let unheard: Vec<usize> = (0..n).filter(|i| !answered[*i]).collect();
        let expires = start.checked_add(ttl.as_duration()).unwrap_or(start);
        self.release_on(&unheard, keys, token, expires, false, Some(took_at));
        self.release_on(&took, keys, token, expires, false, None);
        // Nodes we stopped listening to once the round was decided did not fail; nodes that said
        // nothing until the deadline did.
        if timed_out {
            tally.silent(&answered, "acquire");
        }
        if tally.down() {
            return Round::Down(tally.unavailable("acquire"));
        }
        if let Some(e) = fence_failed {
            return Round::Refused(None, e.message().to_owned());
        }
        if tally.yes >= self.quorum {
            return Round::Refused(None, format!(
                "key \"{key}\": a quorum granted it, but a TTL of {} ms left no validity after {} ms",
                ttl.as_millis(),
                start.elapsed().as_millis()
            ));
        }
        // The nodes' queues may disagree a little: go by the middle one.
        ranks.sort_unstable();
        let rank = ranks.get(ranks.len() / 2).copied();
        Round::Refused(rank, held_elsewhere(key).message().to_owned())
    }

    /// Makes sure a quorum of nodes knows the fence about to be handed out (see `fence.rs`).
    fn settle_fence(&self, keys: &Arc<RedlockKeys>, granted: &[(usize, u64)]) -> Result<u64> {
        let (fence, lagging, needed) = match plan(granted, self.quorum) {
            FencePlan::Ready(fence) => return Ok(fence),
            FencePlan::Raise {
                fence,
                lagging,
                needed,
            } => (fence, lagging, needed),
        };
        let mut replies = {
            let keys = keys.clone();
            let affinity = keys.base.lock.clone();
            self.fanout
                .call(&lagging, &affinity, self.answer_timing(), move |_, node| {
                    node.raise_fence(&keys.base, fence)
                })
        };
        let mut raised = 0;
        let mut reasons = Vec::new();
        while raised < needed {
            match replies.next() {
                Some((_, Ok(now))) if now >= fence => raised += 1,
                Some((_, Ok(_))) => {}
                Some((_, Err(e))) => reasons.push(e.message().to_owned()),
                None => break,
            }
        }
        if raised >= needed {
            Ok(fence)
        } else {
            Err(Error::Unavailable(format!(
                "redlock: fence {fence} reached too few nodes: {}",
                reasons.join("; ")
            )))
        }
    }

    /// Compare-and-delete on `which`, in parallel, waiting (within the timeouts) for the answers.
    /// With `only_took`, the nodes we stopped listening to: without waiting, and only where the
    /// acquire before it (queued ahead on the same worker) turned out to be granted, so a node that
    /// is down is not sent a release per round.
    fn release_on(
        &self,
        which: &[usize],
        keys: &Arc<RedlockKeys>,
        token: Token,
        expires: Instant,
        leave: bool,
        only_took: Option<Arc<Vec<AtomicBool>>>,
    ) {
        if which.is_empty() {
            return;
        }
        let timing = self.release_timing(expires);
        let affinity = keys.base.lock.clone();
        let keys = keys.clone();
        let wait = only_took.is_none();
        let mut replies = self.fanout.call(which, &affinity, timing, move |i, node| {
            let took = only_took.as_ref().map_or(true, |t| {
                t.get(i).is_some_and(|t| t.load(Ordering::Acquire))
            });
            if !took {
                return Ok(false);
            }
            redlock_node::release(node, &keys, &token, leave)
        });
        while wait && replies.next().is_some() {}
    }

    /// Runs a compare-and-something on every node and decides it by quorum: `Ok` once a quorum
    /// said yes, `Lost` once too few could still say yes, `Unavailable` when failures leave it
    /// undecided.
    fn by_quorum(&self, what: &str, key: &Key, mut replies: Replies<bool>) -> Result<()> {
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        let mut answered = vec![false; n];
        let mut timed_out = false;
        while !tally.decided() {
            let Some((i, r)) = replies.next() else {
                timed_out = true;
                break;
            };
            answered[i] = true;
            match r {
                Ok(true) => tally.yes += 1,
                Ok(false) => tally.no += 1,
                Err(e) => tally.failed.push(e),
            }
        }
        if tally.yes >= self.quorum {
            return Ok(());
        }
        if timed_out {
            tally.silent(&answered, what);
        }
        if tally.no > n - self.quorum {
            return Err(lost(key));
        }
        Err(tally.unavailable(what))
    }
}

fn lost(key: &Key) -> Error {
    Error::Lost(format!(
        "key \"{key}\": fewer than a quorum of nodes still hold this lease's token (it expired, or \
         another owner took it)"
    ))
}

impl LockBackend for RedlockBackend {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl) -> Result<RawLease> {
        let keys = self.keys(key);
        match self.round(key, &keys, Token::generate()?, ttl, Queueing::Never) {
            Round::Granted(lease) => Ok(lease),
            Round::Refused(_, why) => Err(Error::NotAcquired(why)),
            Round::Down(e) => Err(e),
        }
    }

    fn acquire(&self, key: &Key, ttl: Ttl, wait: Duration) -> Result<RawLease> {
        let began = Instant::now();
        let deadline = deadline_after(wait);
        let keys = self.keys(key);
        // One token for every round: a retry then finds its own leftovers granted, not held.
        let token = Token::generate()?;
        let mut rng = seed();
        let courtesy = self.contended.courtesy(&keys).min(wait);
        if !courtesy.is_zero() {
            std::thread::sleep(courtesy);
        }
        let queueing = Queueing::Wait {
            waiter_ttl: WAITER_TTL,
        };
        loop {
            // Once the wait is over, one more round, which also gives up our places in the queues.
            let last = Instant::now() >= deadline;
            let mode = if last { Queueing::Last } else { queueing };
            match self.round(key, &keys, token, ttl, mode) {
                Round::Granted(lease) => return Ok(lease),
                Round::Down(e) => return Err(e),
                Round::Refused(_, why) if last => return Err(Error::NotAcquired(why)),
                Round::Refused(rank, _) => {
                    let now = Instant::now();
                    self.contended.note_contended(&keys);
                    leasehold_core::stats::note_retry();
                    if now >= deadline {
                        continue;
                    }
                    let pause = poll_delay(rank, now.saturating_duration_since(began), &mut rng);
                    std::thread::sleep(pause.min(deadline.saturating_duration_since(now)));
                }
            }
        }
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let keys = self.keys(lease.key());
        let token = lease.token();
        let timing = self.release_timing(lease.deadline());
        let replies = {
            let keys = keys.clone();
            self.fanout
                .call_all(&keys.base.lock.clone(), timing, move |_, node| {
                    redlock_node::release(node, &keys, &token, true)
                })
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
        let replies = {
            let keys = keys.clone();
            self.fanout.call_all(
                &keys.base.lock.clone(),
                self.answer_timing(),
                move |_, node| node.extend(&keys.base, &token, ttl, signal_ttl),
            )
        };
        match self.by_quorum("extend", lease.key(), replies) {
            Ok(()) => {
                let valid_until = start
                    .checked_add(ttl.as_duration().saturating_sub(ttl.drift()))
                    .unwrap_or(start);
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
                    self.release_on(&all, &keys, token, lease.deadline(), true, None);
                }
                Err(e)
            }
        }
    }

    fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let keys = self.keys(key);
        let n = self.fanout.len();
        let affinity = keys.base.lock.clone();
        let mut replies = self
            .fanout
            .call_all(&affinity, self.answer_timing(), move |_, node| {
                node.inspect(&keys.base)
            });
        let mut infos = Vec::with_capacity(n);
        let mut tally = Tally::new(n, self.quorum);
        let mut answered = vec![false; n];
        while let Some((i, r)) = replies.next() {
            answered[i] = true;
            match r {
                Ok(info) => infos.push(info),
                Err(e) => tally.failed.push(e),
            }
        }
        tally.yes = infos.len();
        if infos.len() < self.quorum {
            tally.silent(&answered, "inspect");
            return Err(tally.unavailable("inspect"));
        }
        // Held while a quorum holds it; for as long as the quorum's shortest time left.
        let mut left: Vec<Duration> = infos
            .iter()
            .filter(|i| i.held)
            .map(|i| i.remaining.unwrap_or(Duration::MAX))
            .collect();
        left.sort_unstable_by(|a, b| b.cmp(a));
        let held = left.len() >= self.quorum;
        let remaining = if held {
            left.get(self.quorum - 1)
                .copied()
                .filter(|d| *d != Duration::MAX)
        } else {
            None
        };
        let fence = infos.iter().filter_map(|i| i.fence).max();
        Ok(KeyInfo::new(held, remaining, fence))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_tells_contention_from_an_outage() {
        let mut t = Tally::new(5, 3);
        t.no = 2;
        t.failed.push(Error::Unavailable("x".into()));
        assert!(t.decided() && !t.down());
        let mut t = Tally::new(5, 3);
        t.failed = vec![Error::Unavailable("x".into()); 3];
        assert!(t.decided() && t.down());
        let mut t = Tally::new(3, 2);
        t.yes = 2;
        assert!(t.decided() && !t.down());
    }
}
