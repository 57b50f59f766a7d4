//! The lease lifecycle core owns for every backend: validity dated from the first send, and every
//! unknown outcome counted as a loss until a later call is confirmed (`docs/semantics.md` §3). A scripted
//! backend plays the server's side, so each rule is shown on its own, with no network in between.
//! Its own test binary: the simulated suspend moves the clock for the whole process.

use leasehold_core::{
    Client, Error, Key, KeyInfo, LeaseKind, LockBackend, RawLease, Request, Result, Token, Ttl,
};
use std::collections::VecDeque;
use std::sync::{Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

/// What the scripted server does with the next extend or release, and what the caller hears.
type Step = Box<dyn FnOnce(&mut RawLease, Option<Ttl>) -> Result<()> + Send>;

/// Grants every acquire; answers extends and releases from a script, in order.
#[derive(Default)]
struct Scripted {
    steps: Mutex<VecDeque<Step>>,
    /// Runs inside `try_acquire`, before the grant is dated (a retry, a suspend).
    on_acquire: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl Scripted {
    fn then(
        self,
        step: impl FnOnce(&mut RawLease, Option<Ttl>) -> Result<()> + Send + 'static,
    ) -> Self {
        self.steps.lock().unwrap().push_back(Box::new(step));
        self
    }

    fn next(&self, lease: &mut RawLease, ttl: Option<Ttl>) -> Result<()> {
        // Past the script (the release a dropped lease makes) the server simply agrees.
        let step = self
            .steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        step.map_or(Ok(()), |step| step(lease, ttl))
    }
}

impl LockBackend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        let (key, ttl) = (request.key(), request.ttl());
        if let Some(hook) = self.on_acquire.lock().unwrap().take() {
            hook();
        }
        Ok(RawLease::new(
            key.clone(),
            Token::generate()?,
            1,
            ttl,
            Instant::now(),
        ))
    }
    fn release(&self, lease: &mut RawLease) -> Result<()> {
        self.next(lease, None)
    }
    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        self.next(lease, Some(ttl))
    }
    fn inspect(&self, _: &Key, _: LeaseKind) -> Result<KeyInfo> {
        Ok(KeyInfo::default())
    }
}

/// The server ran the extend and answered: the backend dates it from when it heard back.
fn confirmed(lease: &mut RawLease, ttl: Option<Ttl>) -> Result<()> {
    if let Some(ttl) = ttl {
        lease.renewed(ttl, Instant::now());
    }
    Ok(())
}

fn timed_out(_: &mut RawLease, _: Option<Ttl>) -> Result<()> {
    Err(Error::Unavailable("no reply within the I/O timeout".into()))
}

fn gone(_: &mut RawLease, _: Option<Ttl>) -> Result<()> {
    Err(Error::Lost("the key does not hold this token".into()))
}

fn released(_: &mut RawLease, _: Option<Ttl>) -> Result<()> {
    Ok(())
}

const SECOND: Duration = Duration::from_secs(1);

/// The simulated suspend moves the clock of every lease in the process: the test that suspends runs
/// alone, the others together.
static CLOCK: RwLock<()> = RwLock::new(());

fn shared_clock() -> RwLockReadGuard<'static, ()> {
    CLOCK.read().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn an_extend_of_unknown_outcome_leaves_nothing_believed_until_one_is_confirmed() {
    let _clock = shared_clock();
    let client = Client::new(Scripted::default().then(timed_out).then(confirmed));
    let mut lease = client.try_acquire("k", 30 * SECOND).unwrap();
    let err = lease.extend(30 * SECOND).unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert_eq!(
        lease.remaining(),
        Duration::ZERO,
        "the key may have expired while the server did not answer"
    );
    assert!(!lease.is_held());
    lease.extend(30 * SECOND).unwrap();
    assert!(lease.remaining() > 29 * SECOND, "{:?}", lease.remaining());
}

#[test]
fn a_late_shorter_extend_caps_what_a_later_extend_proves() {
    let _clock = shared_clock();
    // extend(1 s) gets no reply; it may still run on the server after extend(30 s) and leave the
    // key 1 s from then. The confirmed extend proves only the shorter of the two.
    let client = Client::new(Scripted::default().then(timed_out).then(confirmed));
    let mut lease = client.try_acquire("k", 30 * SECOND).unwrap();
    let _ = lease.extend(SECOND);
    lease.extend(30 * SECOND).unwrap();
    assert!(
        lease.remaining() <= SECOND,
        "after a lost extend(1 s), extend(30 s) left remaining() = {:?}",
        lease.remaining()
    );
    assert!(lease.is_held());
}

