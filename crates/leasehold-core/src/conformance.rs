//! The conformance suite: the whole lease contract of `docs/semantics.md`, run against any backend. Every
//! backend's tests call [`run`] (and [`mutual_exclusion`] for contention). Failures panic with the
//! name of the check, as a test wants.
//!
//! Timing checks use generous bounds: they prove behaviour on a loaded 2-core CI machine, they are not
//! benchmarks.

mod kinds;
mod once;
mod promote;
mod records;
mod restore;
pub mod stopped;

pub use kinds::{run_semaphore, run_semaphore_size, run_shared, semaphore_limit};
pub use once::run_once;
pub use promote::run_promote;
pub use records::run_records;
pub use restore::{run_force_release, run_restore, run_restore_refused};

use crate::{Client, Error, ErrorKind, Lease, MAX_KEY_LEN};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const LONG: Duration = Duration::from_secs(30);

/// How much later than a lease's TTL the backend may free its key, in ms ([`allow_expiry_lag`]).
static EXPIRY_LAG_MS: AtomicU64 = AtomicU64::new(0);

/// Tells the checks that wait for a lease to expire that the backend frees an expired key up to
/// `lag` later than its TTL. For etcd: a lease lives for whole seconds and at least the server's
/// minimum, so another client takes over a short lease only then; the holder still stops relying
/// on it at its own TTL, which every check keeps asserting. Zero (the default) for the backends
/// that free a key at its TTL.
pub fn allow_expiry_lag(lag: Duration) {
    let ms = u64::try_from(lag.as_millis()).unwrap_or(u64::MAX);
    EXPIRY_LAG_MS.store(ms, Ordering::Relaxed);
}

/// Sleeps `d`, which the check chose to outlast a short lease's TTL, plus the backend's lag.
pub(crate) fn sleep_past_expiry(d: Duration) {
    let lag = Duration::from_millis(EXPIRY_LAG_MS.load(Ordering::Relaxed));
    std::thread::sleep(d.saturating_add(lag));
}

/// One named check; it gets two clients on the same backend.
pub(crate) type Check = (&'static str, fn(&Client, &Client));

/// Runs every check. `new_client` must return a fresh client on the same backend each call (two
/// clients stand for two processes).
pub fn run(new_client: &dyn Fn() -> Client) {
    let a = new_client();
    let b = new_client();
    let checks: &[Check] = &[
        (
            "acquire_gives_token_fence_remaining",
            acquire_gives_token_fence_remaining,
        ),
        ("held_key_is_not_acquired", held_key_is_not_acquired),
        (
            "release_frees_and_fence_increases",
            release_frees_and_fence_increases,
        ),
        ("release_twice_is_invalid", release_twice_is_invalid),
        ("drop_releases", drop_releases),
        (
            "extend_by_owner_keeps_the_key",
            extend_by_owner_keeps_the_key,
        ),
        ("expired_lease_is_taken_over", expired_lease_is_taken_over),
        (
            "late_release_is_lost_and_holder_keeps_key",
            late_release_is_lost_and_holder_keeps_key,
        ),
        ("late_extend_is_lost", late_extend_is_lost),
        ("acquire_waits_for_release", acquire_waits_for_release),
        ("acquire_gives_up_after_wait", acquire_gives_up_after_wait),
        ("interrupt_ends_a_wait", interrupt_ends_a_wait),
        (
            "lock_delay_holds_an_expired_key",
            lock_delay_holds_an_expired_key,
        ),
        ("binary_keys_work_and_differ", binary_keys_work_and_differ),
        (
            "bad_inputs_are_rejected_and_harmless",
            bad_inputs_are_rejected_and_harmless,
        ),
        ("fence_strictly_increases", fence_strictly_increases),
        ("inspect_reports_state", inspect_reports_state),
        ("lease_outlives_its_client", lease_outlives_its_client),
        (
            "keep_alive_renews_until_release",
            keep_alive_renews_until_release,
        ),
        ("stats_count_what_happens", stats_count_what_happens),
    ];
    run_checks(&a, &b, checks);
}

pub(crate) fn run_checks(a: &Client, b: &Client, checks: &[Check]) {
    for (name, check) in checks {
        eprintln!("conformance[{}]: {name}", a.backend_name());
        check(a, b);
    }
}

pub(crate) fn key(label: &str) -> Vec<u8> {
    use std::sync::atomic::AtomicU64;
    static N: AtomicU64 = AtomicU64::new(0);
    let mut random = [0u8; 8];
    let _ = getrandom::fill(&mut random);
    format!(
        "conformance:{label}:{:016x}:{}",
        u64::from_le_bytes(random),
        N.fetch_add(1, Ordering::Relaxed)
    )
    .into_bytes()
}

pub(crate) fn kind<T: std::fmt::Debug>(r: Result<T, Error>) -> ErrorKind {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.kind(),
    }
}

