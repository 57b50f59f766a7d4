//! The lease-expiry and fencing scenarios against a real redis-server: another owner can neither take nor release a
//! held key; a lease that expires during work is taken over and its late release is refused; a
//! holder process killed with SIGKILL frees the key at its TTL; fences strictly increase.

mod common;

use leasehold_core::{ErrorKind, Key, RawLease, Token, Ttl};
use leasehold_testkit::{unique_key, wait_until, RedisServer};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

#[test]
fn b_can_neither_take_nor_release_a_lock_held_by_a() {
    let server = RedisServer::start();
    let a = common::client(&server.url());
    let b = common::client(&server.url());
    let key = unique_key("a-holds");
    let lease = a.try_acquire(&key, LONG).unwrap();
    assert_eq!(
        b.try_acquire(&key, LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired
    );
    assert_eq!(
        b.acquire(&key, LONG, Duration::from_millis(200))
            .unwrap_err()
            .kind(),
        ErrorKind::NotAcquired
    );
    // Even a release sent straight to the backend with A's key and fence, but B's token, is
    // refused.
    let mut forged = RawLease::new(
        Key::new(&key).unwrap(),
        Token::generate().unwrap(),
        lease.fence(),
        Ttl::new(LONG).unwrap(),
        Instant::now(),
    );
    assert_eq!(
        b.backend().release(&mut forged).unwrap_err().kind(),
        ErrorKind::Lost
    );
    assert_eq!(
        b.backend()
            .extend(&mut forged, Ttl::new(LONG).unwrap())
            .unwrap_err()
            .kind(),
        ErrorKind::Lost
    );
    // A lease B once had on another key does not become A's either.
    let b_key = unique_key("b-own");
    let mut b_lease = b.try_acquire(&b_key, Duration::from_millis(50)).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(
        b_lease.release_in_place().unwrap_err().kind(),
        ErrorKind::Lost
    );
    let info = b.inspect(&key).unwrap();
    assert!(info.held);
    assert_eq!(info.fence, Some(lease.fence()));
    lease.release().expect("A still owns its lease");
}

#[test]
fn a_expires_during_work_b_takes_over_and_a_late_release_is_lost() {
    let server = RedisServer::start();
    let a = common::client(&server.url());
    let b = common::client(&server.url());
    let key = unique_key("expires");
    let mut a_lease = a.try_acquire(&key, Duration::from_millis(150)).unwrap();
    std::thread::sleep(Duration::from_millis(400)); // A's "work" outlives its lease.
    assert!(!a_lease.is_held());
    let mut b_lease = b.try_acquire(&key, LONG).expect("B takes the expired key");
    assert!(
        b_lease.fence() > a_lease.fence(),
        "the fence orders B after A"
    );
    assert_eq!(
        a_lease.release_in_place().unwrap_err().kind(),
        ErrorKind::Lost
    );
    assert_eq!(
        a.try_acquire(&key, LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired
    );
    let info = a.inspect(&key).unwrap();
    assert!(
        info.held && info.fence == Some(b_lease.fence()),
        "B still holds it: {info:?}"
    );
    b_lease.extend(LONG).expect("B's lease is intact");
    b_lease.release().unwrap();
}

#[test]
fn fence_strictly_increases_over_1000_acquisitions() {
    let server = RedisServer::start();
    let a = common::client(&server.url());
    let b = common::client(&server.url());
    let key = unique_key("fence");
    let before = common::server_ms(&server) * 1000;
    let mut last = 0;
    let mut first = None;
    for i in 0..1000 {
        let c = if i % 3 == 0 { &b } else { &a };
        let lease = c.try_acquire(&key, LONG).unwrap();
        assert!(lease.fence() > last, "fence {} after {last}", lease.fence());
        last = lease.fence();
        first.get_or_insert(last);
        lease.release().unwrap();
    }
    // A hybrid logical clock: the server's microseconds, not a count from 1.
    let first = first.unwrap();
    assert!(
        first >= before,
        "first fence {first}, server µs before {before}"
    );
    assert!(last < common::server_ms(&server) * 1000 + 1000, "{last}");
}

/// Runs only as the child of `a_holder_process_killed_with_sigkill_frees_the_key_after_its_ttl`:
/// takes the key, says so, and waits to be killed.
#[test]
#[ignore = "helper: run by the SIGKILL test as a child process"]
fn child_process_holds_a_lease() {
    let (Ok(url), Ok(key)) = (std::env::var("LH_CHILD_URL"), std::env::var("LH_CHILD_KEY")) else {
        return;
    };
    let client = common::client(&url);
    let lease = client
        .try_acquire(&key, Duration::from_millis(1500))
        .unwrap();
    println!("ACQUIRED {}", lease.fence());
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_holder_process_killed_with_sigkill_frees_the_key_after_its_ttl() {
    let server = RedisServer::start();
    let key = unique_key("sigkill");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_holds_a_lease",
            "--ignored",
            "--nocapture",
        ])
        .env("LH_CHILD_URL", server.url())
        .env("LH_CHILD_KEY", &key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let fence: u64 = loop {
        let line = lines.next().expect("child output").unwrap();
        if let Some(f) = line.strip_prefix("ACQUIRED ") {
            break f.trim().parse().unwrap();
        }
    };
    let acquired = Instant::now();
    child.kill().unwrap(); // SIGKILL: no destructor runs, nothing is released.
    child.wait().unwrap();

    let client = common::client(&server.url());
    assert_eq!(
        client.try_acquire(&key, LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired
    );
    let lease = client
        .acquire(&key, LONG, Duration::from_secs(10))
        .expect("the dead holder's lease runs out");
    let waited = acquired.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "freed only after {waited:?}"
    );
    assert!(lease.fence() > fence);
    lease.release().unwrap();
    assert!(wait_until(Duration::from_secs(1), || !client
        .inspect(&key)
        .unwrap()
        .held));
}
