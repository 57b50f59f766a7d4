//! `redlock://h1,h2,h3[,…]`: one lease over a majority of N independent Redis masters.
//!
//! Acquire sends the single-node acquire script (SET NX PX plus the node's fence INCR) to all N
//! nodes at once (see `fanout.rs`) and stops listening as soon as the outcome is decided: a quorum
//! (N/2+1) granted, or too many refused or failed for a quorum to remain possible. So an acquire
//! costs about one round trip to the slowest node of the quorum, and a hung node costs nothing
//! while the others make a quorum (its worker gives up at its own timeout).
//!
//! A granted quorum counts only with positive validity, `ttl − elapsed − drift` with drift
//! `ttl × 1 % + 2 ms` and elapsed measured from before the first send: the lease's local deadline
//! is the moment the validity runs out, `start + ttl − drift`. Every subtraction is checked, so a
//! TTL too short to outlast the round (a few ms) is refused, never wrapped. (A TTL below about
//! 3 ms can never be granted: the drift alone eats it.) Fences: see `fence.rs`.
//!
//! A failed round releases on every node that granted the key, and on every node that had not
//! answered yet, all at once, then retries with jitter until the wait runs out. Every round of one
//! `acquire` uses the same token, and the acquire script counts a key already holding that token as
//! granted, so a retry is never blocked by its own partial keys (a release that did not arrive, or
//! an acquire that arrived late). Such a late acquire on a node we stopped waiting for leaves a key
//! under our token until its TTL: on a minority of nodes, which a quorum of others outvotes.
//!
//! Errors: other owners holding enough nodes that no quorum is possible is contention
//! (`NotAcquired` once the wait is over); failed nodes alone ruling a quorum out is `Unavailable`,
//! after one round, however long the wait: a cluster that is down does not come back within a
//! lock wait, and the caller must learn it within the timeouts. Release and extend fan out the
//! same way and need a quorum too: `Lost` when fewer than a quorum could still hold our token,
//! `Unavailable` when failed nodes leave it undecided; a successful extend sets the deadline from
//! its own validity.
//!
//! Waiting (issue 7): Redlock polls, with jitter, rather than using the nodes' native FIFO queues.
//! Each node queues its waiters independently and in its own arrival order, so the heads of
//! different nodes' queues can differ, and a key reserved for a different waiter on each node
//! would be granted to nobody. Polling is made fairer two ways: a waiter polls more often the
//! longer it has waited (from every 8 ms down to every 1–2 ms), and a process that has just released
//! a key others are waiting for lets them try first (it waits a few ms before its own first try),
//! so a holder that asks again at once does not keep winning. A handoff thus costs about one poll
//! interval (1–2 ms for a waiter that has waited a while) plus a round trip.

use crate::connection::ConnectSettings;
use crate::fanout::{Fanout, Replies, Timing};
use crate::fence::{plan, FencePlan};
use crate::keys::RedisKeys;
use crate::node::{Attempt, Mode, Node};
use leasehold_core::wait::{deadline_after, held_elsewhere};
use leasehold_core::{BackendConfig, Config, Error, Key, KeyInfo, LockBackend, RawLease, Result};
use leasehold_core::{Token, Ttl};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much longer than one node call's own bound (connect + I/O timeout) a fan-out waits for its
/// answers: scheduling slack for the worker threads on a loaded machine.
const ANSWER_SLACK: Duration = Duration::from_millis(50);

/// A waiter's poll interval starts here and halves every time it has waited this long again…
const FIRST_POLL: Duration = Duration::from_millis(8);
/// …down to this.
const FASTEST_POLL: Duration = Duration::from_micros(500);

/// A process that released a key its own waiters found contended waits this long before its own
/// next try for that key, so that waiters who have been polling get the first go.
const COURTESY: Duration = Duration::from_millis(4);
/// A key counts as contended this long after a waiter last found it held.
const CONTENDED_FOR: Duration = Duration::from_secs(1);
/// The contention memory is pruned past this many keys.
const CONTENDED_KEYS: usize = 4096;

pub struct RedlockBackend {
    fanout: Fanout,
    quorum: usize,
    prefix: String,
    description: String,
    signal_ttl: Duration,
    /// How long a fan-out waits for its answers.
    answer_within: Duration,
    /// Lock keys waiters of this backend recently found held, and when this backend last released
    /// each: the fairness aid described in the module docs.
    contended: Mutex<HashMap<Vec<u8>, Contention>>,
}

