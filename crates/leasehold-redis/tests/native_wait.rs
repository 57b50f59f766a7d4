//! Native waiting: a release wakes one blocked waiter within about a round trip, waiters are served
//! first come first served, a crashed holder's expiry is noticed at once, a crashed waiter does not
//! block the line, and signal keys never pile up. Round trips are counted from the server's own
//! command statistics, so these prove behaviour rather than time it.

mod common;

use leasehold_core::{ErrorKind, Key};
use leasehold_redis::keys::RedisKeys;
use leasehold_testkit::{unique_key, wait_until, RedisServer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);
/// A heartbeat longer than any of these tests, so counted round trips are the behaviour's only.
const NO_HEARTBEAT: Duration = Duration::from_secs(120);

#[test]
fn a_waiter_gets_a_released_key_long_before_any_poll_interval() {
    let server = RedisServer::start();
    let holder = common::client(&server.url());
    let waiter = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    let key = unique_key("handoff");
    let mut handoffs = Vec::new();
    for _ in 0..5 {
        let lease = holder.try_acquire(&key, LONG).unwrap();
        let (tx, rx) = mpsc::channel();
        let w = waiter.clone();
        let k = key.clone();
        let t = std::thread::spawn(move || {
            let got = w.acquire(&k, LONG, Duration::from_secs(20)).unwrap();
            tx.send(Instant::now()).unwrap();
            got
        });
        // Let the waiter block: its first attempt fails and it sits in BLPOP.
        assert!(wait_until(Duration::from_secs(5), || common::calls(
            &server, "blpop"
        ) > 0));
        std::thread::sleep(Duration::from_millis(300));
        let before = common::calls(&server, "evalsha");
        let released = Instant::now();
        lease.release().unwrap();
        let acquired = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let next = t.join().unwrap();
        // One release, which handed the key to the waiter: it neither polled while blocked nor
        // ran an acquire again.
        assert_eq!(common::calls(&server, "evalsha") - before, 1);
        handoffs.push(acquired.saturating_duration_since(released));
        next.release().unwrap();
    }
    handoffs.sort();
    eprintln!("handoffs: {handoffs:?}");
    // A 100 ms poller would average 50 ms; the median native handoff is a round trip or two.
    assert!(
        handoffs[2] < Duration::from_millis(50),
        "median handoff {:?}",
        handoffs[2]
    );
}

#[test]
fn a_crashed_holders_expiry_is_noticed_at_once() {
    let server = RedisServer::start();
    let holder = common::client(&server.url());
    let waiter = common::client(&server.url());
    let key = unique_key("crashed");
    let ttl = Duration::from_millis(700);
    let taken = Instant::now();
    holder.try_acquire(&key, ttl).unwrap().forget(); // The holder "crashes": nobody releases.
    let before = common::calls(&server, "evalsha");
    let lease = waiter.acquire(&key, LONG, Duration::from_secs(10)).unwrap();
    let waited = taken.elapsed();
    let attempts = common::calls(&server, "evalsha") - before;
    eprintln!("crashed holder: key free after {waited:?}, {attempts} attempts");
    assert!(
        waited >= ttl - Duration::from_millis(50),
        "took the key early: {waited:?}"
    );
    assert!(
        waited < ttl + Duration::from_millis(500),
        "noticed late: {waited:?}"
    );
    // It blocked until the expiry instead of polling: a first attempt, one per heartbeat (renewing its
    // place in the queue), one after the expiry, and at most one more if it woke a hair early.
    let heartbeats =
        (ttl.as_millis() / leasehold_redis::DEFAULT_WAITER_HEARTBEAT.as_millis()) as u64;
    assert!(attempts <= 3 + heartbeats, "{attempts} attempts");
    lease.release().unwrap();
}

#[test]
fn one_release_wakes_one_waiter() {
    let server = RedisServer::start();
    let holder = common::client(&server.url());
    let waiters = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    let key = unique_key("one-wakes");
    let lease = holder.try_acquire(&key, LONG).unwrap();
    let got = AtomicUsize::new(0);
    let fails = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(
                || match waiters.acquire(&key, LONG, Duration::from_secs(5)) {
                    Ok(l) => {
                        got.fetch_add(1, Ordering::SeqCst);
                        l.forget(); // Keep holding, so nobody else may follow.
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::NotAcquired);
                        fails.fetch_add(1, Ordering::SeqCst);
                    }
                },
            );
        }
        assert!(wait_until(Duration::from_secs(5), || common::calls(
            &server, "blpop"
        ) >= 4));
        std::thread::sleep(Duration::from_millis(200));
        let before = common::calls(&server, "evalsha");
        lease.release().unwrap();
        assert!(wait_until(Duration::from_secs(2), || got
            .load(Ordering::SeqCst)
            == 1));
        std::thread::sleep(Duration::from_millis(300));
        // The release, which granted the key to one waiter; the other three slept on.
        assert_eq!(common::calls(&server, "evalsha") - before, 1);
    });
    assert_eq!(got.load(Ordering::SeqCst), 1);
    assert_eq!(fails.load(Ordering::SeqCst), 3);
}

/// Where the lease of `key` lives (the default prefix).
fn names(key: &str) -> RedisKeys {
    RedisKeys::new("leasehold:", &Key::new(key.as_bytes()).unwrap())
}

