//! A Redis that may evict keys (`maxmemory` with any `maxmemory-policy` but `noeviction`) is refused
//! at connect on every topology, and on every node a client comes to use later, unless the URL says
//! `allow_eviction=true` — and with it, memory pressure really does hand a held key to a second
//! holder.

use leasehold_core::{Client, Config, Error, ErrorKind, Key, Result};
use leasehold_redis::keys::RedisKeys;
use leasehold_redis::{RedisBackend, RedlockBackend};
use leasehold_testkit::{unique_key, RedisCluster, RedisSentinel, RedisServer};
use std::time::{Duration, Instant};

const FAST: &str = "connect_timeout_ms=300&io_timeout_ms=300";
const TTL: Duration = Duration::from_secs(30);

fn connect(url: &str) -> Result<Client> {
    let config = Config::parse(url)?;
    if url.starts_with("redlock") {
        Ok(Client::new(RedlockBackend::connect(&config)?))
    } else {
        Ok(Client::new(RedisBackend::connect(&config)?))
    }
}

fn client(url: &str) -> Client {
    connect(url).unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// The refusal connect gives, checked for what it must say.
fn refused(url: &str, policy: &str) -> Error {
    let err = match connect(url) {
        Ok(_) => panic!("{url}: connected to a server with maxmemory-policy {policy}"),
        Err(e) => e,
    };
    assert_refusal(&err, policy);
    err
}

fn assert_refusal(err: &Error, policy: &str) {
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.is_refused_deployment(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("maxmemory-policy is {policy}")),
        "{text}"
    );
    assert!(text.contains("allow_eviction=true"), "{text}");
}

fn evicting(policy: &str) -> RedisServer {
    RedisServer::start_with_args(
        None,
        ["--maxmemory", "100mb", "--maxmemory-policy", policy]
            .map(String::from)
            .to_vec(),
    )
}

