//! Fences that never go backwards when Redis loses data (a hybrid logical clock: `max(stored + 1,
//! server µs)`) and fence counters that expire instead of piling up. (A key that already holds our
//! token getting its expiry reset when it is granted again is `node.rs`'s test.)

mod common;

use leasehold_core::{Client, Config};
use leasehold_redis::{keys::RedisKeys, RedisBackend, RedlockBackend};
use leasehold_testkit::{unique_key, wait_until, RedisServer};
use std::time::{Duration, Instant};

const FAST: &str = "connect_timeout_ms=300&io_timeout_ms=300";
const LONG: Duration = Duration::from_secs(30);

/// How many keys have no expiry (PTTL -1), counted by the server itself.
fn keys_without_expiry(server: &RedisServer) -> i64 {
    let script = b"local n = 0 for _, k in ipairs(redis.call('KEYS', '*')) do \
                   if redis.call('PTTL', k) < 0 then n = n + 1 end end return n";
    let reply = server.command(&[b"EVAL", script, b"0"]);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

fn pttl(server: &RedisServer, key: &[u8]) -> i64 {
    let reply = server.command(&[b"PTTL", key]);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

#[test]
fn fences_keep_rising_when_the_server_restarts_without_persistence_mid_run() {
    let mut server = RedisServer::start();
    let client = common::client(&server.url_with(FAST));
    let key = unique_key("restart-fence");
    let stop = Instant::now() + Duration::from_millis(1500);
    let (fences, failures) = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let (mut fences, mut failures) = (Vec::new(), 0);
            while Instant::now() < stop {
                match client.try_acquire(&key, Duration::from_millis(50)) {
                    Ok(lease) => {
                        fences.push(lease.fence());
                        let _ = lease.release();
                    }
                    Err(_) => failures += 1,
                }
            }
            (fences, failures)
        });
        std::thread::sleep(Duration::from_millis(500));
        server.restart(); // SIGKILL, then empty again: the counter is gone.
        worker.join().unwrap()
    });
    let restarted_at = fences.windows(2).position(|w| w[1] <= w[0]);
    eprintln!(
        "{} fences ({} calls failed during the restart), first {}, last {}",
        fences.len(),
        failures,
        fences[0],
        fences[fences.len() - 1]
    );
    assert!(
        restarted_at.is_none(),
        "a fence went backwards at {restarted_at:?}: {:?}",
        &fences[restarted_at.unwrap_or(0)..(restarted_at.unwrap_or(0) + 2).min(fences.len())]
    );
    assert!(
        fences.len() > 20,
        "acquisitions before and after the restart"
    );
    assert!(common::dbsize(&server) <= 1, "only the counter left");
}

#[test]
fn redlock_fences_keep_rising_when_every_node_restarts_empty() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    let url = format!("redlock://{}?{FAST}", hosts.join(","));
    let client = Client::new(RedlockBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let key = unique_key("redlock-amnesia");
    let mut fences = Vec::new();
    let cycle = |fences: &mut Vec<u64>| {
        for _ in 0..20 {
            let lease = client.try_acquire(&key, LONG).expect("every node is up");
            fences.push(lease.fence());
            lease.release().unwrap();
        }
    };
    cycle(&mut fences);
    for node in &mut nodes {
        node.restart();
    }
    cycle(&mut fences);
    eprintln!(
        "redlock fences around a full restart: {:?}",
        &fences[18..22]
    );
    assert!(
        fences.windows(2).all(|w| w[1] > w[0]),
        "fences must strictly increase: {fences:?}"
    );
}

#[test]
fn fresh_keys_leave_only_expiring_fence_counters() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let n = 2000;
    let started = Instant::now();
    for i in 0..n {
        let lease = client
            .try_acquire(format!("fresh-{i}"), LONG)
            .expect("a fresh key is free");
        lease.release().unwrap();
    }
    eprintln!("{n} fresh-key cycles took {:?}", started.elapsed());
    let left = common::dbsize(&server);
    let counters = common::count_keys(&server, "leasehold:{*}f:*");
    let lasting = keys_without_expiry(&server);
    eprintln!("after {n} fresh-key cycles: {left} keys, {counters} fence counters, {lasting} without expiry");
    assert_eq!(left, n, "one counter per key, nothing else");
    assert_eq!(counters, n);
    assert_eq!(lasting, 0, "every fence counter expires");
    let fresh = leasehold_core::Key::new(b"fresh-0").unwrap();
    let ttl = pttl(&server, &RedisKeys::new("leasehold:", &fresh).fence);
    assert!(
        ttl > 23 * 3600 * 1000 && ttl <= 24 * 3600 * 1000,
        "retention 24 h, got {ttl} ms"
    );
}

#[test]
fn expired_counters_are_gone_and_fences_still_rise() {
    let server = RedisServer::start();
    let config = Config::parse(&server.url()).unwrap();
    let backend = RedisBackend::connect(&config)
        .unwrap()
        .with_fence_retention(Duration::from_millis(200));
    let client = Client::new(backend);
    let mut last = 0;
    for i in 0..200 {
        let lease = client.try_acquire(format!("short-{i}"), LONG).unwrap();
        last = last.max(lease.fence());
        lease.release().unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(10), || common::dbsize(&server) == 0),
        "keys left: {}",
        common::dbsize(&server)
    );
    let again = client.try_acquire("short-0", LONG).unwrap();
    assert!(again.fence() > last, "{} after {last}", again.fence());
    again.release().unwrap();
}

#[test]
fn redlock_fresh_keys_leave_only_expiring_counters() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    let url = format!("redlock://{}", hosts.join(","));
    let client = Client::new(RedlockBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    for i in 0..300 {
        let lease = client.try_acquire(format!("rl-fresh-{i}"), LONG).unwrap();
        lease.release().unwrap();
    }
    for node in &nodes {
        // Every node was sent every acquire; a counter per key, each expiring, the node's own
        // stamp (which expires too, see `redlock/gate.rs`), and no queue or lock leftovers.
        assert!(
            wait_until(Duration::from_secs(5), || common::count_keys(
                node,
                "leasehold:{*}f:*"
            ) + common::count_keys(
                node,
                "leasehold:redlock:node"
            ) == common::dbsize(node)),
            "non-counter keys left"
        );
        assert_eq!(
            common::count_keys(node, "leasehold:redlock:node"),
            1,
            "{}",
            node.command(&[b"KEYS", b"*"])
                .chars()
                .take(400)
                .collect::<String>()
        );
        assert_eq!(keys_without_expiry(node), 0);
    }
}
