//! Restore and force-release beyond the conformance suite: shared leases restore with
//! their own fence, and a force-release frees readers too and wakes the queue's head at once.

mod common;

use leasehold_core::{Client, Config, ErrorKind, LeaseKind};
use leasehold_redis::keys::RedisKeys;
use leasehold_redis::RedlockBackend;
use leasehold_testkit::{unique_key, Fault, FaultProxy, RedisServer};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn redlock(nodes: &[RedisServer]) -> Client {
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    let url = format!("redlock://{}", hosts.join(","));
    Client::new(RedlockBackend::connect(&Config::parse(&url).unwrap()).unwrap())
}

fn shared_leases_restore_with_their_own_fence(a: &Client, b: &Client) {
    let key = unique_key("restore-shared");
    let first = a.try_acquire_shared(&key, LONG).unwrap();
    let second = a.try_acquire_shared(&key, LONG).unwrap();
    assert!(second.fence() > first.fence());
    let restored = b
        .restore(&key, first.token().as_str())
        .expect("a share restores");
    assert_eq!(restored.kind(), LeaseKind::Shared);
    assert_eq!(
        restored.fence(),
        first.fence(),
        "the share's own fence, not the key's latest"
    );
    assert!(restored.remaining() > Duration::from_secs(20));
    restored
        .release()
        .expect("released through the restored handle");
    assert_eq!(
        a.try_acquire(&key, LONG).map(|_| ()).unwrap_err().kind(),
        ErrorKind::NotAcquired,
        "the other share still holds the key"
    );
    assert_eq!(first.release().unwrap_err().kind(), ErrorKind::Lost);
    second.release().unwrap();
    let token = a
        .try_acquire_shared(&key, Duration::from_millis(100))
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        b.restore(&key, token.token().as_str())
            .map(|_| ())
            .unwrap_err()
            .kind(),
        ErrorKind::Lost,
        "an expired share is gone"
    );
}

#[test]
fn shared_restore_on_redis_and_redlock() {
    let server = RedisServer::start();
    let (a, b) = (common::client(&server.url()), common::client(&server.url()));
    shared_leases_restore_with_their_own_fence(&a, &b);
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    shared_leases_restore_with_their_own_fence(&redlock(&nodes), &redlock(&nodes));
}

/// A Redlock node that grants after the acquire decided can hold a higher fence than the one
/// handed out (its counter ran ahead, as refused rounds leave it). A restore reports the fence a
/// quorum holds, the one the acquirer got: a restore that took the highest fence it heard would
/// report one only that node backs, which a later acquisition on the other nodes could undercut.
#[test]
fn redlock_restore_reports_the_fence_the_acquirer_got() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let away = FaultProxy::start(("127.0.0.1", nodes[2].port()));
    let hosts = [nodes[0].addr(), nodes[1].addr(), away.host_port()];
    let url = format!("redlock://{}", hosts.join(","));
    let (a, b) = (
        Client::new(RedlockBackend::connect(&Config::parse(&url).unwrap()).unwrap()),
        Client::new(RedlockBackend::connect(&Config::parse(&url).unwrap()).unwrap()),
    );
    let key = unique_key("restore-late");
    let keys = RedisKeys::new(
        "leasehold:",
        &leasehold_core::Key::new(key.as_bytes()).unwrap(),
    );
    // The acquire decides on nodes 0 and 1 (clock-made fences) while node 2 is out of reach.
    away.set(Fault::Refuse);
    away.reset_all();
    let lease = a.try_acquire(&key, LONG).unwrap();
    away.heal();
    // Node 2 grants the same token late (a delayed request arriving after the round), with its
    // counter far ahead of the clock-made fences of the others (still below 2^53). Written
    // directly: the gate of a restarted node makes a real late grant hard to time.
    nodes[2].command(&[b"SET", &keys.fence, b"3000000000000001"]);
    let token = lease.token().as_str().to_owned();
    nodes[2].command(&[b"SET", &keys.lock, token.as_bytes(), b"PX", b"30000"]);
    assert!(
        lease.fence() < 3_000_000_000_000_000,
        "fence {}",
        lease.fence()
    );
    let restored = b.restore(&key, &token).unwrap();
    assert_eq!(restored.fence(), lease.fence());
    restored.release().unwrap();
}

/// A waiter that would otherwise sleep a whole 2 s heartbeat (the readers' TTL is longer) is
/// woken by the force-release and gets the key at once; fences keep rising across it.
#[test]
fn force_release_frees_readers_and_wakes_the_queue() {
    let server = RedisServer::start();
    let url = server.url();
    let a = common::client(&url);
    let key = unique_key("force-shared");
    let r1 = a.try_acquire_shared(&key, LONG).unwrap();
    let r2 = a.try_acquire_shared(&key, LONG).unwrap();
    let waiter = {
        let (url, key) = (url.clone(), key.clone());
        std::thread::spawn(move || {
            let c = common::client_with_heartbeat(&url, Duration::from_secs(2));
            let start = Instant::now();
            let lease = c.acquire(&key, LONG, Duration::from_secs(10)).unwrap();
            (start, Instant::now(), lease.fence(), lease)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let forced = Instant::now();
    assert!(a.force_release(&key).unwrap(), "the readers were removed");
    let (_, got, fence, lease) = waiter.join().unwrap();
    let after = got.saturating_duration_since(forced);
    eprintln!("a waiter got the key {after:?} after the force-release");
    assert!(
        after < Duration::from_millis(500),
        "woken, not at its heartbeat: {after:?}"
    );
    assert!(fence > r2.fence());
    assert_eq!(r1.release().unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(r2.release().unwrap_err().kind(), ErrorKind::Lost);
    lease.release().unwrap();
    assert!(!a.force_release(&key).unwrap());
}
