//! Shared locks and semaphores: every promise of a lease — TTL, token, fence,
//! compare-and-delete release, owner-only extend, bounded native waits — for each kind.

use super::{key, kind, run_checks, Check, LONG};
use crate::{Client, ErrorKind, LeaseKind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Shared (read) locks beside exclusive ones.
pub fn run_shared(new_client: &dyn Fn() -> Client) {
    let checks: &[Check] = &[
        ("shared_holders_coexist", shared_holders_coexist),
        ("exclusive_and_shared_exclude", exclusive_and_shared_exclude),
        (
            "expired_reader_frees_its_share_only",
            expired_reader_frees_its_share_only,
        ),
        (
            "waiting_writer_goes_before_new_readers",
            waiting_writer_goes_before_new_readers,
        ),
        ("shared_wait_ends_at_release", shared_wait_ends_at_release),
        ("shared_extend_is_owner_only", shared_extend_is_owner_only),
        ("interrupt_ends_a_shared_wait", interrupt_ends_a_shared_wait),
    ];
    run_checks(&new_client(), &new_client(), checks);
}

/// Counting semaphores.
pub fn run_semaphore(new_client: &dyn Fn() -> Client) {
    let checks: &[Check] = &[
        ("permits_limit_holders", permits_limit_holders),
        ("expired_permit_is_reclaimed", expired_permit_is_reclaimed),
        (
            "semaphores_are_their_own_namespace",
            semaphores_are_their_own_namespace,
        ),
        ("permit_wait_ends_at_release", permit_wait_ends_at_release),
        ("bad_permits_are_rejected", bad_permits_are_rejected),
        ("interrupt_ends_a_permit_wait", interrupt_ends_a_permit_wait),
    ];
    run_checks(&new_client(), &new_client(), checks);
}

/// One size per semaphore: while it has holders, an acquire with another `permits` is
/// `InvalidArgument`, at once; a new size is free once every holder is gone; acquirers of two
/// sizes racing never hold it under both at once. Every backend runs it beside
/// [`run_semaphore`] (a self-check backend may offer permits without it).
pub fn run_semaphore_size(new_client: &dyn Fn() -> Client) {
    let checks: &[Check] = &[(
        "a_semaphore_refuses_another_size_while_held",
        a_semaphore_refuses_another_size_while_held,
    )];
    run_checks(&new_client(), &new_client(), checks);
    let clients: Vec<Client> = (0..RACERS).map(|_| new_client()).collect();
    eprintln!(
        "conformance[{}]: racing_sizes_never_overlap",
        clients[0].backend_name()
    );
    racing_sizes_never_overlap(clients);
}

/// Clients racing for one semaphore in [`racing_sizes_never_overlap`], half of them per size.
const RACERS: usize = 6;

/// Acquirers of two sizes racing for a semaphore, over and over, never hold it under both at once:
/// each holder counts itself in while it holds, so a grant of one size beside a holder of the other
/// shows in the counts. The race runs on several keys in turn, since a backend's lock internals
/// (a lock table partition, a cluster slot) follow from the key, and so may its windows.
fn racing_sizes_never_overlap(clients: Vec<Client>) {
    const KEYS: usize = 4;
    const ROUNDS: usize = 25;
    let keys: Vec<Vec<u8>> = (0..KEYS).map(|_| key("sem-racing-sizes")).collect();
    let granted = AtomicUsize::new(0);
    // Holders per key and size (threads move through the keys at their own pace).
    let inside: Vec<[AtomicUsize; 2]> = (0..KEYS)
        .map(|_| [0, 1].map(|_| AtomicUsize::new(0)))
        .collect();
    std::thread::scope(|scope| {
        let (inside, keys, granted) = (&inside, &keys, &granted);
        for (t, client) in clients.into_iter().enumerate() {
            scope.spawn(move || {
                let (mine, other) = (t % 2, 1 - t % 2);
                let permits = 2 + mine as u32;
                for (k, inside) in keys.iter().zip(inside) {
                    for _ in 0..ROUNDS {
                        match client.try_acquire_permit(k, permits, LONG) {
                            Ok(permit) => {
                                inside[mine].fetch_add(1, Ordering::SeqCst);
                                assert_eq!(
                                    inside[other].load(Ordering::SeqCst),
                                    0,
                                    "granted {permits} permits while holders of {} held {}",
                                    2 + other,
                                    String::from_utf8_lossy(k)
                                );
                                granted.fetch_add(1, Ordering::Relaxed);
                                std::thread::yield_now();
                                inside[mine].fetch_sub(1, Ordering::SeqCst);
                                permit.release().unwrap();
                            }
                            Err(e) => assert!(
                                matches!(
                                    e.kind(),
                                    ErrorKind::InvalidArgument | ErrorKind::NotAcquired
                                ),
                                "a refusal, not {e}"
                            ),
                        }
                    }
                }
            });
        }
    });
    assert!(granted.into_inner() > 0, "some acquires were granted");
}

fn interrupt_ends_a_shared_wait(a: &Client, b: &Client) {
    // A shared wait behind an exclusive holder.
    super::interrupt_wait_of(
        a,
        b,
        |c, k| c.try_acquire(k, LONG),
        |c, k| c.acquire_shared(k, LONG, Duration::from_secs(20)),
    );
}

fn interrupt_ends_a_permit_wait(a: &Client, b: &Client) {
    // One permit, held: the next waits.
    super::interrupt_wait_of(
        a,
        b,
        |c, k| c.try_acquire_permit(k, 1, LONG),
        |c, k| c.acquire_permit(k, 1, LONG, Duration::from_secs(20)),
    );
}

fn shared_holders_coexist(a: &Client, b: &Client) {
    let k = key("shared");
    let r1 = a.try_acquire_shared(&k, LONG).expect("first reader");
    let r2 = b
        .try_acquire_shared(&k, LONG)
        .expect("second reader at once");
    assert_eq!(r1.kind(), LeaseKind::Shared);
    assert_ne!(r1.token(), r2.token());
    assert!(r2.fence() > r1.fence(), "every grant gets a larger fence");
    assert_eq!(kind(a.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    assert!(a.inspect(&k).unwrap().held);
    r1.release().unwrap();
    assert_eq!(
        kind(a.try_acquire(&k, LONG)),
        ErrorKind::NotAcquired,
        "one reader is left"
    );
    let f2 = r2.fence();
    r2.release().unwrap();
    let w = a
        .try_acquire(&k, LONG)
        .expect("free once every reader left");
    assert!(w.fence() > f2);
    w.release().unwrap();
    assert_eq!(a.stats().acquired_shared, 1);
}

fn exclusive_and_shared_exclude(a: &Client, b: &Client) {
    let k = key("shared-excl");
    let w = a.try_acquire(&k, LONG).unwrap();
    assert_eq!(kind(b.try_acquire_shared(&k, LONG)), ErrorKind::NotAcquired);
    let fw = w.fence();
    w.release().unwrap();
    let r = b.try_acquire_shared(&k, LONG).unwrap();
    assert!(r.fence() > fw);
    r.release().unwrap();
}

fn expired_reader_frees_its_share_only(a: &Client, b: &Client) {
    let k = key("shared-expiry");
    let short = a
        .try_acquire_shared(&k, Duration::from_millis(100))
        .unwrap();
    let long = b.try_acquire_shared(&k, LONG).unwrap();
    super::sleep_past_expiry(Duration::from_millis(350));
    assert_eq!(
        kind(a.try_acquire(&k, LONG)),
        ErrorKind::NotAcquired,
        "the other reader still holds its share"
    );
    assert_eq!(kind(short.release()), ErrorKind::Lost);
    long.release().unwrap();
    // A reader that outlived its TTL no longer blocks a writer.
    let stale = a
        .try_acquire_shared(&k, Duration::from_millis(100))
        .unwrap();
    super::sleep_past_expiry(Duration::from_millis(350));
    let w = b.try_acquire(&k, LONG).expect("expired reader is gone");
    assert_eq!(kind(stale.release()), ErrorKind::Lost);
    w.release().unwrap();
}

fn waiting_writer_goes_before_new_readers(a: &Client, b: &Client) {
    let k = key("shared-writer");
    let reader = a.try_acquire_shared(&k, LONG).unwrap();
    let writer_client = b.clone();
    let wk = k.clone();
    let writer = std::thread::spawn(move || {
        writer_client
            .acquire(&wk, LONG, Duration::from_secs(10))
            .map(|l| (l.fence(), l))
    });
    // Once the writer waits, readers arriving after it wait too: a stream of readers cannot
    // starve it.
    let mut refused = false;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        match a.try_acquire_shared(&k, LONG) {
            Ok(extra) => extra.release().unwrap(),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::NotAcquired, "{e}");
                refused = true;
                break;
            }
        }
    }
    assert!(refused, "new readers kept getting in while a writer waited");
    let fr = reader.fence();
    reader.release().unwrap();
    let (fw, w) = writer.join().unwrap().expect("the writer gets the key");
    assert!(fw > fr);
    w.release().unwrap();
}

