//! The one wait loop. Every waiting acquire, of every backend and kind, runs [`acquire`]: a backend
//! supplies a [`Waiter`] (one attempt, and a way to block until something may have changed), and
//! core owns the rest: the wait's end, when the next attempt is due (a heartbeat, the holder's
//! expiry), the final attempt once the wait is over, leaving the line when the wait fails, and the
//! retry count. A backend therefore cannot get one of these wrong on its own. A promote waits by the
//! same loop: what it waits for is not a new lease but its own lease turned exclusive, so the loop is
//! generic in what a grant hands back (`T`, a [`RawLease`] for every acquire).

use crate::error::{Error, Result};
use crate::interrupt::{Watch, CHECK_EVERY};
use crate::key::Key;
use crate::kind::LeaseKind;
use crate::raw_lease::RawLease;
use crate::request::Request;
use std::time::{Duration, Instant};

pub use crate::retry::{Backoff, Retry};

/// A waiter wakes this long after the holder's reported expiry, so its next attempt finds the key
/// already expired on the server rather than a hair before.
pub const EXPIRY_MARGIN: Duration = Duration::from_millis(1);

/// The deadline `wait` from now. Waits are bounded by [`crate::MAX_WAIT`], so this cannot overflow;
/// saturate anyway rather than panic.
pub fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait).unwrap_or(now)
}

/// What one attempt of a waiting acquire found.
#[derive(Debug)]
pub enum Turn<T = RawLease> {
    /// The lease is ours.
    Granted(T),
    /// Not yet: the key is held, or another waiter's turn comes first. `holder_left` is how long the
    /// holder's lease still runs, when the attempt could tell: the waiter wakes by then, since a
    /// holder that crashed frees the key only by running out, and nobody will say so.
    NotYet { holder_left: Option<Duration> },
}

/// Until when a waiter may block before its next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    pub until: Instant,
    /// Whether `until` is the holder's expiry, which must be met on time; otherwise it is the next
    /// heartbeat or the wait's end, which may come a server timer tick late.
    pub on_time: bool,
}

impl Wake {
    /// The time left until [`Wake::until`].
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

/// One waiting acquire, as a backend runs it: its place in the line, if it keeps one, and its way
/// of blocking. [`acquire`] drives it and owns everything else. A waiter is made for one wait
/// ([`crate::LockBackend::waiter`] gets the wait's end), so it works out the bound of its round
/// trips once.
pub trait Waiter<T = RawLease> {
    /// One attempt, which also takes or renews the waiter's place in the line. `last`: the wait is
    /// over, so this is the final attempt; refused, it must leave the line, so that no release
    /// hands the key to a waiter that has gone. A backend whose server queues waiters itself
    /// (PostgreSQL's lock queue) may block inside a non-final attempt, but only until
    /// `block_until` (at most [`crate::interrupt::CHECK_EVERY`] away, so that an interrupt is
    /// noticed in time). `NotAcquired` counts as [`Turn::NotYet`].
    fn attempt(&mut self, last: bool, block_until: Instant) -> Result<Turn<T>>;

    /// Blocks until something may have changed (a wake-up, a release, a polling waiter's pause is
    /// over) or `wake.until`, whichever comes first, and says which ([`Woken`]). Core may cut a long
    /// wake into slices (to look for interrupts): a block that reaches the end of a slice with
    /// nothing to report says [`Woken::Quiet`], and core blocks on without an attempt.
    fn block(&mut self, wake: Wake) -> Result<Woken<T>>;

    /// The wait ends by `error` before its final attempt (an attempt or a block failed, or the
    /// wait was interrupted): leave the line, and take a key handed to this waiter meanwhile. The
    /// default has no line to leave.
    fn give_up(&mut self, error: Error) -> Result<T> {
        Err(error)
    }