fn acquire_gives_token_fence_remaining(a: &Client, _: &Client) {
    let ttl = Duration::from_secs(10);
    let lease = a
        .try_acquire(key("basic"), ttl)
        .expect("try_acquire a free key");
    let token = lease.token();
    assert_eq!(token.as_str().len(), 32);
    assert!(token
        .as_str()
        .bytes()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert!(lease.fence() >= 1, "fences start at 1");
    let left = lease.remaining();
    assert!(
        left > Duration::from_secs(5) && left < ttl,
        "remaining {left:?}"
    );
    assert!(lease.is_held());
    let other = a.try_acquire(key("basic"), ttl).expect("another key");
    assert_ne!(other.token(), token, "tokens are unique per acquisition");
    lease.release().expect("release");
    other.release().expect("release");
}

fn held_key_is_not_acquired(a: &Client, b: &Client) {
    let k = key("held");
    let lease = a.try_acquire(&k, LONG).unwrap();
    assert_eq!(kind(b.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    assert_eq!(
        kind(a.try_acquire(&k, LONG)),
        ErrorKind::NotAcquired,
        "not reentrant"
    );
    lease.release().unwrap();
}

fn release_frees_and_fence_increases(a: &Client, b: &Client) {
    let k = key("release");
    let first = a.try_acquire(&k, LONG).unwrap();
    let f1 = first.fence();
    first.release().unwrap();
    let second = b.try_acquire(&k, LONG).expect("free after release");
    assert!(second.fence() > f1, "fence {} after {f1}", second.fence());
    second.release().unwrap();
}

fn release_twice_is_invalid(a: &Client, _: &Client) {
    let mut lease = a.try_acquire(key("twice"), LONG).unwrap();
    lease.release_in_place().unwrap();
    assert!(lease.is_released());
    assert_eq!(lease.remaining(), Duration::ZERO);
    let err = lease.release_in_place().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("already released"), "{err}");
    assert_eq!(kind(lease.extend(LONG)), ErrorKind::InvalidArgument);
}

fn drop_releases(a: &Client, b: &Client) {
    let k = key("drop");
    drop(a.try_acquire(&k, LONG).unwrap());
    b.try_acquire(&k, LONG)
        .expect("dropped lease was released")
        .release()
        .unwrap();
}

fn extend_by_owner_keeps_the_key(a: &Client, b: &Client) {
    let k = key("extend");
    let mut lease = a.try_acquire(&k, Duration::from_millis(400)).unwrap();
    lease
        .extend(Duration::from_secs(20))
        .expect("owner extends");
    // Well past the first TTL; not necessarily the whole 20 s: a backend may rely on a lease for
    // less than its TTL (PostgreSQL advisory: ~10 s from the last call, see `Pools::alive_until`).
    assert!(lease.remaining() > Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        kind(b.try_acquire(&k, LONG)),
        ErrorKind::NotAcquired,
        "extended past the first TTL"
    );
    lease
        .extend(Duration::from_millis(50))
        .expect("extend may shorten");
    assert!(lease.remaining() <= Duration::from_millis(50));
    lease.release().unwrap();
}

fn expired_lease_is_taken_over(a: &Client, b: &Client) {
    let k = key("expiry");
    let lease = a.try_acquire(&k, Duration::from_millis(100)).unwrap();
    sleep_past_expiry(Duration::from_millis(350));
    assert!(!lease.is_held(), "remaining is local and conservative");
    let taker = b
        .try_acquire(&k, LONG)
        .expect("an expired lease frees the key");
    assert!(taker.fence() > lease.fence());
    taker.release().unwrap();
    assert_eq!(kind(lease.release()), ErrorKind::Lost);
}

/// The central scenario of fencing: A's lease expires during its work, B takes the key, A's late release
/// is refused and B still holds the key.
fn late_release_is_lost_and_holder_keeps_key(a: &Client, b: &Client) {
    let k = key("late-release");
    let mut stale = a.try_acquire(&k, Duration::from_millis(100)).unwrap();
    sleep_past_expiry(Duration::from_millis(350));
    let holder = b.try_acquire(&k, LONG).unwrap();
    let err = stale.release_in_place().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert_eq!(
        kind(a.try_acquire(&k, LONG)),
        ErrorKind::NotAcquired,
        "B still holds it"
    );
    let mut holder = holder;
    holder.extend(LONG).expect("B's lease is intact");
    holder.release().expect("B releases its own lease");
}

fn late_extend_is_lost(a: &Client, b: &Client) {
    let k = key("late-extend");
    let mut stale = a.try_acquire(&k, Duration::from_millis(100)).unwrap();
    sleep_past_expiry(Duration::from_millis(350));
    let holder = b.try_acquire(&k, LONG).unwrap();
    assert_eq!(kind(stale.extend(LONG)), ErrorKind::Lost);
    assert_eq!(stale.remaining(), Duration::ZERO);
    assert_eq!(kind(stale.release()), ErrorKind::Lost);
    assert_eq!(kind(a.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    holder.release().unwrap();
}

fn acquire_waits_for_release(a: &Client, b: &Client) {
    let k = key("wait");
    let lease = a.try_acquire(&k, LONG).unwrap();
    let fence = lease.fence();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        lease.release().unwrap();
    });
    let start = Instant::now();
    let next = b
        .acquire(&k, LONG, Duration::from_secs(20))
        .expect("waiter gets the released key");
    let waited = start.elapsed();
    releaser.join().unwrap();
    assert!(waited >= Duration::from_millis(100), "waited {waited:?}");
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    assert!(next.fence() > fence);
    next.release().unwrap();
}

/// `Client::interrupt` ends a wait in progress with `Interrupted` (the contract says within
/// 100 ms; the figure is printed, the assertion only rules out a wait that ran on), leaves the
/// holder alone and leaves later waits alone.
pub(crate) fn interrupt_wait_of(
    a: &Client,
    b: &Client,
    take: fn(&Client, &[u8]) -> Result<Lease, Error>,
    wait: fn(&Client, &[u8]) -> Result<Lease, Error>,
) {
    let k = key("interrupt");
    let lease = take(a, &k).unwrap();
    let (waiter, k2) = (b.clone(), k.clone());
    let waiting = std::thread::spawn(move || wait(&waiter, &k2));
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    b.interrupt();
    let result = waiting.join().unwrap();
    let took = asked.elapsed();
    eprintln!(
        "conformance[{}]: a wait ended {} ms after the interrupt",
        b.backend_name(),
        took.as_millis()
    );
    assert_eq!(kind(result), ErrorKind::Interrupted);
    assert!(took < Duration::from_secs(2), "the interrupt took {took:?}");
    // (Advisory leases cap what they claim at the session's dead-peer bound, 10 s.)
    assert!(lease.remaining() > Duration::from_secs(5));
    // Nothing of the interrupted wait is left in the way, and the next wait is not interrupted.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        lease.release().unwrap();
    });
    let next = wait(b, &k).expect("a later wait is not interrupted");
    releaser.join().unwrap();
    next.release().unwrap();
}

