//! A stopped server (SIGSTOP) must never hang a call: the kernel still ACKs data and keepalives, so
//! only the client's own timeouts can notice. Every operation, on a client with pooled sessions and on
//! a fresh connect, gives `Unavailable` within its bound; once the server continues, the same clients
//! work again. The SQL backends' tests run it with a server of their own (it stops that server).

use super::key;
use crate::{Client, ErrorKind, Lease, Result};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The connect and I/O timeouts [`StoppableServer::url`] must put into the URL it returns.
pub const CONNECT: Duration = Duration::from_millis(500);
/// See [`CONNECT`].
pub const IO: Duration = Duration::from_millis(500);
const WAIT: Duration = Duration::from_millis(300);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(60);

/// A real server the test may stop and continue, and how to reach it.
pub trait StoppableServer {
    /// The backend's URL for `mode` (its query parameters), with [`CONNECT`] and [`IO`] as the
    /// connect and I/O timeouts.
    fn url(&self, mode: &str) -> String;
    fn pause(&self);
    fn resume(&self);
}

/// Every operation against the stopped server ends within its bound with `Unavailable`. Where a
/// lease lives in its session (`leases_live_in_sessions`: PostgreSQL advisory, MySQL named locks),
/// a lease whose session timed out is lost afterwards and says so, and its key is freed; where it
/// lives in a row, it survives the pause. `connect` is the backend's own connect (so that a connect
/// to the stopped server is timed too).
pub fn every_operation_is_bounded(
    server: &dyn StoppableServer,
    connect: fn(&str) -> Result<Client>,
    mode: &str,
    leases_live_in_sessions: bool,
) {
    let call = CONNECT + IO + SLACK;
    let acquire = WAIT + CONNECT + IO + SLACK;
    let url = server.url(mode);
    let client = || connect(&url).expect("connect before the pause");
    let warm = client();
    let other = client();
    let held_key = key("paused-held");
    let mut extend_me = warm.try_acquire(key("paused-extend"), LONG).unwrap();
    let release_me = warm.try_acquire(&held_key, LONG).unwrap();
    // Idle pooled sessions that the pause will catch.
    for _ in 0..2 {
        let (a, b) = (
            warm.try_acquire(key("w1"), LONG).unwrap(),
            warm.try_acquire(key("w2"), LONG).unwrap(),
        );
        a.release().unwrap();
        b.release().unwrap();
    }
    extend_me.extend(LONG).unwrap();

    server.pause();
    let mut worst = Duration::ZERO;
    // Twice each: first on a pooled session, then (those poisoned) on a fresh connect.
    for round in 0..2 {
        let k = key("paused");
        for (op, bound) in [
            ("try_acquire", call),
            ("acquire", acquire),
            ("inspect", call),
        ] {
            let (c, k) = (warm.clone(), k.clone());
            let (took, ()) =
                unavailable_within(&format!("{mode} {op} #{round}"), bound, move || {
                    let r = match op {
                        "try_acquire" => c.try_acquire(&k, LONG).map(drop),
                        "acquire" => c.acquire(&k, LONG, WAIT).map(drop),
                        _ => c.inspect(&k).map(drop),
                    };
                    (r, ())
                });
            worst = worst.max(took);
        }
    }
    let (took, mut extend_me) = unavailable_within(&format!("{mode} extend"), call, move || {
        let r = extend_me.extend(LONG);
        (r, extend_me)
    });
    worst = worst.max(took);
    let (took, mut release_me) = unavailable_within(&format!("{mode} release"), call, move || {
        let mut lease: Lease = release_me;
        let r = lease.release_in_place();
        (r, lease)
    });
    worst = worst.max(took);
    let u = url.clone();
    let (took, ()) = unavailable_within(&format!("{mode} connect"), call, move || {
        (connect(&u).map(drop), ())
    });
    worst = worst.max(took);
    eprintln!("{mode}: slowest call against the paused server took {worst:?}");

    server.resume();
    if leases_live_in_sessions {
        // A timed-out session was closed: its lease is lost, and says so.
        assert_eq!(extend_me.remaining(), Duration::ZERO);
        assert_eq!(extend_me.extend(LONG).unwrap_err().kind(), ErrorKind::Lost);
        assert_eq!(
            release_me.release_in_place().unwrap_err().kind(),
            ErrorKind::Lost
        );
        // And the server frees the lock once it reads the close.
        let freed = other.acquire(&held_key, LONG, Duration::from_secs(10));
        freed
            .expect("the lost lease's lock is freed")
            .release()
            .unwrap();
    } else {
        // Leases in rows, not sessions: both are still ours.
        extend_me
            .extend(LONG)
            .expect("a row lease survives the pause");
        extend_me.release_in_place().unwrap();
        release_me.release_in_place().unwrap();
    }
    // The same clients recover by themselves.
    let recovered = Instant::now() + Duration::from_secs(10);
    while !warm
        .try_acquire(key("after"), LONG)
        .is_ok_and(|l| l.release().is_ok())
    {
        assert!(
            Instant::now() < recovered,
            "{mode}: the client did not recover after the server continued"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let k = key("after-wait");
    let lease = warm.acquire(&k, LONG, Duration::from_secs(1)).unwrap();
    assert!(warm.inspect(&k).unwrap().held);
    lease.release().unwrap();
    client()
        .try_acquire(key("fresh"), LONG)
        .unwrap()
        .release()
        .unwrap();
}

/// Runs `f` on a thread and fails (instead of hanging the test) if it has not returned well past
/// `bound`; checks it returned within `bound` with `Unavailable`. Gives back what `f` handed back.
fn unavailable_within<R: Send + 'static>(
    what: &str,
    bound: Duration,
    f: impl FnOnce() -> (Result<()>, R) + Send + 'static,
) -> (Duration, R) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let (result, back) = f();
        let _ = tx.send((start.elapsed(), result, back));
    });
    let (took, result, back) = rx
        .recv_timeout(bound + Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("{what}: still blocked 5 s after its bound {bound:?}"));
    let err = result.expect_err(what);
    eprintln!("{what}: {} after {took:?}: {err}", err.kind());
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{what}: {err}");
    assert!(took <= bound, "{what} took {took:?}, bound {bound:?}");
    (took, back)
}