/// How many `INFO` commands the server has run.
fn info_calls(server: &RedisServer) -> u64 {
    server
        .command(&[b"INFO", b"commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_info:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_single_server_that_may_evict_is_refused_unless_allowed() {
    let server = evicting("volatile-lru");
    let err = refused(&server.url_with(FAST), "volatile-lru");
    assert!(err.to_string().contains("maxmemory 104857600"), "{err}");
    let unix = RedisServer::start_with_unix_socket();
    unix.set_eviction("100mb", "allkeys-lru");
    refused(
        &format!("redis+unix://{}", unix.socket_path().display()),
        "allkeys-lru",
    );

    // allow_eviction=true: the operator's choice, taken on purpose.
    let c = client(&server.url_with(&format!("{FAST}&allow_eviction=true")));
    let key = Key::new(unique_key("allowed")).unwrap();
    c.try_acquire(&key, TTL).unwrap().release().unwrap();

    // No limit, or a policy that never evicts: nothing to refuse.
    server.set_eviction("0", "allkeys-lru");
    client(&server.url_with(FAST));
    server.set_eviction("100mb", "noeviction");
    let c = client(&server.url_with(FAST));

    // Read once per node, at connect: later calls cost no round trip.
    server.reset_stats();
    let c2 = client(&server.url_with(FAST));
    let connected = info_calls(&server);
    for _ in 0..20 {
        c2.try_acquire(&key, TTL).unwrap().release().unwrap();
        c.try_acquire(&key, TTL).unwrap().release().unwrap();
    }
    // (The first count was an INFO call too.)
    assert_eq!(info_calls(&server), connected + 1, "INFO only at connect");

    // A server that will not say (INFO denied by an ACL) is used: `doctor` tells the rest.
    server.set_eviction("100mb", "volatile-lru");
    server.command(&[
        b"ACL", b"SETUSER", b"lh", b"on", b">pw", b"~*", b"&*", b"+@all", b"-info",
    ]);
    let url = server
        .url_with(FAST)
        .replacen("redis://", "redis://lh:pw@", 1);
    client(&url)
        .try_acquire(&key, TTL)
        .expect("INFO denied: connect goes on")
        .release()
        .unwrap();
}

#[test]
fn a_redlock_with_one_evicting_node_of_three_is_refused() {
    let good = [RedisServer::start(), RedisServer::start()];
    let bad = evicting("volatile-ttl");
    let addrs = [good[0].addr(), bad.addr(), good[1].addr()];
    let url = |q: &str| format!("redlock://{}?{FAST}{q}", addrs.join(","));
    let err = refused(&url(""), "volatile-ttl");
    assert!(
        err.to_string().contains(&bad.addr()),
        "names the node: {err}"
    );
    client(&url("&allow_eviction=true"));

    // A node down at connect is screened when it comes back: refused, it never votes.
    let mut late = evicting("allkeys-random");
    let addrs = [good[0].addr(), good[1].addr(), late.addr()];
    late.kill();
    let c = client(&format!("redlock://{}?{FAST}", addrs.join(",")));
    late.restart();
    for i in 0..10 {
        let key = Key::new(unique_key(&format!("late{i}"))).unwrap();
        c.try_acquire(&key, TTL)
            .expect("the two good nodes are a quorum")
            .release()
            .unwrap();
    }
    let keys = late.command(&[b"DBSIZE"]);
    assert_eq!(keys.trim(), ":0", "the evicting node was never written");
}

#[test]
fn a_cluster_with_an_evicting_master_is_refused_and_so_is_one_promoted_later() {
    let mut cluster = RedisCluster::start(3, 1000);
    let topology = cluster.topology();
    let masters: Vec<u16> = topology
        .iter()
        .filter(|n| n.master)
        .map(|n| n.port)
        .collect();
    let replicas: Vec<u16> = topology
        .iter()
        .filter(|n| !n.master)
        .map(|n| n.port)
        .collect();
    let url = cluster.url_with(FAST);
    cluster
        .node(masters[2])
        .set_eviction("100mb", "volatile-random");
    refused(&url, "volatile-random");
    cluster.node(masters[2]).set_eviction("0", "noeviction");

    // Every replica evicts: nothing is refused while they are replicas, and the one promoted
    // is refused on the first call that reaches it.
    for &port in &replicas {
        cluster.node(port).set_eviction("100mb", "allkeys-lfu");
    }
    let c = client(&url);
    let victim = masters[0];
    let key = loop {
        let key = Key::new(unique_key("promoted")).unwrap();
        if cluster.master_of(RedisKeys::new("leasehold:", &key).slot()) == Some(victim) {
            break key;
        }
    };
    c.try_acquire(&key, TTL).unwrap().release().unwrap();
    cluster.node_mut(victim).kill();
    let killed = Instant::now();
    let err = loop {
        match c.try_acquire(&key, TTL) {
            Err(e) if e.kind() == ErrorKind::Unavailable => {}
            Err(e) => break e,
            Ok(_) => panic!("acquired on a promoted replica that evicts"),
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no failover within 30 s: {:?}",
            cluster.topology()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_refusal(&err, "allkeys-lfu");
}

#[test]
fn a_sentinel_master_that_evicts_is_refused_and_so_is_a_new_one_after_a_failover() {
    let group = RedisSentinel::start(2, 3, 1000);
    let url = group.url_with(FAST);
    let master = &group.servers()[0];
    master.set_eviction("100mb", "volatile-lfu");
    refused(&url, "volatile-lfu");
    client(&group.url_with(&format!("{FAST}&allow_eviction=true")));
    master.set_eviction("0", "noeviction");

    for replica in &group.servers()[1..] {
        replica.set_eviction("100mb", "volatile-lru");
    }
    let c = client(&url);
    let key = Key::new(unique_key("failover")).unwrap();
    c.try_acquire(&key, TTL).unwrap().release().unwrap();
    group.sentinels()[0].command(&[b"SENTINEL", b"FAILOVER", group.service().as_bytes()]);
    let started = Instant::now();
    let err = loop {
        match c.try_acquire(&key, TTL) {
            Ok(lease) => lease.release().unwrap(),
            Err(e) if e.kind() == ErrorKind::Unavailable => {}
            Err(e) => break e,
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the new master was not refused within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_refusal(&err, "volatile-lru");
}

/// What `allow_eviction=true` accepts, shown: memory runs short, the server evicts the lock key of
/// a lease that still has most of its TTL, and a second client takes the key while the first
/// still counts on it. Deterministic: the filler has no expiry, so under `volatile-lru` the keys
/// with one (the lock's) are the only ones the server can evict, and it answers OOM only once
/// none is left.
#[test]
fn with_allow_eviction_memory_pressure_gives_a_second_holder() {
    let server = RedisServer::start();
    let url = server.url_with(&format!("{FAST}&allow_eviction=true"));
    let (first, second) = (client(&url), client(&url));
    let key = Key::new(unique_key("evicted")).unwrap();
    let lease = first.try_acquire(&key, TTL).unwrap();
    let lock = RedisKeys::new("leasehold:", &key).lock;

    let used: u64 = server
        .command(&[b"INFO", b"memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    server.set_eviction(&(used + 4 * 1024 * 1024).to_string(), "volatile-lru");
    let filler = vec![b'x'; 256 * 1024];
    let mut out_of_memory = false;
    for i in 0..200 {
        let name = format!("filler:{i}");
        let reply = server.command(&[b"SET", name.as_bytes(), &filler]);
        if reply.starts_with("-OOM") {
            out_of_memory = true;
            break;
        }
        assert!(reply.starts_with("+OK"), "{reply}");
    }
    assert!(out_of_memory, "the memory limit was never reached");
    assert_eq!(
        server.command(&[b"EXISTS", &lock]).trim(),
        ":0",
        "the lock key was evicted"
    );
    // Room again (the operator raises the limit), and the key is free for anyone.
    server.set_eviction("0", "volatile-lru");
    let other = second
        .try_acquire(&key, TTL)
        .expect("the evicted key is free for a second holder");
    assert!(
        lease.remaining() > Duration::from_secs(20),
        "the first holder still counts on its lease: {:?}",
        lease.remaining()
    );
    assert!(other.fence() > lease.fence());
    other.release().unwrap();
    assert_eq!(lease.release().unwrap_err().kind(), ErrorKind::Lost);
}