fn shared_wait_ends_at_release(a: &Client, b: &Client) {
    let k = key("shared-wait");
    let w = a.try_acquire(&k, LONG).unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        w.release().unwrap();
    });
    let start = Instant::now();
    let r = b
        .acquire_shared(&k, LONG, Duration::from_secs(10))
        .expect("a waiting reader gets in");
    assert!(start.elapsed() < Duration::from_secs(5));
    releaser.join().unwrap();
    r.release().unwrap();
    let w = a.try_acquire(&k, LONG).unwrap();
    let start = Instant::now();
    assert_eq!(
        kind(b.acquire_shared(&k, LONG, Duration::from_millis(300))),
        ErrorKind::NotAcquired
    );
    assert!(start.elapsed() >= Duration::from_millis(290));
    w.release().unwrap();
}

fn shared_extend_is_owner_only(a: &Client, b: &Client) {
    let k = key("shared-extend");
    let mut r = a
        .try_acquire_shared(&k, Duration::from_millis(300))
        .unwrap();
    r.extend(Duration::from_secs(20)).expect("owner extends");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(kind(b.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    let mut stale = a
        .try_acquire_shared(&k, Duration::from_millis(100))
        .unwrap();
    super::sleep_past_expiry(Duration::from_millis(350));
    assert_eq!(
        kind(stale.extend(LONG)),
        ErrorKind::Lost,
        "an expired share"
    );
    r.release().unwrap();
}

fn permits_limit_holders(a: &Client, b: &Client) {
    let k = key("sem");
    let mut held = Vec::new();
    for i in 0..3 {
        let c = if i % 2 == 0 { a } else { b };
        let p = c.try_acquire_permit(&k, 3, LONG).expect("a permit is free");
        assert!(matches!(p.kind(), LeaseKind::Permit(n) if n.get() == 3));
        if let Some(last) = held.last() {
            let last: &crate::Lease = last;
            assert!(p.fence() > last.fence(), "permits get rising fences");
        }
        held.push(p);
    }
    assert_eq!(
        kind(b.try_acquire_permit(&k, 3, LONG)),
        ErrorKind::NotAcquired
    );
    let first = held.remove(0);
    let f = held.iter().map(|l| l.fence()).max().unwrap();
    first.release().unwrap();
    let again = b
        .try_acquire_permit(&k, 3, LONG)
        .expect("a released permit is free");
    assert!(again.fence() > f);
    assert_eq!(
        kind(a.try_acquire_permit(&k, 3, LONG)),
        ErrorKind::NotAcquired
    );
    held.push(again);
    for p in held {
        p.release().unwrap();
    }
    assert!(a.stats().acquired_permit >= 1);
}

fn expired_permit_is_reclaimed(a: &Client, b: &Client) {
    let k = key("sem-expiry");
    let mut short = a
        .try_acquire_permit(&k, 1, Duration::from_millis(100))
        .unwrap();
    super::sleep_past_expiry(Duration::from_millis(350));
    let next = b
        .try_acquire_permit(&k, 1, LONG)
        .expect("the next acquire reclaims an expired permit");
    assert!(next.fence() > short.fence());
    assert_eq!(kind(short.extend(LONG)), ErrorKind::Lost);
    assert_eq!(kind(short.release_in_place()), ErrorKind::Lost);
    assert_eq!(
        kind(a.try_acquire_permit(&k, 1, LONG)),
        ErrorKind::NotAcquired
    );
    next.release().unwrap();
}

fn semaphores_are_their_own_namespace(a: &Client, b: &Client) {
    let k = key("sem-ns");
    let lock = a.try_acquire(&k, LONG).unwrap();
    let permit = b
        .try_acquire_permit(&k, 1, LONG)
        .expect("a semaphore does not see the lock of the same name");
    lock.release().unwrap();
    assert_eq!(
        kind(a.try_acquire_permit(&k, 1, LONG)),
        ErrorKind::NotAcquired
    );
    let lock = a.try_acquire(&k, LONG).expect("nor the lock the semaphore");
    permit.release().unwrap();
    lock.release().unwrap();
}

fn permit_wait_ends_at_release(a: &Client, b: &Client) {
    let k = key("sem-wait");
    let p = a.try_acquire_permit(&k, 1, LONG).unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        p.release().unwrap();
    });
    let start = Instant::now();
    let next = b
        .acquire_permit(&k, 1, LONG, Duration::from_secs(10))
        .expect("a waiter gets the released permit");
    assert!(start.elapsed() < Duration::from_secs(5));
    releaser.join().unwrap();
    let start = Instant::now();
    assert_eq!(
        kind(a.acquire_permit(&k, 1, LONG, Duration::from_millis(300))),
        ErrorKind::NotAcquired
    );
    assert!(start.elapsed() >= Duration::from_millis(290));
    next.release().unwrap();
}