#[derive(Debug, Clone, Copy)]
struct Contention {
    seen: Instant,
    released: Option<Instant>,
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
    /// Refused for now (other owners, or the validity ran out): worth another round.
    Refused(String),
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
            contended: Mutex::new(HashMap::new()),
        };
        let mut replies = backend
            .fanout
            .call_all(b"", backend.answer_timing(), |node| node.check().map(|_| ()));
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
                tracing::warn!("redlock: {} is not answering; going on with a quorum", node.name());
            }
        }
        Ok(backend)
    }

    /// The number of nodes that must agree.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    fn keys(&self, key: &Key) -> Arc<RedisKeys> {
        Arc::new(RedisKeys::new(&self.prefix, key))
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
        }
    }

    /// One acquire round on every node with `token`.
    fn round(&self, key: &Key, keys: &Arc<RedisKeys>, token: Token, ttl: Ttl) -> Round {
        let start = Instant::now();
        let n = self.fanout.len();
        let signal_ttl = self.signal_ttl;
        let mut replies = {
            let keys = keys.clone();
            let affinity = keys.lock.clone();
            self.fanout
                .call_all(&affinity, self.answer_timing(), move |node| {
                    node.acquire(&keys, &token, ttl, Mode::Try, signal_ttl)
                })
        };
        let mut tally = Tally::new(n, self.quorum);
        let mut answered = vec![false; n];
        let mut granted: Vec<(usize, u64)> = Vec::with_capacity(n);
        while !tally.decided() {
            let Some((i, r)) = replies.next() else {
                break;
            };
            answered[i] = true;
            match r {
                Ok(Attempt::Acquired(fence)) => {
                    tally.yes += 1;
                    granted.push((i, fence));
                }
                Ok(_) => tally.no += 1,
                Err(e) => tally.failed.push(e),
            }
        }
        // The deadline of a lease granted now: where `ttl − elapsed − drift` reaches zero.
        let valid_until = start
            .checked_add(ttl.as_duration().saturating_sub(ttl.drift()))
            .unwrap_or(start);
        if tally.yes >= self.quorum && Instant::now() < valid_until {
            match self.settle_fence(keys, &granted) {
                Ok(fence) if Instant::now() < valid_until => {
                    let mut lease = RawLease::new(key.clone(), token, fence, ttl, start);
                    lease.set_deadline(valid_until);
                    return Round::Granted(lease);
                }
                Ok(_) => {}
                Err(e) => tally.failed.push(e),
            }
        }
        // Failed: give back what we took, and what we may yet take where no answer came.
        let mut undo: Vec<usize> = granted.iter().map(|&(i, _)| i).collect();
        undo.extend((0..n).filter(|i| !answered[*i]));
        let expires = start.checked_add(ttl.as_duration()).unwrap_or(start);
        self.release_on(&undo, keys, token, expires);
        if tally.yes < self.quorum {
            tally.silent(&answered, "acquire");
        }
        if tally.down() {
            return Round::Down(tally.unavailable("acquire"));
        }
        if tally.yes >= self.quorum {
            return Round::Refused(format!(
                "key \"{key}\": a quorum granted it, but a TTL of {} ms left no validity after {} ms",
                ttl.as_millis(),
                start.elapsed().as_millis()
            ));
        }
        Round::Refused(held_elsewhere(key).message().to_owned())
    }

    /// Makes sure a quorum of nodes knows the fence about to be handed out (see `fence.rs`).
    fn settle_fence(&self, keys: &Arc<RedisKeys>, granted: &[(usize, u64)]) -> Result<u64> {
        let (fence, lagging, needed) = match plan(granted, self.quorum) {
            FencePlan::Ready(fence) => return Ok(fence),
            FencePlan::Raise {
                fence,
                lagging,
                needed,
            } => (fence, lagging, needed),
        };
        leasehold_core::stats::note_retry();
        let mut replies = {
            let keys = keys.clone();
            let affinity = keys.lock.clone();
            self.fanout
                .call(&lagging, &affinity, self.answer_timing(), move |node| {
                    node.raise_fence(&keys, fence)
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

    /// Compare-and-delete on `which`, in parallel, waiting (within the timeouts) for the answers so
    /// that a retry or another owner finds the keys gone.
    fn release_on(&self, which: &[usize], keys: &Arc<RedisKeys>, token: Token, expires: Instant) {
        if which.is_empty() {
            return;
        }
        let signal_ttl = self.signal_ttl;
        let timing = self.release_timing(expires);
        let affinity = keys.lock.clone();
        let keys = keys.clone();
        let mut replies = self.fanout.call(which, &affinity, timing, move |node| {
            node.release(&keys, &token, signal_ttl)
        });
        while replies.next().is_some() {}
    }

    /// Runs a compare-and-something on every node and decides it by quorum: `Ok` once a quorum
    /// said yes, `Lost` once too few could still say yes, `Unavailable` when failures leave it
    /// undecided.
    fn by_quorum(&self, what: &str, key: &Key, mut replies: Replies<bool>) -> Result<()> {
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        let mut answered = vec![false; n];
        while !tally.decided() {
            let Some((i, r)) = replies.next() else {
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
        tally.silent(&answered, what);
        if tally.no > n - self.quorum {
            return Err(lost(key));
        }
        Err(tally.unavailable(what))
    }

    fn note_contended(&self, keys: &RedisKeys) {
        let now = Instant::now();
        let mut map = self
            .contended
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if map.len() >= CONTENDED_KEYS {
            map.retain(|_, c| now.saturating_duration_since(c.seen) < CONTENDED_FOR);
            if map.len() >= CONTENDED_KEYS {
                map.clear();
            }
        }
        map.entry(keys.lock.clone())
            .and_modify(|c| c.seen = now)
            .or_insert(Contention {
                seen: now,
                released: None,
            });
    }

    fn note_released(&self, keys: &RedisKeys) {
        let mut map = self
            .contended
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(c) = map.get_mut(&keys.lock) {
            c.released = Some(Instant::now());
        }
    }

    /// How long to hold back before the first try for a key this backend has just released while
    /// others were waiting for it.
    fn courtesy(&self, keys: &RedisKeys) -> Duration {
        let map = self
            .contended
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(c) = map.get(&keys.lock) else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        match c.released {
            Some(at) if now.saturating_duration_since(c.seen) < CONTENDED_FOR => {
                COURTESY.saturating_sub(now.saturating_duration_since(at))
            }
            _ => Duration::ZERO,
        }
    }
}

/// The pause before the next round of a waiter that has waited `waited`: [`FIRST_POLL`] halving
/// every [`FIRST_POLL`] of waiting down to [`FASTEST_POLL`], drawn from `[half, full]` so waiters
/// that started together drift apart.
fn poll_delay(waited: Duration, rng: &mut u64) -> Duration {
    let halvings = (waited.as_millis() / FIRST_POLL.as_millis().max(1)).min(16) as u32;
    let base = (FIRST_POLL / 2u32.pow(halvings)).max(FASTEST_POLL);
    // xorshift64: jitter needs no cryptographic quality.
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let micros = u64::try_from(base.as_micros()).unwrap_or(u64::MAX);
    let half = micros / 2;
    Duration::from_micros(half.saturating_add(*rng % (half + 1)))
}

fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    // Jitter needs no cryptographic quality; without randomness the waiters only correlate more.
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes) | 1
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
        match self.round(key, &keys, Token::generate()?, ttl) {
            Round::Granted(lease) => Ok(lease),
            Round::Refused(why) => Err(Error::NotAcquired(why)),
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
        let courtesy = self.courtesy(&keys).min(wait);
        if !courtesy.is_zero() {
            std::thread::sleep(courtesy);
        }
        loop {
            match self.round(key, &keys, token, ttl) {
                Round::Granted(lease) => return Ok(lease),
                Round::Down(e) => return Err(e),
                Round::Refused(why) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(Error::NotAcquired(why));
                    }
                    self.note_contended(&keys);
                    let pause = poll_delay(now.saturating_duration_since(began), &mut rng);
                    std::thread::sleep(pause.min(deadline.saturating_duration_since(now)));
                    leasehold_core::stats::note_retry();
                }
            }
        }
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let keys = self.keys(lease.key());
        let token = lease.token();
        let signal_ttl = self.signal_ttl;
        let timing = self.release_timing(lease.deadline());
        let replies = {
            let keys = keys.clone();
            self.fanout.call_all(&keys.lock.clone(), timing, move |node| {
                node.release(&keys, &token, signal_ttl)
            })
        };
        let result = self.by_quorum("release", lease.key(), replies);
        self.note_released(&keys);
        result
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let keys = self.keys(lease.key());
        let token = lease.token();
        let signal_ttl = self.signal_ttl;
        let start = Instant::now();
        let replies = {
            let keys = keys.clone();
            self.fanout
                .call_all(&keys.lock.clone(), self.answer_timing(), move |node| {
                    node.extend(&keys, &token, ttl, signal_ttl)
                })
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
                    self.release_on(&all, &keys, token, lease.deadline());
                }
                Err(e)
            }
        }
    }

    fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let keys = self.keys(key);
        let n = self.fanout.len();
        let affinity = keys.lock.clone();
        let mut replies = self
            .fanout
            .call_all(&affinity, self.answer_timing(), move |node| node.inspect(&keys));
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
    fn polling_speeds_up_with_age_and_stays_jittered() {
        let mut rng = 0x1234_5678_9abc_def1;
        for _ in 0..100 {
            let first = poll_delay(Duration::ZERO, &mut rng);
            assert!(first >= FIRST_POLL / 2 && first <= FIRST_POLL, "{first:?}");
            let old = poll_delay(Duration::from_secs(10), &mut rng);
            assert!(old >= FASTEST_POLL / 2 && old <= FASTEST_POLL, "{old:?}");
        }
        let long = poll_delay(Duration::MAX, &mut rng);
        assert!(long <= FASTEST_POLL);
    }

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
