//! `redis+cluster://` against a real Redis Cluster of 3 masters and 3 replicas, one per test binary
//! (starting one takes seconds). The tests here leave it intact; `cluster_faults.rs` breaks its own.

use leasehold_core::{conformance, Client, Config, Key};
use leasehold_redis::keys::RedisKeys;
use leasehold_redis::RedisBackend;
use leasehold_testkit::{unique_key, RedisCluster};
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(3, 2000))
}

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(RedisBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

#[test]
fn conformance_suite() {
    let url = cluster().url();
    conformance::run(&|| client(&url));
}

#[test]
fn records() {
    let url = cluster().url();
    conformance::run_records(&|| client(&url));
    conformance::run_once(&|| client(&url));
}

#[test]
fn restore_and_force_release() {
    let url = cluster().url();
    conformance::run_restore(&|| client(&url));
    conformance::run_force_release(&|| client(&url));
}

#[test]
fn shared_locks() {
    let url = cluster().url();
    conformance::run_shared(&|| client(&url));
    conformance::run_promote(&|| client(&url));
}

#[test]
fn semaphores() {
    let url = cluster().url();
    conformance::run_semaphore(&|| client(&url));
    conformance::run_semaphore_size(&|| client(&url));
    let start = std::time::Instant::now();
    conformance::semaphore_limit(&client(&url), 3, 8, 50);
    eprintln!(
        "cluster: semaphore of 3, 8 threads x 50 cycles: {:?}",
        start.elapsed()
    );
}

/// Shares, permits, restore and force-release of keys on every master each reach their slot's
/// master (a fixed node would answer `MOVED` for two keys in three), and `inspect` reports the
/// holders from there.
#[test]
fn every_kind_reaches_the_slot_master() {
    let cluster = cluster();
    let (a, b) = (client(&cluster.url()), client(&cluster.url()));
    let ttl = Duration::from_secs(30);
    let mut masters = std::collections::HashSet::new();
    for i in 0..30 {
        let key = Key::new(format!("{}:{i}", unique_key("kinds"))).unwrap();
        masters.insert(cluster.master_of(RedisKeys::new("leasehold:", &key).slot()));
        let one = a.try_acquire_shared(&key, ttl).expect("shared");
        let two = b.try_acquire_shared(&key, ttl).expect("second share");
        let info = a.inspect(&key).expect("inspect");
        assert_eq!(
            (info.holders, info.shared),
            (Some(2), Some(true)),
            "{info:?}"
        );
        let again = b
            .restore(&key, one.token().as_str())
            .expect("restore a share");
        assert_eq!(again.fence(), one.fence());
        assert!(a.force_release(&key).expect("force release"));
        assert!(!a.inspect(&key).unwrap().held);
        for lease in [one, two, again] {
            lease.forget();
        }
        let permit = a.try_acquire_permit(&key, 1, ttl).expect("a permit");
        assert!(b.try_acquire_permit(&key, 1, ttl).is_err(), "one permit");
        let info = a.inspect_semaphore(&key).expect("inspect semaphore");
        assert_eq!(info.holders, Some(1), "{info:?}");
        permit.release().expect("release the permit");
        let exclusive = a.try_acquire(&key, ttl).expect("exclusive");
        assert_eq!(a.inspect(&key).unwrap().holders, Some(1));
        exclusive.release().unwrap();
    }
    assert_eq!(masters.len(), 3, "{masters:?}");
}

#[test]
fn a_thousand_keys_spread_over_every_master() {
    let cluster = cluster();
    let client = client(&cluster.url());
    let ttl = Duration::from_secs(30);
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    let mut leases = Vec::new();
    for i in 0..1000 {
        let key = Key::new(format!("{}:{i}", unique_key("spread"))).unwrap();
        let lease = client.try_acquire(&key, ttl).expect("acquire");
        let slot = RedisKeys::new("leasehold:", &key).slot();
        let master = cluster.master_of(slot).expect("a master for every slot");
        *per_master.entry(master).or_default() += 1;
        leases.push(lease);
    }
    assert_eq!(per_master.len(), 3, "{per_master:?}");
    for (master, n) in &per_master {
        assert!(
            *n > 250,
            "master {master} got only {n} of 1000 keys: {per_master:?}"
        );
        // The lock keys really are on that master (not merely routed there by us).
        let keys = cluster.node(*master).command(&[b"DBSIZE"]);
        let count: usize = keys.trim().trim_start_matches(':').parse().unwrap();
        assert!(count >= *n, "master {master}: DBSIZE {count} < {n} leases");
    }
    for lease in leases {
        lease.release().expect("release");
    }
}

#[test]
fn keys_with_braces_and_binary_bytes_work() {
    let client = client(&cluster().url_with("prefix=a%7Bb%7D%7B"));
    let ttl = Duration::from_secs(5);
    for raw in [&b"{x}"[..], b"}{", b"{}", b"\0{\xff}\n"] {
        let mut bytes = unique_key("braces").into_bytes();
        bytes.extend_from_slice(raw);
        let key = Key::new(bytes).unwrap();
        let mut lease = client
            .acquire(&key, ttl, Duration::from_secs(1))
            .expect("acquire");
        assert!(client.try_acquire(&key, ttl).is_err(), "exclusive");
        lease.extend(ttl).expect("extend");
        lease.release().expect("release");
    }
}

#[test]
fn a_prefix_with_empty_braces_is_refused() {
    let config = Config::parse(&cluster().url_with("prefix=x%7B%7D")).unwrap();
    let err = RedisBackend::connect(&config).unwrap_err();
    assert_eq!(
        err.kind(),
        leasehold_core::ErrorKind::InvalidArgument,
        "{err}"
    );
}

#[test]
fn status_names_the_masters() {
    let config = Config::parse(&cluster().url()).unwrap();
    let backend = RedisBackend::connect(&config).unwrap();
    let text = backend.topology();
    assert!(text.starts_with("cluster of 3 masters"), "{text}");
}

/// How many keys lie under `prefix` on the masters, and how many of them are fence high-waters
/// (`prefix{fences:N}`), counted by each master itself.
fn keys_under(prefix: &str) -> (usize, usize) {
    let script = b"local all = redis.call('KEYS', ARGV[1] .. '*') local hw = 0 \
                   for _, k in ipairs(all) do \
                   if string.sub(k, 1, #ARGV[1] + 8) == ARGV[1] .. '{fences:' then hw = hw + 1 end end \
                   return {#all, hw}";
    let (mut all, mut high_waters) = (0, 0);
    for node in cluster().nodes() {
        if !node.command(&[b"ROLE"]).contains("master") {
            continue;
        }
        let reply = node.command(&[b"EVAL", script, b"0", prefix.as_bytes()]);
        let numbers: Vec<usize> = reply
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        all += numbers[0];
        high_waters += numbers[1];
    }
    (all, high_waters)
}

#[test]
fn fresh_keys_leave_one_high_water_per_slot_used() {
    // A prefix of its own, so the other tests' keys on this cluster are not counted.
    let prefix = "fresh-fences:";
    let url = cluster().url_with(&format!("prefix={prefix}"));
    let c = client(&url);
    let n = 2_000;
    let mut slots = std::collections::HashSet::new();
    for i in 0..n {
        let key = format!("fresh-{i}");
        slots.insert(RedisKeys::new(prefix, &Key::new(key.as_bytes()).unwrap()).slot());
        let first = c.try_acquire(&key, Duration::from_secs(30)).unwrap();
        let fence = first.fence();
        first.release().unwrap();
        let again = c.try_acquire(&key, Duration::from_secs(30)).unwrap();
        assert!(again.fence() > fence, "{} after {fence}", again.fence());
        again.release().unwrap();
    }
    let (left, high_waters) = keys_under(prefix);
    eprintln!(
        "{n} fresh keys over {} slots left {left} keys, {high_waters} of them high-waters",
        slots.len()
    );
    assert_eq!(left, high_waters, "nothing but high-waters");
    assert_eq!(left, slots.len(), "one high-water per slot used");
}
