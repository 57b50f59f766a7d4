//! Handoff by grant: a release with a live waiter at the head of the queue hands the key straight
//! to it (the waiter wakes holding it, with a higher fence and its own TTL); a waiter whose wait has
//! ended, or whose heartbeat lapsed (a killed process), is never granted; grantees exclude each
//! other and their fences rise. Round trips are counted from the server's command statistics.

mod common;

use leasehold_core::{ErrorKind, Key};
use leasehold_redis::keys::RedisKeys;
use leasehold_testkit::{unique_key, wait_until, RedisServer};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);
/// A heartbeat longer than any of these tests, so counted round trips are the behaviour's only.
const NO_HEARTBEAT: Duration = Duration::from_secs(120);

fn names(key: &str) -> RedisKeys {
    RedisKeys::new("leasehold:", &Key::new(key.as_bytes()).unwrap())
}

fn queued(server: &RedisServer, key: &str) -> usize {
    let reply = server.command(&[b"ZCARD", &names(key).queue]);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// The token the lock key holds, if any.
fn holder(server: &RedisServer, key: &str) -> Option<String> {
    let reply = server.command(&[b"GET", &names(key).lock]);
    // `$-1` (nil) or `$32\r\n<token>`
    reply.lines().nth(1).map(str::to_owned)
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    let reply = server.command(&[b"PTTL", &names(key).lock]);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// A queue entry as a waiter of this version writes it, planted by hand: heartbeat and wait end
/// `hb_ms` and `wait_ms` from the server's now (negative: in the past), lease TTL 30 s.
fn plant_waiter(
    server: &RedisServer,
    key: &str,
    token: &str,
    score: u32,
    hb_ms: i64,
    wait_ms: i64,
) {
    let RedisKeys {
        queue, heartbeats, ..
    } = names(key);
    let now = common::server_ms(server) as i64;
    let (hb, wait) = ((now + hb_ms).to_string(), (now + wait_ms).to_string());
    let (t, w) = (format!("{token}#t"), format!("{token}#w"));
    server.command(&[
        b"ZADD",
        &queue,
        score.to_string().as_bytes(),
        token.as_bytes(),
    ]);
    server.command(&[
        b"HSET",
        &heartbeats,
        token.as_bytes(),
        hb.as_bytes(),
        t.as_bytes(),
        b"30000",
        w.as_bytes(),
        wait.as_bytes(),
    ]);
}

#[test]
fn a_release_hands_the_key_to_the_blocked_waiter() {
    let server = RedisServer::start();
    let holder_client = common::client(&server.url());
    let waiter = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    let key = unique_key("grant");
    for _ in 0..3 {
        let lease = holder_client
            .try_acquire(&key, Duration::from_secs(5))
            .unwrap();
        std::thread::scope(|s| {
            let w = s.spawn(|| waiter.acquire(&key, LONG, Duration::from_secs(20)).unwrap());
            assert!(wait_until(Duration::from_secs(5), || queued(&server, &key) == 1));
            std::thread::sleep(Duration::from_millis(200)); // in BLPOP by now
            let before = common::calls(&server, "evalsha");
            let released = lease.fence();
            lease.release().unwrap();
            let got = w.join().unwrap();
            // The release alone: the waiter ran no acquire after waking.
            assert_eq!(common::calls(&server, "evalsha") - before, 1);
            assert!(got.fence() > released, "{} after {released}", got.fence());
            assert_eq!(holder(&server, &key).as_deref(), Some(got.token().as_str()));
            // The waiter's own TTL (30 s), not the releaser's (5 s).
            assert!(pttl(&server, &key) > 20_000, "{}", pttl(&server, &key));
            assert!(got.remaining() > Duration::from_secs(20));
            assert_eq!(queued(&server, &key), 0);
            got.release().unwrap();
        });
    }
    assert_eq!(holder(&server, &key), None);
}

#[test]
fn a_grant_counted_from_an_old_renewal_is_extended_at_once() {
    let server = RedisServer::start();
    let holder_client = common::client(&server.url());
    let waiter = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    let key = unique_key("grant-extend");
    let ttl = Duration::from_millis(800);
    let lease = holder_client.try_acquire(&key, LONG).unwrap();
    std::thread::scope(|s| {
        let w = s.spawn(|| waiter.acquire(&key, ttl, Duration::from_secs(20)).unwrap());
        assert!(wait_until(Duration::from_secs(5), || queued(&server, &key) == 1));
        // Its only attempt is now older than half its TTL.
        std::thread::sleep(Duration::from_millis(600));
        let before = common::calls(&server, "evalsha");
        lease.release().unwrap();
        let got = w.join().unwrap();
        // The release, and the waiter's one extend.
        assert_eq!(common::calls(&server, "evalsha") - before, 2);
        assert!(
            got.remaining() > ttl / 2,
            "{:?} left of {ttl:?}",
            got.remaining()
        );
        got.release().unwrap();
    });
}

#[test]
fn a_waiter_whose_wait_has_ended_is_never_granted() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let key = unique_key("grant-late");
    let late = "0123456789abcdef0123456789abcdef";
    // Alone in the queue: the key goes free, not to it.
    let lease = client.try_acquire(&key, LONG).unwrap();
    plant_waiter(&server, &key, late, 0, 10_000, -1);
    lease.release().unwrap();
    assert_eq!(holder(&server, &key), None);
    assert_eq!(queued(&server, &key), 0, "dropped from the queue");

    // Ahead of a live waiter: the next one gets it.
    let waiter = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    let lease = client.try_acquire(&key, LONG).unwrap();
    plant_waiter(&server, &key, late, 0, 10_000, -1);
    std::thread::scope(|s| {
        let w = s.spawn(|| waiter.acquire(&key, LONG, Duration::from_secs(20)).unwrap());
        assert!(wait_until(Duration::from_secs(5), || queued(&server, &key) == 2));
        std::thread::sleep(Duration::from_millis(200));
        lease.release().unwrap();
        let got = w.join().unwrap();
        assert_eq!(holder(&server, &key).as_deref(), Some(got.token().as_str()));
        got.release().unwrap();
    });
    assert_eq!(holder(&server, &key), None);
}

#[test]
fn a_real_waiter_that_gave_up_is_not_left_holding_the_key() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let waiter = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    let key = unique_key("grant-gave-up");
    for wait_ms in [5u64, 20, 60, 150] {
        let lease = client.try_acquire(&key, LONG).unwrap();
        std::thread::scope(|s| {
            let w = s.spawn(|| waiter.acquire(&key, LONG, Duration::from_millis(wait_ms)));
            // Released about when the wait ends: granted in time, or not at all.
            std::thread::sleep(Duration::from_millis(wait_ms));
            lease.release().unwrap();
            match w.join().unwrap() {
                Ok(got) => {
                    assert_eq!(holder(&server, &key).as_deref(), Some(got.token().as_str()));
                    got.release().unwrap();
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::NotAcquired);
                }
            }
        });
        assert_eq!(holder(&server, &key), None, "wait {wait_ms} ms");
        assert_eq!(queued(&server, &key), 0);
    }
}

