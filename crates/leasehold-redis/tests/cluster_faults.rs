//! A Redis Cluster (3 masters, 3 replicas) of this binary's own, broken on purpose: a master paused
//! (SIGSTOP), then a master killed and its replica promoted. One test, in order, since each step
//! changes the cluster.

use leasehold_core::{Client, Config, ErrorKind, Key};
use leasehold_redis::keys::RedisKeys;
use leasehold_redis::RedisBackend;
use leasehold_testkit::{unique_key, RedisCluster};
use std::time::{Duration, Instant};

/// Scheduling on a loaded 2-core machine running six Cluster nodes beside the test.
const SLACK: Duration = Duration::from_millis(400);

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(RedisBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

/// A key whose slot the master on `port` serves (`true`) or does not (`false`).
fn key_on(cluster: &RedisCluster, port: u16, on: bool) -> Key {
    loop {
        let key = Key::new(unique_key("fault")).unwrap();
        let slot = RedisKeys::new("leasehold:", &key).slot();
        if (cluster.master_of(slot) == Some(port)) == on {
            return key;
        }
    }
}

#[test]
fn a_paused_master_and_a_failover() {
    let mut cluster = RedisCluster::start(3, 1000);
    let url = cluster.url_with("connect_timeout_ms=300&io_timeout_ms=300");
    let client = client(&url);
    let ttl = Duration::from_secs(30);
    let masters: Vec<u16> = cluster
        .topology()
        .iter()
        .filter(|n| n.master)
        .map(|n| n.port)
        .collect();
    assert_eq!(masters.len(), 3);

    // 1. A master paused: its keys fail within connect + I/O, the others' keys are unaffected.
    let paused = masters[0];
    let (on_paused, elsewhere) = (
        key_on(&cluster, paused, true),
        key_on(&cluster, paused, false),
    );
    cluster.node(paused).pause();
    let start = Instant::now();
    let err = client.try_acquire(&on_paused, ttl).unwrap_err();
    let took = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(took < Duration::from_millis(600) + SLACK, "took {took:?}");
    let start = Instant::now();
    client
        .try_acquire(&elsewhere, ttl)
        .expect("another master's key")
        .release()
        .unwrap();
    // Well under the paused node's 600 ms: the call never waited on it.
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    cluster.node(paused).resume();
    client
        .try_acquire(&on_paused, ttl)
        .expect("back after resume")
        .release()
        .unwrap();

    // 2. A master killed: its replica is promoted, and clients carry on.
    let victim = masters[1];
    let held = key_on(&cluster, victim, true);
    let replicated = client_with(&cluster, "replicas=1&replicas_timeout_ms=1000");
    let lease = replicated.try_acquire(&held, ttl).unwrap_or_else(|e| {
        panic!(
            "acquire with replicas=1: {e}\n{:?}\n{}",
            cluster.topology(),
            cluster.node(victim).command(&[b"INFO", b"replication"])
        )
    });
    let before = lease.fence();
    let plain = key_on(&cluster, victim, true);
    let plain_fence = {
        let l = client.try_acquire(&plain, ttl).unwrap();
        let f = l.fence();
        l.release().unwrap();
        f
    };
    cluster.node_mut(victim).kill();
    let killed = Instant::now();
    let probe = key_on_slot_of(&plain);
    let mut recovered = None;
    let mut last = None;
    while killed.elapsed() < Duration::from_secs(20) {
        match client.try_acquire(&probe, ttl) {
            Ok(lease) => {
                recovered = Some(killed.elapsed());
                lease.release().unwrap();
                break;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "during failover: {e}");
                last = Some(e);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let recovered = recovered.unwrap_or_else(|| {
        panic!(
            "no recovery within 20 s of the kill: {last:?}\n{:?}",
            cluster.topology()
        )
    });
    eprintln!("cluster: master killed, clients carry on after {recovered:?}");
    // The lease acknowledged by a replica is still held on the promoted replica.
    let err = client.try_acquire(&held, ttl).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAcquired, "{err}");
    // The promoted replica has no replica of its own (the old master is dead), so an extend
    // that asks for one cannot be confirmed: it gives the lease back and says so — `Lost`, with
    // no time left, since the key is gone and anyone may take it now.
    let mut lease = lease;
    let err = lease.extend(ttl).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert!(lease.remaining().is_zero());
    let after = client.try_acquire(&held, ttl).unwrap();
    assert!(after.fence() > before, "{} > {before}", after.fence());
    after.release().unwrap();
    let again = client.try_acquire(&plain, ttl).unwrap();
    assert!(
        again.fence() > plain_fence,
        "{} > {plain_fence}",
        again.fence()
    );
    again.release().unwrap();
    // Every master's keys work.
    for port in cluster
        .topology()
        .iter()
        .filter(|n| n.master && !n.failed)
        .map(|n| n.port)
        .collect::<Vec<_>>()
    {
        let key = key_on(&cluster, port, true);
        client.try_acquire(&key, ttl).unwrap().release().unwrap();
    }
}

fn client_with(cluster: &RedisCluster, query: &str) -> Client {
    client(&cluster.url_with(&format!("connect_timeout_ms=300&io_timeout_ms=300&{query}")))
}

/// The key itself: its slot is the one whose master was killed.
fn key_on_slot_of(key: &Key) -> Key {
    key.clone()
}