    /// How often an attempt must renew the waiter's place, when it keeps one that lapses.
    fn heartbeat(&self) -> Option<Duration> {
        None
    }
}

/// Waits until `end` for `key`: attempts through `waiter` until one is granted or the wait is over
/// (one attempt at least, and a final one at the end), blocking in between. Errors other than
/// `NotAcquired` end the wait at once: a caller must be able to tell contention from a broken
/// backend. So does `watch` firing (`Interrupted`), looked at least every
/// [`CHECK_EVERY`]: blocks and server-side waits are cut into slices that long. The waiter bounds
/// each of its own round trips, so the call ends within the wait + connect + I/O.
pub fn acquire<T>(
    waiter: &mut dyn Waiter<T>,
    key: &Key,
    kind: LeaseKind,
    end: Instant,
    watch: &Watch<'_>,
) -> Result<T> {
    let mut attempts = 0u32;
    loop {
        if attempts > 0 {
            crate::stats::note_retry();
        }
        attempts = attempts.saturating_add(1);
        let now = Instant::now();
        let last = now >= end;
        let block_until = end.min(now.checked_add(CHECK_EVERY).unwrap_or(end));
        let turn = match waiter.attempt(last, block_until) {
            Ok(turn) => turn,
            Err(Error::NotAcquired(why)) if last => return Err(Error::NotAcquired(why)),
            Err(Error::NotAcquired(_)) => Turn::NotYet { holder_left: None },
            // The attempt may have run on the server and queued us (a reply lost on the way).
            Err(error) if !last => return waiter.give_up(error),
            Err(error) => return Err(error),
        };
        let holder_left = match turn {
            Turn::Granted(lease) => return Ok(lease),
            Turn::NotYet { .. } if last => return Err(refused(key, kind)),
            Turn::NotYet { holder_left } => holder_left,
        };
        if let Err(interrupted) = watch.check() {
            return waiter.give_up(interrupted);
        }
        let wake = next_wake(end, waiter.heartbeat(), holder_left);
        loop {
            let now = Instant::now();
            let until = wake
                .until
                .min(now.checked_add(CHECK_EVERY).unwrap_or(wake.until));
            let whole = until >= wake.until;
            let slice = Wake {
                until,
                on_time: wake.on_time && whole,
            };
            let woken = match waiter.block(slice) {
                Ok(Woken::Granted(lease)) => return Ok(lease),
                Ok(Woken::Attempt) => true,
                Ok(Woken::Quiet) => false,
                Err(error) => return waiter.give_up(error),
            };
            if let Err(interrupted) = watch.check() {
                return waiter.give_up(interrupted);
            }
            if whole || woken {
                break;
            }
        }
    }
}

/// When the next attempt is due: the holder's expiry (plus [`EXPIRY_MARGIN`]), the next heartbeat
/// or the wait's end, whichever comes first.
fn next_wake(end: Instant, heartbeat: Option<Duration>, holder_left: Option<Duration>) -> Wake {
    let now = Instant::now();
    let after = |d: Duration| now.checked_add(d).unwrap_or(end);
    let mut until = end;
    if let Some(beat) = heartbeat {
        until = until.min(after(beat));
    }
    let mut on_time = false;
    if let Some(left) = holder_left {
        let expiry = after(left.saturating_add(EXPIRY_MARGIN));
        if expiry < until {
            until = expiry;
            on_time = true;
        }
    }
    Wake { until, on_time }
}

/// How a [`Waiter::block`] ended.
#[derive(Debug)]
pub enum Woken<T = RawLease> {
    /// The key was handed to this waiter meanwhile.
    Granted(T),
    /// Something may have changed, or a polling waiter's pause is over: attempt now.
    Attempt,
    /// The block reached `wake.until` with nothing to report.
    Quiet,
}

/// Sleeps between the attempts of a waiter that has no way to be woken: the pauses of a [`Retry`]
/// policy ([`Retry::POLL`] unless the backend names its own), never past the wake. A pause cut short by the
/// wake (a slice) goes on in the next block, so slicing never makes a waiter poll faster.
#[derive(Debug, Clone)]
pub struct Pause {
    backoff: Backoff,
    /// When the pause under way ends.
    due: Option<Instant>,
}

impl Pause {
    pub fn new() -> Self {
        Pause::paced(Retry::POLL)
    }

