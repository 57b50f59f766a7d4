//! How a Redlock waiter paces its rounds (the waiting design is in `mod.rs`): how often it
//! polls, by its rank in the nodes' queues or else by how long it has waited, and the courtesy
//! pause of a process that has just released a key its own waiters found contended.

use crate::redlock::node::{Queueing, RedlockKeys};
use crate::redlock::round::Round;
use crate::redlock::tally::Taint;
use crate::redlock::{kinds::NodeOp, RedlockBackend};
use leasehold_core::wait::{Turn, Waiter, Wake, Woken};
use leasehold_core::{Deadline, Error, Key, Result, Token, Ttl};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A waiter's poll interval starts here, and shrinks in proportion to its wait once it has waited
/// this long…
const FIRST_POLL: Duration = Duration::from_millis(8);
/// …down to this.
const FASTEST_POLL: Duration = Duration::from_micros(200);

/// A waiter this many places from the front of the queue polls this much less often.
const RANK_STEP: Duration = Duration::from_millis(2);
/// A waiter's place in a node's queue lapses this long after its last round: long enough for a
/// waiter on a loaded machine to keep its place between rounds (at most [`FIRST_POLL`] apart),
/// short enough that a crashed waiter does not stay at the front for long (it delays the others,
/// never blocks them: the queue only ranks).
pub(crate) const WAITER_TTL: Duration = Duration::from_secs(2);

/// A process that released a key its own waiters found contended waits this long before its own
/// next try for that key, so that waiters who have been polling get the first go.
const COURTESY: Duration = Duration::from_millis(4);
/// A key counts as contended this long after a waiter last found it held.
const CONTENDED_FOR: Duration = Duration::from_secs(1);
/// The contention memory is pruned past this many keys.
const CONTENDED_KEYS: usize = 4096;

/// An exclusive waiter: each attempt is a round on every node under one token (a retry then finds
/// its own leftovers granted, not held), which also ranks it in the nodes' queues; in between it
/// sleeps by rank ([`poll_delay`]).
pub(crate) struct RoundWaiter<'a> {
    backend: &'a RedlockBackend,
    key: &'a Key,
    keys: Arc<RedlockKeys>,
    token: Token,
    ttl: Ttl,
    began: Instant,
    /// The wait's end.
    end: Instant,
    rng: fastrand::Rng,
    tainted: Taint,
    /// The whole call's bound, from the wait's end: every round, give-back and fence claim
    /// draws on it, so split votes with a hung node cannot add rounds of a full timeout each past
    /// the wait.
    bound: Option<Deadline>,
    /// Our place in the nodes' queues, as the latest round said.
    rank: Option<u64>,
    /// Why the latest round was refused.
    refused: Option<String>,
    /// When the pause under way ends and the next round is due.
    next_round: Option<Instant>,
}

impl<'a> RoundWaiter<'a> {
    pub(crate) fn new(
        backend: &'a RedlockBackend,
        key: &'a Key,
        ttl: Ttl,
        end: Instant,
    ) -> Result<Self> {
        Ok(RoundWaiter {
            backend,
            key,
            keys: backend.keys(key),
            token: Token::generate()?,
            ttl,
            began: Instant::now(),
            end,
            rng: seed(),
            tainted: Taint::new(backend.fanout.len()),
            bound: None,
            rank: None,
            refused: None,
            next_round: None,
        })
    }
}

impl Waiter for RoundWaiter<'_> {
    fn attempt(&mut self, last: bool, _block_until: Instant) -> Result<Turn> {
        let (backend, end) = (self.backend, self.end);
        let bound = match self.bound {
            Some(bound) => bound,
            None => {
                let (connect, io) = (backend.connect_timeout, backend.io_timeout);
                let courtesy = backend
                    .contended
                    .courtesy(&self.keys)
                    .min(end.saturating_duration_since(Instant::now()));
                if !courtesy.is_zero() {
                    std::thread::sleep(courtesy);
                }
                *self
                    .bound
                    .insert(Deadline::for_acquire_until(end, connect, io))
            }
        };
        if let (true, Some(why)) = (bound.is_past(), &self.refused) {
            // No time is left for another round (split votes with a hung node used it up).
            return Err(Error::NotAcquired(why.clone()));
        }
        // The final round also gives up our places in the queues (with what is left of the bound).
        let queueing = if last {
            Queueing::Last
        } else {
            Queueing::Wait {
                waiter_ttl: WAITER_TTL,
            }
        };
        let (key, keys, token) = (self.key, &self.keys, self.token);
        let round = backend.round(
            key,
            keys,
            &NodeOp::Lock,
            token,
            self.ttl,
            queueing,
            bound,
            &self.tainted,
        );
        match round {
            Round::Granted(lease) => Ok(Turn::Granted(lease)),
            Round::Down(e) | Round::Invalid(e) => Err(e),
            Round::Refused(_, why, _) if last => Err(Error::NotAcquired(why)),
            Round::Refused(rank, why, _) => {
                backend.contended.note_contended(keys);
                self.rank = rank;
                self.refused = Some(why);
                Ok(Turn::NotYet { holder_left: None })
            }
        }
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        if self.bound.is_some_and(|b| b.is_past()) {
            // The bound is spent: the next attempt refuses at once.
            return Ok(Woken::Attempt);
        }
        // A pause cut short by the wake (a slice) goes on in the next block.
        let now = Instant::now();
        let due = match self.next_round {
            Some(due) => due,
            None => {
                let waited = now.saturating_duration_since(self.began);
                let pause = poll_delay(self.rank, waited, &mut self.rng);
                *self
                    .next_round
                    .insert(now.checked_add(pause).unwrap_or(now))
            }
        };
        let until = due.min(wake.until);
        std::thread::sleep(until.saturating_duration_since(now));
        if until < due {
            return Ok(Woken::Quiet);
        }
        self.next_round = None;
        Ok(Woken::Attempt)
    }
}