#[test]
fn a_head_whose_heartbeat_lapsed_is_skipped() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let waiter = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    let key = unique_key("grant-dead");
    let dead = "0123456789abcdef0123456789abcdef";
    let lease = client.try_acquire(&key, LONG).unwrap();
    // Its wait would still be on, but it stopped renewing.
    plant_waiter(&server, &key, dead, 0, -1, 60_000);
    std::thread::scope(|s| {
        let w = s.spawn(|| waiter.acquire(&key, LONG, Duration::from_secs(20)).unwrap());
        assert!(wait_until(Duration::from_secs(5), || queued(&server, &key)
            >= 1
            && common::calls(&server, "blpop") > 0));
        std::thread::sleep(Duration::from_millis(100));
        lease.release().unwrap();
        let got = w.join().unwrap();
        assert_eq!(holder(&server, &key).as_deref(), Some(got.token().as_str()));
        got.release().unwrap();
    });
    assert_eq!(queued(&server, &key), 0);
}

/// Runs only as the child of `a_killed_waiter_is_skipped`: waits for the key, and is killed.
#[test]
#[ignore = "helper: run by the SIGKILL test as a child process"]
fn child_process_waits() {
    let (Ok(url), Ok(key)) = (std::env::var("LH_CHILD_URL"), std::env::var("LH_CHILD_KEY")) else {
        return;
    };
    let client = common::client_with_heartbeat(&url, Duration::from_millis(100));
    println!("WAITING");
    let _ = client.acquire(&key, LONG, Duration::from_secs(60));
    println!("ACQUIRED");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_waiter_is_skipped() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let key = unique_key("grant-killed");
    let lease = client.try_acquire(&key, LONG).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_process_waits", "--ignored", "--nocapture"])
        .env("LH_CHILD_URL", server.url())
        .env("LH_CHILD_KEY", &key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while lines.next().expect("child output").unwrap() != "WAITING" {}
    assert!(wait_until(Duration::from_secs(5), || queued(&server, &key) == 1));
    let waiter = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    std::thread::scope(|s| {
        let w = s.spawn(|| waiter.acquire(&key, LONG, Duration::from_secs(20)).unwrap());
        assert!(wait_until(Duration::from_secs(5), || queued(&server, &key) == 2));
        child.kill().unwrap(); // SIGKILL: its heartbeat (100 ms, 3 × for the entry) lapses.
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let released = Instant::now();
        lease.release().unwrap();
        let got = w.join().unwrap();
        assert!(released.elapsed() < Duration::from_secs(5));
        assert_eq!(holder(&server, &key).as_deref(), Some(got.token().as_str()));
        got.release().unwrap();
    });
    assert_eq!(holder(&server, &key), None);
}

#[test]
fn grantees_exclude_each_other_and_their_fences_rise() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    leasehold_core::conformance::mutual_exclusion(&client, 8, 40);

    let key = unique_key("grant-order");
    let last = Mutex::new(0u64);
    let handoffs_before = common::calls(&server, "evalsha");
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                for _ in 0..30 {
                    let lease = client.acquire(&key, LONG, Duration::from_secs(60)).unwrap();
                    {
                        // Held exclusively: nobody else can be in here.
                        let mut last = last.try_lock().expect("two holders at once");
                        assert!(lease.fence() > *last, "{} after {}", lease.fence(), *last);
                        *last = lease.fence();
                        std::thread::sleep(Duration::from_micros(300));
                    }
                    lease.release().unwrap();
                }
            });
        }
    });
    eprintln!(
        "180 cycles on one key by 6 threads: {} scripts",
        common::calls(&server, "evalsha") - handoffs_before
    );
    assert_eq!(holder(&server, &key), None);
    assert_eq!(queued(&server, &key), 0);
}
