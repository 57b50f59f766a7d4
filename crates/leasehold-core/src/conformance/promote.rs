//! Promote (shared → exclusive) and demote (exclusive → shared) of a held lease, keeping its token.

use super::{key, kind, run_checks, Check, LONG};
use crate::{Client, ErrorKind, LeaseKind};
use std::time::{Duration, Instant};

/// Promote and demote, for backends that offer shared locks.
pub fn run_promote(new_client: &dyn Fn() -> Client) {
    let checks: &[Check] = &[
        (
            "promote_waits_for_the_other_readers",
            promote_waits_for_the_other_readers,
        ),
        (
            "a_promoted_lease_is_exclusive",
            a_promoted_lease_is_exclusive,
        ),
        ("demote_lets_readers_in", demote_lets_readers_in),
        (
            "a_waiting_promote_gets_the_key_when_readers_leave",
            a_waiting_promote_gets_the_key_when_readers_leave,
        ),
        (
            "promote_and_demote_check_the_kind",
            promote_and_demote_check_the_kind,
        ),
        (
            "an_interrupt_ends_a_waiting_promote",
            an_interrupt_ends_a_waiting_promote,
        ),
    ];
    run_checks(&new_client(), &new_client(), checks);
}

fn promote_waits_for_the_other_readers(a: &Client, b: &Client) {
    let k = key("promote-refused");
    let mut r1 = a.try_acquire_shared(&k, LONG).unwrap();
    let r2 = b.try_acquire_shared(&k, LONG).unwrap();
    let (token, fence) = (r1.token(), r1.fence());
    assert_eq!(kind(r1.promote(Duration::ZERO)), ErrorKind::NotAcquired);
    assert_eq!(
        r1.kind(),
        LeaseKind::Shared,
        "a refused promote leaves it shared"
    );
    assert_eq!(r1.fence(), fence);
    assert!(r1.remaining() > Duration::ZERO, "and held");
    let start = Instant::now();
    assert_eq!(
        kind(r1.promote(Duration::from_millis(300))),
        ErrorKind::NotAcquired
    );
    assert!(start.elapsed() >= Duration::from_millis(250), "it waited");
    let r3 = b.try_acquire_shared(&k, LONG);
    r2.release().unwrap();
    if let Ok(r3) = r3 {
        r3.release().unwrap();
    }
    r1.promote(Duration::ZERO).expect("the only holder now");
    assert_eq!(r1.token(), token, "the same token");
    assert_eq!(r1.kind(), LeaseKind::Exclusive);
    assert!(
        r1.fence() > fence,
        "a new fence: {} after {fence}",
        r1.fence()
    );
    r1.release().unwrap();
    a.try_acquire(&k, LONG)
        .expect("free once the promoted lease is released")
        .release()
        .unwrap();
}