    /// A pause paced by `policy` (its count of tries does not apply: the wait's end bounds it).
    pub fn paced(policy: Retry) -> Self {
        Pause {
            backoff: policy.backoff(),
            due: None,
        }
    }

    /// Sleeps until the pause is over ([`Woken::Attempt`]) or the wake comes first
    /// ([`Woken::Quiet`]).
    pub fn sleep<T>(&mut self, wake: Wake) -> Woken<T> {
        let now = Instant::now();
        let backoff = &mut self.backoff;
        let due = *self
            .due
            .get_or_insert_with(|| now.checked_add(backoff.next_delay()).unwrap_or(now));
        let until = due.min(wake.until);
        std::thread::sleep(until.saturating_duration_since(now));
        if until < due {
            return Woken::Quiet;
        }
        self.due = None;
        Woken::Attempt
    }
}

impl Default for Pause {
    fn default() -> Self {
        Pause::new()
    }
}

/// The waiter of a backend without a native wait: attempts are `try_acquire`, and it sleeps in
/// between ([`Pause`]).
pub struct Polling<'a, B: crate::LockBackend + ?Sized> {
    backend: &'a B,
    request: &'a Request,
    pause: Pause,
    /// The wait's end.
    end: Instant,
    /// When the latest attempt returned.
    answered: Option<Instant>,
    /// Why the latest attempt was refused, for a wait that ends without another attempt: the
    /// caller gets the backend's own reason (a Redlock round that outlasted its TTL says so), not
    /// a generic "held by another owner" for a key nobody may hold.
    refusal: Option<String>,
}

impl<'a, B: crate::LockBackend + ?Sized> Polling<'a, B> {
    pub fn new(backend: &'a B, request: &'a Request, end: Instant) -> Self {
        Polling {
            backend,
            request,
            pause: Pause::new(),
            end,
            answered: None,
            refusal: None,
        }
    }
}

impl<B: crate::LockBackend + ?Sized> Waiter for Polling<'_, B> {
    /// Each attempt is one `try_acquire`, bounded by a call's connect + I/O of its own, so no
    /// final attempt starts once one has already looked at the key after the wait's end: that would
    /// take the call past wait + connect + I/O. A polling waiter holds no place to give up.
    fn attempt(&mut self, last: bool, _block_until: Instant) -> Result<Turn> {
        if last && self.answered.is_some_and(|at| at >= self.end) {
            return match self.refusal.take() {
                Some(why) => Err(Error::NotAcquired(why)),
                None => Ok(Turn::NotYet { holder_left: None }),
            };
        }
        let result = self.backend.try_acquire(self.request);
        self.answered = Some(Instant::now());
        if let Err(Error::NotAcquired(why)) = &result {
            self.refusal = Some(why.clone());
        }
        result.map(Turn::Granted)
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        Ok(self.pause.sleep(wake))
    }
}

/// Takes what `request` asks for from `backend`: one attempt when its wait is zero, else the one
/// wait loop ([`acquire`]) over the backend's [`crate::LockBackend::waiter`], ending early with
/// `Interrupted` when `watch` fires. Every acquire of every backend and kind comes here, so every
/// backend waits by the same rules.
pub fn acquire_request<B: crate::LockBackend + ?Sized>(
    backend: &B,
    request: &Request,
    watch: &Watch<'_>,
) -> Result<RawLease> {
    if request.wait().is_zero() {
        return backend.try_acquire(request);
    }
    let end = deadline_after(request.wait());
    let mut waiter = backend.waiter(request, end)?;
    acquire(&mut *waiter, request.key(), request.kind(), end, watch)
}

