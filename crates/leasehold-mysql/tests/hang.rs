//! A stopped server (SIGSTOP of mariadbd) must never hang a call: the kernel still ACKs data and
//! keepalives, so only the client's own timeouts can notice. Every operation, in both modes, on a
//! fresh client and on one with pooled sessions, gives `Unavailable` within connect + I/O timeout
//! (an acquire: plus its wait); once the server continues, the same clients work again. Uses a
//! server of its own (it stops it).

use leasehold_core::{Client, Config, ErrorKind, Lease};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::{unique_key, wait_until, MariaDbServer};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CONNECT: Duration = Duration::from_millis(500);
const IO: Duration = Duration::from_millis(500);
const WAIT: Duration = Duration::from_millis(300);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(60);

fn url(server: &MariaDbServer, mode: &str) -> String {
    server.url_with(&format!(
        "{mode}&connect_timeout_ms={}&io_timeout_ms={}",
        CONNECT.as_millis(),
        IO.as_millis()
    ))
}

fn client(server: &MariaDbServer, mode: &str) -> Client {
    Client::new(MysqlBackend::connect(&Config::parse(&url(server, mode)).unwrap()).unwrap())
}

/// Runs `f` on a thread and fails (instead of hanging the test) if it has not returned well past
/// `bound`; checks it returned within `bound` with `Unavailable`. Gives back what `f` handed back.
fn unavailable_within<R: Send + 'static>(
    what: &str,
    bound: Duration,
    f: impl FnOnce() -> (leasehold_core::Result<()>, R) + Send + 'static,
) -> (Duration, R) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let (result, back) = f();
        let _ = tx.send((start.elapsed(), result, back));
    });
    let (took, result, back) = rx
        .recv_timeout(bound + Duration::from_secs(5))
        .unwrap_or_else(|_| {
            panic!(
                "{what}: still blocked {:?} after its bound",
                Duration::from_secs(5)
            )
        });
    let err = result.expect_err(what);
    eprintln!("{what}: {} after {took:?}: {err}", err.kind());
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{what}: {err}");
    assert!(took <= bound, "{what} took {took:?}, bound {bound:?}");
    (took, back)
}

fn every_operation_is_bounded(server: &MariaDbServer, mode: &str) {
    let call = CONNECT + IO + SLACK;
    let acquire = WAIT + CONNECT + IO + SLACK;
    let warm = client(server, mode);
    let other = client(server, mode);
    let held_key = unique_key("paused-held");
    let mut extend_me = warm.try_acquire(unique_key("paused-extend"), LONG).unwrap();
    let release_me = warm.try_acquire(&held_key, LONG).unwrap();
    // Idle pooled sessions that the pause will catch.
    for _ in 0..2 {
        let (a, b) = (
            warm.try_acquire(unique_key("w1"), LONG).unwrap(),
            warm.try_acquire(unique_key("w2"), LONG).unwrap(),
        );
        a.release().unwrap();
        b.release().unwrap();
    }
    extend_me.extend(LONG).unwrap();

    server.pause();
    let mut worst = Duration::ZERO;
    // Twice each: first on a pooled session, then (those poisoned) on a fresh connect.
    for round in 0..2 {
        let key = unique_key("paused");
        for (op, bound) in [
            ("try_acquire", call),
            ("acquire", acquire),
            ("inspect", call),
        ] {
            let (c, k) = (warm.clone(), key.clone());
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
    let u = url(server, mode);
    let (took, ()) = unavailable_within(&format!("{mode} connect"), call, move || {
        (
            MysqlBackend::connect(&Config::parse(&u).unwrap()).map(drop),
            (),
        )
    });
    worst = worst.max(took);
    eprintln!("{mode}: slowest call against the paused server took {worst:?}");

    server.resume();
    if mode.contains("named") {
        // A timed-out named-lock session was closed: its lease is lost, and says so.
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
        // Table leases live in rows, not sessions: both are still ours.
        extend_me
            .extend(LONG)
            .expect("table lease survives the pause");
        extend_me.release_in_place().unwrap();
        release_me.release_in_place().unwrap();
    }
    // The same clients recover by themselves.
    assert!(
        wait_until(Duration::from_secs(10), || warm
            .try_acquire(unique_key("after"), LONG)
            .is_ok_and(|l| l.release().is_ok())),
        "{mode}: the client did not recover after the server continued"
    );
    let key = unique_key("after-wait");
    let lease = warm.acquire(&key, LONG, Duration::from_secs(1)).unwrap();
    assert!(warm.inspect(&key).unwrap().held);
    lease.release().unwrap();
    client(server, mode)
        .try_acquire(unique_key("fresh"), LONG)
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn paused_server_never_hangs_a_call_and_clients_recover() {
    let server = MariaDbServer::start();
    for mode in ["lock=named", "lock=table&table=hang_locks"] {
        every_operation_is_bounded(&server, mode);
    }
}
