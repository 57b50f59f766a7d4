//! Fences that never go backwards when Redis loses data (a hybrid logical clock: `max(high-water
//! + 1, the key's stored fence + 1, server µs)`), and fence state bounded per server: a released
//! key leaves nothing, the server keeps one high-water. (A key that already holds our token getting
//! its expiry reset when it is granted again is `node.rs`'s test.)

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
    assert!(common::dbsize(&server) <= 1, "only the high-water left");
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

/// The server's µs clock (`TIME`).
fn server_us(server: &RedisServer) -> u64 {
    let reply = server.command(&[b"TIME"]);
    let parts: Vec<u64> = reply
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    parts[0] * 1_000_000 + parts[1]
}

#[test]
fn fresh_keys_leave_only_the_servers_high_water() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let n = 20_000;
    let started = Instant::now();
    let mut last = 0;
    for i in 0..n {
        let lease = client
            .try_acquire(format!("fresh-{i}"), LONG)
            .expect("a fresh key is free");
        assert!(lease.fence() > last, "{} after {last}", lease.fence());
        last = lease.fence();
        lease.release().unwrap();
    }
    eprintln!("{n} fresh-key cycles took {:?}", started.elapsed());
    let left = common::dbsize(&server);
    let lasting = keys_without_expiry(&server);
    eprintln!("after {n} fresh-key cycles: {left} keys, {lasting} without expiry");
    assert_eq!(left, 1, "the high-water, nothing per key");
    assert_eq!(common::count_keys(&server, "leasehold:{fences}"), 1);
    assert_eq!(lasting, 0, "the high-water expires too");
    let ttl = pttl(&server, b"leasehold:{fences}");
    assert!(
        ttl > 23 * 3600 * 1000 && ttl <= 24 * 3600 * 1000,
        "retention 24 h after the last draw, got {ttl} ms"
    );
    let stored = server.command(&[b"GET", b"leasehold:{fences}"]);
    assert!(stored.contains(&last.to_string()), "{stored:?} vs {last}");
}

#[test]
fn a_held_keys_fence_lives_with_its_lease() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let fresh = leasehold_core::Key::new(b"held").unwrap();
    let fence_key = RedisKeys::new("leasehold:", &fresh).fence;
    let mut lease = client.try_acquire("held", Duration::from_secs(5)).unwrap();
    // Bounds that no pause of this process can break: at most the TTL it was given, and after the
    // extend more than the first TTL could ever leave.
    let ttl = pttl(&server, &fence_key);
    assert!(ttl > 0 && ttl <= 5000, "the lease's TTL, got {ttl} ms");
    lease.extend(LONG).unwrap();
    let ttl = pttl(&server, &fence_key);
    assert!(
        ttl > 5000 && ttl <= 30_000,
        "extended with it, got {ttl} ms"
    );
    assert_eq!(client.inspect("held").unwrap().fence, Some(lease.fence()));
    lease.release().unwrap();
    assert_eq!(pttl(&server, &fence_key), -2, "gone with the release");
    assert_eq!(common::dbsize(&server), 1);
}

#[test]
fn fences_keep_rising_when_the_high_water_is_deleted() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let mut last = 0;
    for i in 0..200 {
        // A fresh key every time: nothing of the key's own is left to order it.
        let lease = client.try_acquire(format!("hw-gone-{i}"), LONG).unwrap();
        assert!(lease.fence() > last, "{} after {last}", lease.fence());
        last = lease.fence();
        lease.release().unwrap();
        if i % 3 == 0 {
            server.command(&[b"DEL", b"leasehold:{fences}"]);
        }
        let again = client.try_acquire(format!("hw-gone-{i}"), LONG).unwrap();
        assert!(again.fence() > last, "{} after {last}", again.fence());
        last = again.fence();
        again.release().unwrap();
    }
}

#[test]
fn a_leftover_counter_of_an_older_client_is_respected() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let key = leasehold_core::Key::new(b"upgraded").unwrap();
    let fence_key = RedisKeys::new("leasehold:", &key).fence;
    // A 0.3 client's counter, an hour ahead of this server's clock (it was drawn before the clock
    // stepped back), with its 24 h retention.
    let ahead = server_us(&server) + 3_600_000_000;
    server.command(&[
        b"SET",
        &fence_key,
        ahead.to_string().as_bytes(),
        b"PX",
        b"86400000",
    ]);
    let first = client.try_acquire("upgraded", LONG).unwrap();
    let first_fence = first.fence();
    assert!(first_fence > ahead, "{first_fence} after {ahead}");
    first.release().unwrap();
    // Its release took the key's fence away; the high-water carries the order, to this key and
    // to every other.
    for key in ["upgraded", "another"] {
        let next = client.try_acquire(key, LONG).unwrap();
        assert!(
            next.fence() > first_fence,
            "{} after {first_fence}",
            next.fence()
        );
        next.release().unwrap();
    }
    // An older client's counter below the high-water changes nothing.
    server.command(&[b"SET", &fence_key, b"5", b"PX", b"86400000"]);
    let last = client.try_acquire("upgraded", LONG).unwrap();
    assert!(last.fence() > first_fence + 1);
    last.release().unwrap();
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