#[test]
fn a_release_of_unknown_outcome_ends_the_lease_and_may_be_retried() {
    let _clock = shared_clock();
    let client = Client::new(
        Scripted::default()
            .then(timed_out)
            // The retry finds the key gone (the first release ran, or the key expired).
            .then(gone),
    );
    let mut lease = client.try_acquire("k", 30 * SECOND).unwrap();
    let err = lease.release_in_place().unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert_eq!(lease.remaining(), Duration::ZERO);
    assert!(!lease.is_held());
    let err = lease.extend(30 * SECOND).unwrap_err();
    assert!(
        matches!(err, Error::Lost(_)),
        "an extend after a release that may still run: {err:?}"
    );
    assert!(matches!(lease.keep_alive(true), Err(Error::Lost(_))));
    assert!(matches!(lease.release_in_place(), Err(Error::Lost(_))));
    assert!(lease.is_released());
}

#[test]
fn a_release_retried_on_a_confirmed_release_is_invalid() {
    let _clock = shared_clock();
    let client = Client::new(Scripted::default().then(released));
    let mut lease = client.try_acquire("k", 30 * SECOND).unwrap();
    lease.release_in_place().unwrap();
    assert!(matches!(
        lease.release_in_place(),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn an_extend_is_dated_from_before_its_first_send() {
    let _clock = shared_clock();
    // The backend's first attempt got no reply and its retry succeeded; the backend dates the
    // extend from the retry. The key is proven ours only from the first send.
    let retry_after = Duration::from_millis(300);
    let client = Client::new(Scripted::default().then(move |lease, ttl| {
        std::thread::sleep(retry_after);
        confirmed(lease, ttl)
    }));
    let mut lease = client.try_acquire("k", 30 * SECOND).unwrap();
    let before = Instant::now();
    lease.extend(10 * SECOND).unwrap();
    let limit = (10 * SECOND).saturating_sub(before.elapsed());
    assert!(
        lease.remaining() <= limit,
        "remaining() = {:?}, more than {limit:?} left from the first send",
        lease.remaining()
    );
}

#[test]
fn time_the_host_slept_during_a_round_trip_is_not_counted_as_held() {
    let _alone = CLOCK.write().unwrap_or_else(|p| p.into_inner());
    // The backend dates the grant by `Instant`, which stops while the host is suspended; the TTL
    // on the server does not. Core dates it on the boot clock before the call.
    let backend = Scripted::default().then(|lease, ttl| {
        leasehold_core::clock::simulate_suspend(5 * SECOND);
        confirmed(lease, ttl)
    });
    *backend.on_acquire.lock().unwrap() = Some(Box::new(|| {
        leasehold_core::clock::simulate_suspend(5 * SECOND)
    }));
    let client = Client::new(backend);
    let mut lease = client.try_acquire("k", 10 * SECOND).unwrap();
    assert!(
        lease.remaining() <= 5 * SECOND,
        "acquire: remaining() = {:?} after 5 s of a 10 s TTL were slept away",
        lease.remaining()
    );
    lease.extend(10 * SECOND).unwrap();
    assert!(
        lease.remaining() <= 5 * SECOND,
        "extend: remaining() = {:?} after 5 s of a 10 s TTL were slept away",
        lease.remaining()
    );
}

#[test]
fn a_checkpoint_stops_a_job_before_the_lease_runs_out() {
    let _clock = shared_clock();
    let client = Client::new(Scripted::default().then(timed_out).then(released));
    let mut lease = client.try_acquire("k", 30 * SECOND).unwrap();
    lease.checkpoint(Duration::ZERO).unwrap();
    lease.checkpoint(20 * SECOND).unwrap();
    assert!(!lease.at_risk(20 * SECOND));
    let short = lease.checkpoint(40 * SECOND).unwrap_err();
    assert!(matches!(short, Error::Lost(_)), "{short:?}");
    assert!(short.to_string().contains("margin"), "{short}");
    // An extend of unknown outcome: nothing may be relied on until one is confirmed.
    let _ = lease.extend(30 * SECOND);
    assert!(lease.at_risk(Duration::ZERO));
    assert!(matches!(
        lease.checkpoint(Duration::ZERO),
        Err(Error::Lost(_))
    ));
    let _ = lease.release_in_place();
    let gone = lease.checkpoint(Duration::ZERO).unwrap_err();
    assert!(matches!(gone, Error::Lost(_)), "{gone:?}");
}
