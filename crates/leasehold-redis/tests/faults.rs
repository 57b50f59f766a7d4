//! Faults: a server that dies, hangs or restarts gives `Unavailable` within the configured
//! timeouts, never a hang, and the same client recovers when the server is back.

mod common;

use leasehold_core::ErrorKind;
use leasehold_testkit::{free_port, unique_key, RedisServer};
use std::time::{Duration, Instant};

const CONNECT_MS: u64 = 300;
const IO_MS: u64 = 300;
/// connect + I/O timeout, plus generous room for a loaded CI machine.
const BOUND: Duration = Duration::from_millis(CONNECT_MS + IO_MS + 1500);
const LONG: Duration = Duration::from_secs(30);

type Op<'a> = Box<dyn Fn() -> ErrorKind + 'a>;

fn url(server: &RedisServer) -> String {
    server.url_with(&format!(
        "connect_timeout_ms={CONNECT_MS}&io_timeout_ms={IO_MS}"
    ))
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

#[test]
fn a_dead_host_fails_connect_within_the_connect_timeout() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}?connect_timeout_ms={CONNECT_MS}");
    let (result, took) = timed(|| common::connect(&url));
    let err = result.unwrap_err();
    eprintln!("dead host after {took:?}: {err}");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(took < BOUND, "took {took:?}");
    // A host that swallows packets (TEST-NET-1) instead of refusing them.
    let url = format!("redis://192.0.2.1:6390?connect_timeout_ms={CONNECT_MS}");
    let (result, took) = timed(|| common::connect(&url));
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
    assert!(took < BOUND, "took {took:?}");
}

#[test]
fn a_killed_server_gives_unavailable_in_time_and_the_same_client_recovers() {
    let mut server = RedisServer::start();
    let client = common::client(&url(&server));
    let key = unique_key("killed");
    let mut lease = client.try_acquire(&key, LONG).unwrap();
    // Warm several pooled connections, so the recovery below must cope with more than one stale
    // one.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| client.inspect(&key).unwrap());
        }
    });

    server.kill();
    let dead_url = url(&server);
    let ops: [(&str, Op); 4] = [
        (
            "try_acquire",
            Box::new(|| {
                client
                    .try_acquire(unique_key("k"), LONG)
                    .unwrap_err()
                    .kind()
            }),
        ),
        (
            "acquire",
            Box::new(|| {
                client
                    .acquire(unique_key("k"), LONG, Duration::from_secs(5))
                    .unwrap_err()
                    .kind()
            }),
        ),
        (
            "inspect",
            Box::new(|| client.inspect(&key).unwrap_err().kind()),
        ),
        (
            "connect",
            Box::new(|| common::connect(&dead_url).unwrap_err().kind()),
        ),
    ];
    for (name, op) in &ops {
        let (kind, took) = timed(op);
        eprintln!("{name} against a killed server: {kind:?} after {took:?}");
        assert_eq!(kind, ErrorKind::Unavailable, "{name}");
        assert!(took < BOUND, "{name} took {took:?}");
    }
    drop(ops);
    let (result, took) = timed(|| lease.extend(LONG));
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
    assert!(took < BOUND, "extend took {took:?}");
    let (result, took) = timed(|| lease.release_in_place());
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
    assert!(took < BOUND, "release took {took:?}");

    server.restart();
    // The restarted server is empty: the old lease is gone, and the same client works at once.
    assert_eq!(
        lease.release_in_place().unwrap_err().kind(),
        ErrorKind::Lost
    );
    let again = client
        .try_acquire(&key, LONG)
        .expect("the same client recovers");
    assert!(
        again.fence() > lease.fence(),
        "a server without persistence still gives larger fences: {} after {}",
        again.fence(),
        lease.fence()
    );
    again.release().unwrap();
}

#[test]
fn a_restart_while_idle_costs_no_failed_call() {
    let mut server = RedisServer::start();
    let client = common::client(&url(&server));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                client
                    .try_acquire(unique_key("warm"), LONG)
                    .unwrap()
                    .release()
                    .unwrap();
            });
        }
    });
    server.restart();
    for _ in 0..8 {
        let lease = client
            .try_acquire(unique_key("after-restart"), LONG)
            .expect("stale pooled connections are replaced, not reported");
        lease.release().unwrap();
    }
}

#[test]
fn a_paused_server_gives_unavailable_in_time() {
    let server = RedisServer::start();
    let client = common::client(&url(&server));
    let key = unique_key("paused");
    let mut lease = client.try_acquire(&key, LONG).unwrap();

    server.pause();
    let (result, took) = timed(|| client.try_acquire(unique_key("p"), Duration::from_millis(500)));
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
    assert!(took < BOUND, "try_acquire took {took:?}");
    let (result, took) = timed(|| client.acquire(&key, LONG, Duration::from_millis(200)));
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
    assert!(
        took < BOUND + Duration::from_millis(200),
        "acquire took {took:?}"
    );
    let (result, took) = timed(|| lease.extend(LONG));
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
    assert!(took < BOUND, "extend took {took:?}");
    let (result, took) = timed(|| common::connect(&url(&server)));
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
    assert!(took < BOUND, "connect took {took:?}");

    server.resume();
    // The connections that timed out were dropped (their late answers would be out of step), so the
    // client works again and its lease is intact.
    lease.extend(LONG).expect("extend after resume");
    lease.release().expect("release after resume");
}

#[test]
fn a_waiter_blocked_on_a_server_that_hangs_returns_within_wait_plus_io_timeout() {
    let server = RedisServer::start();
    let holder = common::client(&url(&server));
    let waiter = common::client(&url(&server));
    let key = unique_key("hang-wait");
    let lease = holder.try_acquire(&key, LONG).unwrap();
    let wait = Duration::from_millis(800);
    let (result, took) = std::thread::scope(|s| {
        let h = s.spawn(|| timed(|| waiter.acquire(&key, LONG, wait)));
        std::thread::sleep(Duration::from_millis(200)); // The waiter is blocked in BLPOP now.
        server.pause();
        let out = h.join().unwrap();
        server.resume();
        out
    });
    let kind = result.unwrap_err().kind();
    assert!(
        matches!(kind, ErrorKind::Unavailable | ErrorKind::NotAcquired),
        "{kind:?}"
    );
    assert!(took < wait + BOUND, "took {took:?}");
    lease.release().unwrap();
}

#[test]
fn a_waiter_blocked_across_a_restart_takes_the_key_from_the_new_server() {
    let mut server = RedisServer::start();
    // A restart shorter than the connect timeout is ridden out.
    let url = server.url_with("connect_timeout_ms=3000&io_timeout_ms=1000");
    let holder = common::client(&url);
    let waiter = common::client(&url);
    let key = unique_key("restart-wait");
    let lease = holder.try_acquire(&key, LONG).unwrap();
    let (result, took) = std::thread::scope(|s| {
        let h = s.spawn(|| timed(|| waiter.acquire(&key, LONG, Duration::from_secs(20))));
        assert!(leasehold_testkit::wait_until(
            Duration::from_secs(5),
            || { common::calls(&server, "blpop") > 0 }
        ));
        server.restart(); // Empty again: the holder's lease is gone with the old process.
        h.join().unwrap()
    });
    let got = result.expect("the waiter takes the key from the restarted server");
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}; the old lease had 30 s"
    );
    assert!(
        got.fence() > lease.fence(),
        "the empty server's fence {} is still above the lost one {}",
        got.fence(),
        lease.fence()
    );
    got.release().unwrap();
    lease.forget();
}