fn bad_permits_are_rejected(a: &Client, _: &Client) {
    let k = key("sem-bad");
    for permits in [0, crate::MAX_PERMITS + 1, u32::MAX] {
        assert_eq!(
            kind(a.try_acquire_permit(&k, permits, LONG)),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(a.acquire_permit(&k, permits, LONG, Duration::from_millis(10))),
            ErrorKind::InvalidArgument
        );
    }
    a.try_acquire_permit(&k, crate::MAX_PERMITS, LONG)
        .expect("the largest semaphore")
        .release()
        .unwrap();
}

fn a_semaphore_refuses_another_size_while_held(a: &Client, b: &Client) {
    let k = key("sem-size");
    let first = a.try_acquire_permit(&k, 3, LONG).unwrap();
    match b.try_acquire_permit(&k, 5, LONG) {
        Err(crate::Error::InvalidArgument(m)) => {
            assert!(m.contains('3') && m.contains('5'), "names both sizes: {m}")
        }
        other => panic!("another size while held: {other:?}"),
    }
    let start = Instant::now();
    assert_eq!(
        kind(b.acquire_permit(&k, 5, LONG, Duration::from_secs(2))),
        ErrorKind::InvalidArgument,
        "a waiting acquire of another size"
    );
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "refused at the first attempt, not at the wait's end: {:?}",
        start.elapsed()
    );
    let second = b
        .try_acquire_permit(&k, 3, LONG)
        .expect("the same size still works");
    first.release().unwrap();
    assert_eq!(
        kind(a.try_acquire_permit(&k, 5, LONG)),
        ErrorKind::InvalidArgument,
        "one holder left is enough to keep the size"
    );
    second.release().unwrap();
    let resized = a
        .try_acquire_permit(&k, 5, LONG)
        .expect("a new size once nobody holds the semaphore");
    assert!(matches!(resized.kind(), LeaseKind::Permit(n) if n.get() == 5));
    assert_eq!(
        kind(b.try_acquire_permit(&k, 3, LONG)),
        ErrorKind::InvalidArgument,
        "the old size is refused now"
    );
    resized.release().unwrap();

    // An expired holder keeps no size.
    let k = key("sem-size-expiry");
    a.try_acquire_permit(&k, 2, Duration::from_millis(300))
        .unwrap()
        .forget();
    super::sleep_past_expiry(Duration::from_millis(500));
    b.try_acquire_permit(&k, 4, LONG)
        .expect("an expired holder does not keep its size")
        .release()
        .unwrap();
}

/// Threads contending for a semaphore of `permits`: never more than `permits` holders at once, and
/// every cycle completes.
pub fn semaphore_limit(client: &Client, permits: u32, threads: usize, cycles: usize) {
    let k = key("sem-limit");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (client, k, inside, most) =
                (client.clone(), k.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                for _ in 0..cycles {
                    let p = client
                        .acquire_permit(&k, permits, LONG, Duration::from_secs(30))
                        .expect("a permit within the wait");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    p.release().expect("release");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= permits as usize,
        "{most} holders at once on a semaphore of {permits}"
    );
}