fn a_promoted_lease_is_exclusive(a: &Client, b: &Client) {
    let k = key("promoted");
    let earlier = b.try_acquire_shared(&k, LONG).unwrap();
    let earlier_fence = earlier.fence();
    earlier.release().unwrap();
    let mut r = a.try_acquire_shared(&k, LONG).unwrap();
    r.promote(Duration::ZERO).unwrap();
    assert!(r.fence() > earlier_fence);
    assert_eq!(kind(b.try_acquire_shared(&k, LONG)), ErrorKind::NotAcquired);
    assert_eq!(kind(b.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    r.extend(LONG).expect("the owner extends it as exclusive");
    assert_eq!(kind(b.try_acquire_shared(&k, LONG)), ErrorKind::NotAcquired);
    let fence = r.fence();
    r.release().unwrap();
    let next = b.try_acquire(&k, LONG).unwrap();
    assert!(next.fence() > fence);
    next.release().unwrap();
}

fn demote_lets_readers_in(a: &Client, b: &Client) {
    let k = key("demote");
    let mut w = a.try_acquire(&k, LONG).unwrap();
    let (token, fence) = (w.token(), w.fence());
    w.demote().expect("demote");
    assert_eq!(w.kind(), LeaseKind::Shared);
    assert_eq!(w.token(), token);
    assert_eq!(w.fence(), fence, "a demote grants nothing new");
    assert!(w.remaining() > Duration::ZERO);
    let reader = b
        .try_acquire_shared(&k, LONG)
        .expect("readers join a demoted lease");
    assert!(reader.fence() > fence);
    assert_eq!(kind(b.try_acquire(&k, LONG)), ErrorKind::NotAcquired);
    reader.release().unwrap();
    // Back up again, now that it is alone.
    w.promote(Duration::ZERO).expect("promote after demote");
    assert_eq!(kind(b.try_acquire_shared(&k, LONG)), ErrorKind::NotAcquired);
    w.release().unwrap();
    b.try_acquire(&k, LONG).unwrap().release().unwrap();
}

fn a_waiting_promote_gets_the_key_when_readers_leave(a: &Client, b: &Client) {
    let k = key("promote-wait");
    let mut r1 = a.try_acquire_shared(&k, LONG).unwrap();
    let r2 = b.try_acquire_shared(&k, LONG).unwrap();
    let leaver = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        r2.release().unwrap();
    });
    let start = Instant::now();
    r1.promote(Duration::from_secs(10))
        .expect("promoted once the other reader left");
    let took = start.elapsed();
    leaver.join().unwrap();
    assert!(took >= Duration::from_millis(250), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(r1.kind(), LeaseKind::Exclusive);
    assert_eq!(kind(b.try_acquire_shared(&k, LONG)), ErrorKind::NotAcquired);
    r1.release().unwrap();
}

fn promote_and_demote_check_the_kind(a: &Client, _b: &Client) {
    let k = key("promote-kind");
    let mut w = a.try_acquire(&k, LONG).unwrap();
    assert_eq!(kind(w.promote(Duration::ZERO)), ErrorKind::InvalidArgument);
    w.release().unwrap();
    let mut r = a.try_acquire_shared(&k, LONG).unwrap();
    assert_eq!(kind(r.demote()), ErrorKind::InvalidArgument);
    assert_eq!(r.kind(), LeaseKind::Shared);
    r.release().unwrap();
    // A lost shared lease cannot be promoted.
    let mut short = a
        .try_acquire_shared(&k, Duration::from_millis(100))
        .unwrap();
    super::sleep_past_expiry(Duration::from_millis(400));
    let w = a.try_acquire(&k, LONG).expect("the reader expired");
    assert_eq!(kind(short.promote(Duration::ZERO)), ErrorKind::Lost);
    assert_eq!(short.remaining(), Duration::ZERO);
    w.release().unwrap();
}

/// A waiting promote ends as an acquire's wait does, on the client's interrupt, and leaves the
/// lease shared and held; the next promote is not interrupted.
fn an_interrupt_ends_a_waiting_promote(a: &Client, b: &Client) {
    let k = key("promote-interrupt");
    let r1 = a.try_acquire_shared(&k, LONG).unwrap();
    let r2 = b.try_acquire_shared(&k, LONG).unwrap();
    let fence = r1.fence();
    let waiting = std::thread::spawn(move || {
        let mut r1 = r1;
        let outcome = r1.promote(Duration::from_secs(20));
        (r1, outcome)
    });
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    a.interrupt();
    let (mut r1, outcome) = waiting.join().unwrap();
    let took = asked.elapsed();
    eprintln!(
        "conformance[{}]: a promote's wait ended {} ms after the interrupt",
        a.backend_name(),
        took.as_millis()
    );
    assert_eq!(kind(outcome), ErrorKind::Interrupted);
    assert!(took < Duration::from_secs(2), "the interrupt took {took:?}");
    assert_eq!(r1.kind(), LeaseKind::Shared, "still shared");
    assert_eq!(r1.fence(), fence);
    assert!(r1.remaining() > Duration::from_secs(5), "and held");
    let leaver = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        r2.release().unwrap();
    });
    r1.promote(Duration::from_secs(20))
        .expect("a later promote is not interrupted");
    leaver.join().unwrap();
    assert_eq!(r1.kind(), LeaseKind::Exclusive);
    r1.release().unwrap();
}