/// Waits by polling `try_acquire` through the one loop, whatever the backend's own waiter (a
/// baseline for benchmarks, and the wait of backends that cannot be woken).
pub fn poll_acquire<B: crate::LockBackend + ?Sized>(
    backend: &B,
    request: &Request,
) -> Result<RawLease> {
    if request.wait().is_zero() {
        return backend.try_acquire(request);
    }
    let end = deadline_after(request.wait());
    let mut waiter = Polling::new(backend, request, end);
    acquire(
        &mut waiter,
        request.key(),
        request.kind(),
        end,
        &Watch::none(),
    )
}

/// The `NotAcquired` error every backend gives for a key held by someone else.
pub fn held_elsewhere(key: &Key) -> Error {
    Error::NotAcquired(format!("key \"{key}\" is held by another owner"))
}

/// The `NotAcquired` of an attempt refused, or of a wait that ran out.
pub fn refused(key: &Key, kind: LeaseKind) -> Error {
    match kind {
        LeaseKind::Permit(_) => Error::NotAcquired(format!(
            "every permit of semaphore \"{key}\" is held by other owners"
        )),
        _ => held_elsewhere(key),
    }
}

/// The `InvalidArgument` of a permit acquire whose `asked` size differs from the `held` size the
/// semaphore's live holders were granted under. Every holder of a semaphore must ask for the same
/// number; a new size may be used once every holder is gone (released or expired). This error ends
/// a wait at once, like every error other than `NotAcquired`.
pub fn other_size(key: &Key, held: u32, asked: u32) -> Error {
    Error::InvalidArgument(format!(
        "semaphore \"{key}\" is held with {held} permits; this acquire asked for {asked} \
         — every holder of a semaphore must ask for the same number"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KeyInfo, LockBackend, Ttl};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Refuses every attempt, each after `each`.
    #[derive(Debug)]
    struct Slow {
        each: Duration,
        attempts: AtomicU32,
    }

    impl LockBackend for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }
        fn try_acquire(&self, request: &Request) -> Result<RawLease> {
            let key = request.key();
            std::thread::sleep(self.each);
            self.attempts.fetch_add(1, Ordering::Relaxed);
            Err(Error::NotAcquired(format!(
                "key \"{key}\": a quorum granted it, but its TTL left no validity"
            )))
        }
        fn release(&self, _: &mut RawLease) -> Result<()> {
            unreachable!()
        }
        fn extend(&self, _: &mut RawLease, _: Ttl) -> Result<()> {
            unreachable!()
        }
        fn inspect(&self, _: &Key, _: LeaseKind) -> Result<KeyInfo> {
            unreachable!()
        }
    }

    #[test]
    fn a_polling_wait_makes_no_attempt_after_one_that_saw_the_end() {
        // Each attempt has a bound of its own: a second one after the wait's end could take the
        // call past wait + one attempt's bound.
        let slow = Slow {
            each: Duration::from_millis(60),
            attempts: AtomicU32::new(0),
        };
        let request = Request::exclusive(b"k", Duration::from_secs(1))
            .and_then(|r| r.waiting(Duration::from_millis(20)))
            .unwrap();
        let result = poll_acquire(&slow, &request);
        assert_eq!(slow.attempts.load(Ordering::Relaxed), 1);
        // The wait ends with that attempt's own reason, never a generic "held by another owner"
        // for a key the backend did not say was held.
        match result {
            Err(Error::NotAcquired(why)) => assert!(why.contains("left no validity"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_holders_expiry_wakes_on_time_and_the_heartbeat_does_not() {
        let end = Instant::now() + Duration::from_secs(10);
        let beat = next_wake(end, Some(Duration::from_millis(50)), None);
        assert!(!beat.on_time && beat.until < end);
        let expiry = next_wake(
            end,
            Some(Duration::from_secs(1)),
            Some(Duration::from_millis(5)),
        );
        assert!(expiry.on_time && expiry.left() <= Duration::from_millis(6));
        let far = next_wake(end, None, Some(Duration::from_secs(60)));
        assert_eq!(
            far,
            Wake {
                until: end,
                on_time: false
            }
        );
    }
}