fn queued(server: &RedisServer, key: &str) -> usize {
    let reply = server.command(&[b"ZCARD", &names(key).queue]);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

#[test]
fn waiters_get_the_key_in_arrival_order() {
    let server = RedisServer::start();
    let holder = common::client(&server.url());
    let waiters = common::client(&server.url());
    let key = unique_key("fifo");
    let lease = holder.try_acquire(&key, LONG).unwrap();
    let order = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for i in 0..5 {
            let (waiters, key, order) = (&waiters, &key, &order);
            s.spawn(move || {
                let got = waiters.acquire(key, LONG, Duration::from_secs(30)).unwrap();
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(20));
                got.release().unwrap();
            });
            // The next one arrives only once this one is in the queue.
            assert!(wait_until(Duration::from_secs(5), || queued(&server, key) == i + 1));
        }
        lease.release().unwrap();
    });
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(queued(&server, &key), 0);
}

#[test]
fn a_holder_that_asks_again_goes_to_the_back_of_the_line() {
    let server = RedisServer::start();
    let a = common::client(&server.url());
    let b = common::client(&server.url());
    let key = unique_key("no-barging");
    let first = a.try_acquire(&key, LONG).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let lease = b.acquire(&key, LONG, Duration::from_secs(30)).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            let fence = lease.fence();
            lease.release().unwrap();
            fence
        });
        assert!(wait_until(Duration::from_secs(5), || queued(&server, &key) == 1));
        first.release().unwrap();
        // A releases and asks again at once: B, already waiting, goes first.
        assert_eq!(
            a.try_acquire(&key, LONG).unwrap_err().kind(),
            ErrorKind::NotAcquired
        );
        let again = a.acquire(&key, LONG, Duration::from_secs(30)).unwrap();
        let b_fence = waiter.join().unwrap();
        assert!(again.fence() > b_fence, "A came after B");
        again.release().unwrap();
    });
}

#[test]
fn a_crashed_waiter_does_not_block_the_line() {
    let server = RedisServer::start();
    let heartbeat = Duration::from_millis(200);
    let holder = common::client(&server.url());
    let waiter = common::client_with_heartbeat(&server.url(), heartbeat);
    let key = unique_key("dead-waiter");
    let lease = holder.try_acquire(&key, LONG).unwrap();
    // A waiter that queued first and then died: its heartbeat runs out 600 ms from now.
    let dead = "0123456789abcdef0123456789abcdef";
    let RedisKeys {
        queue,
        heartbeats: beats,
        ..
    } = names(&key);
    let expiry = (common::server_ms(&server) + 600).to_string();
    server.command(&[b"ZADD", &queue, b"0", dead.as_bytes()]);
    server.command(&[b"HSET", &beats, dead.as_bytes(), expiry.as_bytes()]);
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            let start = Instant::now();
            let got = waiter.acquire(&key, LONG, Duration::from_secs(20)).unwrap();
            (start.elapsed(), got)
        });
        assert!(wait_until(Duration::from_secs(5), || queued(&server, &key) == 2));
        lease.release().unwrap(); // The key is reserved for the dead head now.
        let (waited, got) = w.join().unwrap();
        eprintln!("past a dead waiter after {waited:?}");
        assert!(
            waited < Duration::from_secs(5),
            "stuck behind a dead waiter: {waited:?}"
        );
        got.release().unwrap();
    });
    assert_eq!(queued(&server, &key), 0, "the dead entry was dropped");
}

#[test]
fn extend_that_shortens_the_lease_rewakes_waiters() {
    let server = RedisServer::start();
    let holder = common::client(&server.url());
    let waiter = common::client_with_heartbeat(&server.url(), NO_HEARTBEAT);
    let key = unique_key("shorten");
    let mut lease = holder.try_acquire(&key, LONG).unwrap();
    let start = Instant::now();
    std::thread::scope(|s| {
        let w = s.spawn(|| waiter.acquire(&key, LONG, Duration::from_secs(20)));
        assert!(wait_until(Duration::from_secs(5), || common::calls(
            &server, "blpop"
        ) > 0));
        lease.extend(Duration::from_millis(300)).unwrap();
        lease.forget();
        let got = w
            .join()
            .unwrap()
            .expect("the waiter learns the new, shorter expiry");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        got.release().unwrap();
    });
}

#[test]
fn signal_keys_do_not_pile_up() {
    let server = RedisServer::start();
    // Short timeouts make a short signal lifetime (connect + I/O timeout).
    let client = common::client(&server.url_with("connect_timeout_ms=200&io_timeout_ms=200"));
    let keys: Vec<String> = (0..20).map(|i| unique_key(&format!("pile{i}"))).collect();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (client, keys) = (&client, &keys);
            s.spawn(move || {
                for i in 0..100 {
                    let key = &keys[(i + t) % keys.len()];
                    let lease = client.acquire(key, LONG, Duration::from_secs(30)).unwrap();
                    lease.release().unwrap();
                }
            });
        }
    });
    for pattern in ["leasehold:{*}s:*", "leasehold:{*}q:*", "leasehold:{*}h:*"] {
        assert!(
            wait_until(Duration::from_secs(5), || common::count_keys(
                &server, pattern
            ) == 0),
            "{pattern} left: {}",
            common::count_keys(&server, pattern)
        );
    }
    assert_eq!(common::count_keys(&server, "leasehold:{*}l:*"), 0);
    // Expired signal keys are reclaimed, not just hidden (DBSIZE counts expired keys until the
    // server's expiry cycle frees them). What stays is the server's fence high-water, expiring
    // after the fence retention (tests/fences.rs checks that); nothing per key.
    assert!(
        wait_until(Duration::from_secs(10), || common::dbsize(&server) == 1),
        "keys left: {}",
        common::dbsize(&server)
    );
}