/// Keys this process's waiters recently found held, and when this process last released each.
#[derive(Debug, Default)]
pub(crate) struct RecentContention {
    keys: Mutex<HashMap<Vec<u8>, Contention>>,
}

#[derive(Debug, Clone, Copy)]
struct Contention {
    seen: Instant,
    released: Option<Instant>,
}

impl RecentContention {
    /// A waiter of this process found `keys` held.
    pub(crate) fn note_contended(&self, keys: &RedlockKeys) {
        let now = Instant::now();
        let mut map = self
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if map.len() >= CONTENDED_KEYS {
            map.retain(|_, c| now.saturating_duration_since(c.seen) < CONTENDED_FOR);
            if map.len() >= CONTENDED_KEYS {
                map.clear();
            }
        }
        map.entry(keys.base.lock.clone())
            .and_modify(|c| c.seen = now)
            .or_insert(Contention {
                seen: now,
                released: None,
            });
    }

    /// This process released `keys`.
    pub(crate) fn note_released(&self, keys: &RedlockKeys) {
        let mut map = self
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(c) = map.get_mut(&keys.base.lock) {
            c.released = Some(Instant::now());
        }
    }

    /// How long to hold back before the first try for a key this backend has just released while
    /// others were waiting for it.
    pub(crate) fn courtesy(&self, keys: &RedlockKeys) -> Duration {
        let map = self
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(c) = map.get(&keys.base.lock) else {
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

/// The pause before the next round of a waiter with `rank` live waiters ahead of it (as the nodes'
/// queues say) that has waited `waited`: the front of the queue polls every [`FASTEST_POLL`], the
/// others [`RANK_STEP`] per waiter ahead, up to [`FIRST_POLL`], so the front usually wins the next
/// handoff. Without a rank (every node that answered granted, or none queued us), by age:
/// [`FIRST_POLL`] shrinking in proportion to the time waited (`FIRST_POLL² / waited`). Drawn from
/// `[half, full]` so waiters that started together drift apart.
pub(crate) fn poll_delay(rank: Option<u64>, waited: Duration, rng: &mut fastrand::Rng) -> Duration {
    let as_micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let (first, fastest) = (as_micros(FIRST_POLL), as_micros(FASTEST_POLL));
    let micros = match rank {
        Some(0) => fastest,
        Some(ahead) => as_micros(RANK_STEP).saturating_mul(ahead).min(first),
        None => (first.saturating_mul(first) / as_micros(waited).max(first)).max(fastest),
    };
    let half = micros / 2;
    Duration::from_micros(half.saturating_add(rng.u64(..=half)))
}

/// The jitter's generator (no cryptographic quality needed), seeded per call from fastrand's
/// thread-local one.
pub(crate) fn seed() -> fastrand::Rng {
    fastrand::Rng::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_follows_the_queue_and_stays_jittered() {
        let mut rng = fastrand::Rng::with_seed(0x1234_5678_9abc_def1);
        for _ in 0..100 {
            let front = poll_delay(Some(0), Duration::ZERO, &mut rng);
            assert!(
                front >= FASTEST_POLL / 2 && front <= FASTEST_POLL,
                "{front:?}"
            );
            let second = poll_delay(Some(1), Duration::from_secs(10), &mut rng);
            assert!(second >= RANK_STEP / 2 && second <= RANK_STEP, "{second:?}");
            let back = poll_delay(Some(100), Duration::ZERO, &mut rng);
            assert!(back >= FIRST_POLL / 2 && back <= FIRST_POLL, "{back:?}");
            let new = poll_delay(None, Duration::ZERO, &mut rng);
            assert!(new >= FIRST_POLL / 2 && new <= FIRST_POLL, "{new:?}");
            let old = poll_delay(None, Duration::from_secs(10), &mut rng);
            assert!(old >= FASTEST_POLL / 2 && old <= FASTEST_POLL, "{old:?}");
        }
        assert!(poll_delay(None, Duration::MAX, &mut rng) <= FASTEST_POLL);
        assert!(poll_delay(Some(u64::MAX), Duration::MAX, &mut rng) <= FIRST_POLL);
    }

    #[test]
    fn courtesy_only_after_releasing_a_contended_key() {
        let recent = RecentContention::default();
        let keys = RedlockKeys::new("p:", &leasehold_core::Key::new(b"k").unwrap());
        recent.note_released(&keys);
        assert_eq!(recent.courtesy(&keys), Duration::ZERO, "never contended");
        recent.note_contended(&keys);
        recent.note_released(&keys);
        let pause = recent.courtesy(&keys);
        assert!(pause > Duration::ZERO && pause <= COURTESY, "{pause:?}");
    }
}