fn interrupt_ends_a_wait(a: &Client, b: &Client) {
    interrupt_wait_of(
        a,
        b,
        |c, k| c.try_acquire(k, LONG),
        |c, k| c.acquire(k, LONG, Duration::from_secs(20)),
    );
}

/// Lock-delay: a lease that expires unreleased keeps its key from others for the delay past its
/// TTL; the holder never counts the delay; a released key is free at once; a waiter gets an
/// expired key once the delay is over. (The delay is the client's, so any backend is asked the
/// same: to hold each lease for its TTL plus the delay.)
fn lock_delay_holds_an_expired_key(a: &Client, b: &Client) {
    let ttl = Duration::from_millis(600);
    let delay = Duration::from_millis(1500);
    let delayed = Client::from_arc(a.backend().clone()).with_lock_delay(delay);
    let k = key("lock-delay");
    let start = Instant::now();
    let lease = delayed.try_acquire(&k, ttl).unwrap();
    assert!(lease.remaining() <= ttl, "{:?}", lease.remaining());
    // The holder stalls and never releases (a crash would do the same).
    lease.forget();
    std::thread::sleep((ttl + Duration::from_millis(200)).saturating_sub(start.elapsed()));
    let asked = start.elapsed();
    let early = b.try_acquire(&k, LONG);
    if asked < ttl + delay - Duration::from_millis(200) {
        assert_eq!(
            kind(early),
            ErrorKind::NotAcquired,
            "free {asked:?} after an acquire with ttl {ttl:?} and a lock-delay of {delay:?}"
        );
    }
    // A waiter gets the key once the delay is over.
    let next = b
        .acquire(&k, LONG, Duration::from_secs(10))
        .expect("free after the delay");
    let freed = start.elapsed();
    assert!(
        freed >= ttl + delay - Duration::from_millis(50),
        "freed after {freed:?}"
    );
    assert!(freed < Duration::from_secs(8), "freed after {freed:?}");
    next.release().unwrap();
    // Released: free at once, delay or not.
    let k = key("lock-delay-released");
    let lease = delayed.try_acquire(&k, LONG).unwrap();
    lease.release().unwrap();
    b.try_acquire(&k, LONG)
        .expect("a released key is free at once")
        .release()
        .unwrap();
    // Extends ask for the delay too: a lease extended, then left to expire, is held past its TTL.
    let k = key("lock-delay-extended");
    let mut lease = delayed.try_acquire(&k, ttl).unwrap();
    lease.extend(ttl).unwrap();
    assert!(lease.remaining() <= ttl);
    let extended = Instant::now();
    lease.forget();
    std::thread::sleep((ttl + Duration::from_millis(200)).saturating_sub(extended.elapsed()));
    if extended.elapsed() < ttl + delay - Duration::from_millis(200) {
        assert_eq!(kind(b.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    }
}

fn acquire_gives_up_after_wait(a: &Client, b: &Client) {
    let k = key("timeout");
    let lease = a.try_acquire(&k, LONG).unwrap();
    let start = Instant::now();
    assert_eq!(
        kind(b.acquire(&k, LONG, Duration::from_millis(300))),
        ErrorKind::NotAcquired
    );
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(290),
        "gave up early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "gave up late: {waited:?}");
    assert_eq!(
        kind(b.acquire(&k, LONG, Duration::ZERO)),
        ErrorKind::NotAcquired
    );
    lease.release().unwrap();
}

fn binary_keys_work_and_differ(a: &Client, b: &Client) {
    let base = key("binary");
    let mut odd = base.clone();
    odd.extend_from_slice(b"\0\xff\xfe*?[]{}'\"%_\\\n ");
    let mut longest = odd.clone();
    longest.resize(MAX_KEY_LEN, b'z');
    let mut near = longest.clone();
    *near.last_mut().unwrap() = b'y';
    let held: Vec<Lease> = [&base, &odd, &longest, &near]
        .iter()
        .map(|k| {
            a.try_acquire(k, LONG)
                .expect("binary-safe keys that differ never contend")
        })
        .collect();
    for k in [&base, &odd, &longest, &near] {
        assert_eq!(kind(b.try_acquire(k, LONG)), ErrorKind::NotAcquired);
    }
    for lease in held {
        lease.release().unwrap();
    }
    b.try_acquire(&odd, LONG).unwrap().release().unwrap();
}

fn bad_inputs_are_rejected_and_harmless(a: &Client, b: &Client) {
    let k = key("bad-input");
    let mut lease = a.try_acquire(&k, LONG).unwrap();
    let invalid = ErrorKind::InvalidArgument;
    assert_eq!(kind(a.try_acquire(b"", LONG)), invalid);
    assert_eq!(
        kind(a.try_acquire(vec![b'k'; MAX_KEY_LEN + 1], LONG)),
        invalid
    );
    assert_eq!(kind(a.try_acquire(vec![b'k'; 1 << 20], LONG)), invalid);
    for ms in [0u64, 1 << 31, 1 << 63, u64::MAX] {
        let ttl = Duration::from_millis(ms);
        assert_eq!(kind(a.try_acquire(&k, ttl)), invalid, "ttl {ms} ms");
        assert_eq!(
            kind(a.acquire(&k, ttl, Duration::ZERO)),
            invalid,
            "ttl {ms} ms"
        );
        assert_eq!(kind(lease.extend(ttl)), invalid, "extend {ms} ms");
    }
    assert_eq!(
        kind(a.acquire(&k, LONG, Duration::from_millis(u64::MAX))),
        invalid
    );
    assert_eq!(kind(a.acquire(&k, LONG, Duration::MAX)), invalid);
    assert_eq!(kind(a.inspect(b"")), invalid);
    // The lease survived all of that.
    assert!(lease.is_held());
    assert_eq!(kind(b.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    lease.extend(LONG).unwrap();
    lease.release().unwrap();
}

fn fence_strictly_increases(a: &Client, b: &Client) {
    let k = key("fence");
    let mut last = 0;
    for i in 0..100 {
        let c = if i % 2 == 0 { a } else { b };
        let lease = c.try_acquire(&k, LONG).unwrap();
        assert!(lease.fence() > last, "fence {} after {last}", lease.fence());
        last = lease.fence();
        lease.release().unwrap();
    }
}

fn inspect_reports_state(a: &Client, b: &Client) {
    let k = key("inspect");
    assert!(!b.inspect(&k).unwrap().held);
    let lease = a.try_acquire(&k, LONG).unwrap();
    let info = b.inspect(&k).unwrap();
    assert!(info.held);
    if let Some(left) = info.remaining {
        assert!(left <= LONG && left > Duration::from_secs(20), "{left:?}");
    }
    if let Some(fence) = info.fence {
        assert_eq!(fence, lease.fence());
    }
    lease.release().unwrap();
    assert!(!b.inspect(&k).unwrap().held);
}

fn lease_outlives_its_client(_: &Client, b: &Client) {
    let k = key("outlives");
    let owner = b.clone();
    let lease = owner.try_acquire(&k, LONG).unwrap();
    drop(owner);
    lease.release().expect("a lease keeps its backend alive");
}

fn keep_alive_renews_until_release(a: &Client, b: &Client) {
    let k = key("keep-alive");
    // Renewed every third of its TTL, so a renewal may come up to two thirds late (600 ms): a
    // shorter TTL would be lost to a keep-alive thread merely descheduled on a loaded machine.
    let lease = a.try_acquire(&k, Duration::from_millis(900)).unwrap();
    lease.keep_alive(true).unwrap();
    assert!(lease.keeps_alive());
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            kind(b.try_acquire(&k, LONG)),
            ErrorKind::NotAcquired,
            "kept alive past twice its 900 ms TTL"
        );
        assert!(lease.is_held(), "remaining follows the renewals");
    }
    assert_eq!(lease.keep_alive_error(), None);
    lease.keep_alive(false).unwrap();
    lease
        .release()
        .expect("a kept-alive lease releases normally");
    b.try_acquire(&k, LONG)
        .expect("free after release")
        .release()
        .unwrap();
}

fn stats_count_what_happens(a: &Client, b: &Client) {
    let k = key("stats");
    let before = a.stats();
    let mut lease = a.try_acquire(&k, LONG).unwrap();
    assert_eq!(kind(a.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    lease.extend(LONG).unwrap();
    lease.release().unwrap();
    let stale = a.try_acquire(&k, Duration::from_millis(50)).unwrap();
    sleep_past_expiry(Duration::from_millis(200));
    let taker = b.try_acquire(&k, LONG).unwrap();
    assert_eq!(kind(stale.release()), ErrorKind::Lost);
    taker.release().unwrap();
    assert_eq!(kind(a.try_acquire(b"", LONG)), ErrorKind::InvalidArgument);
    let after = a.stats();
    let delta = |f: fn(&crate::StatsSnapshot) -> u64| f(&after) - f(&before);
    assert_eq!(delta(|s| s.acquire_attempts), 3);
    assert_eq!(delta(|s| s.acquired), 2);
    assert_eq!(delta(|s| s.not_acquired), 1);
    assert_eq!(delta(|s| s.extends_ok), 1);
    assert_eq!(delta(|s| s.releases_ok), 1);
    assert_eq!(delta(|s| s.releases_lost), 1);
    assert_eq!(delta(|s| s.expired), 1);
    assert_eq!(delta(|s| s.hold.count), 1);
    assert_eq!(delta(|s| s.wait.count), 3);
    let invalid = |s: &crate::StatsSnapshot| {
        s.errors
            .iter()
            .find(|(k, _)| *k == ErrorKind::InvalidArgument)
            .map_or(0, |e| e.1)
    };
    assert_eq!(invalid(&after) - invalid(&before), 1);
}

/// `threads` threads × `cycles` cycles of acquire / read-increment-write / release on one key, with a
/// counter that is deliberately not atomic across the read and the write: any overlap of critical
/// sections loses an increment or trips the overlap flag.
pub fn mutual_exclusion(client: &Client, threads: usize, cycles: usize) {
    let k = key("exclusion");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (client, k, counter, inside) =
                (client.clone(), k.clone(), counter.clone(), inside.clone());
            std::thread::spawn(move || {
                for _ in 0..cycles {
                    let lease = client
                        .acquire(&k, Duration::from_secs(30), Duration::from_secs(60))
                        .expect("acquire under contention");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    let seen = counter.load(Ordering::SeqCst);
                    std::thread::yield_now();
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    lease.release().expect("release under contention");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("contention thread");
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        (threads * cycles) as u64,
        "lost increments"
    );
}
