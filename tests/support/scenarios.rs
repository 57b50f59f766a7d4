//! The torture scenarios: for each backend and topology, the servers, the workers' plan (which
//! lease kinds the backend offers) and the catalogue of faults that apply to it. Shared by the
//! torture test (tests/torture.rs) and the soak (examples/torture.rs `--backend NAME`).
//!
//! Two rules for all:
//! - A server that loses what it held (restarted without persistence, or a backend whose locks are
//!   sessions) stays down longer than the longest TTL ([`MAX_TTL`]), the README's advice: no lease
//!   granted before the loss can still be believed after it. The durability scenarios
//!   ([`redis_aof`], [`postgres_durable`], [`mysql_durable`]) do the opposite on purpose: a server
//!   set up to keep its leases through a crash restarts at once, with leases of seconds, and must
//!   lose none.
//! - A server is stopped for at most the checker's `SERVER_STALL`; a Cluster master for less than
//!   the node timeout, so a pause never starts a failover, and a failover (a kill) takes longer
//!   than any TTL, so every lease the lost master knew of has expired before the promoted replica
//!   grants anything. Exclusion is asserted across failovers for that reason.

#![allow(dead_code)]

use crate::torture::{self, Plan, MAX_TTL};
use leasehold_testkit::{
    wait_until, Catalogue, EtcdCluster, Fault, FaultProxy, Generator, MariaDbServer, PgBouncer,
    PoolMode, PostgresServer, RedisCluster, RedisSentinel, RedisServer, Schedule, TempDir,
};
use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a server that lost its locks stays down: longer than any lease.
const DOWN: Duration = Duration::from_millis(MAX_TTL.as_millis() as u64 + 150);
/// How long a server is stopped at most.
const PAUSE: Duration = Duration::from_millis(1500);
/// `cluster-node-timeout` of the Cluster scenario: longer than its pause, so a pause never starts a
/// failover, and far longer than any TTL.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 2000;
/// How long a Cluster master is stopped at most.
const CLUSTER_PAUSE: Duration = Duration::from_secs(1);
/// `down-after-milliseconds` of the Sentinel scenario: far longer than any TTL.
const SENTINEL_DOWN_AFTER_MS: u64 = 1000;
/// `replicas_timeout_ms` of the scenarios with `replicas=1`.
const REPLICAS_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a killed master is given to be replaced before it is restarted anyway (empty, which the
/// scenario also survives: it stayed down longer than any TTL).
const FAILOVER_LIMIT: Duration = Duration::from_secs(10);
/// How long an old master back after a failover is given to become a synced replica.
const REPLICA_LIMIT: Duration = Duration::from_secs(20);

/// What a scenario sets up: the workers' plan, the faults that apply, and what must live until the
/// run ends (servers, proxies).
pub struct Setup {
    pub plan: Plan,
    pub catalogue: Catalogue,
    pub keep: Vec<Box<dyn Any + Send>>,
    /// When faults ended every client session, for a backend whose leases live in their sessions:
    /// the checker ends those leases there and judges what their holders believed after.
    pub session_ends: SessionEnds,
    /// When a fault crashed the server and it answered again with its data, for the scenarios
    /// that claim to keep every lease through that: the checker counts the leases relied on
    /// across one (it grants nothing for them).
    pub restarts: Restarts,
}

/// The `(crash, back)` of each crash and restart of the server with its data.
pub type Restarts = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// The `(invoke, complete)` of each call that ended every client session, and how long the fault
/// proxy held every chunk while it ran ([`held_by`]).
pub type SessionEnds = Arc<Mutex<Vec<(Instant, Instant, Duration)>>>;

/// The scenarios by name, for the soak's `--backend`.
pub const NAMES: [&str; 17] = [
    "local",
    "redis",
    "redis-replicas",
    "redlock",
    "redis-cluster",
    "redis-sentinel",
    "postgres-advisory",
    "postgres-table",
    "mysql-named",
    "mysql-table",
    "etcd",
    "redis-evicting",
    "postgres-table-pgbouncer-session",
    "postgres-table-pgbouncer-transaction",
    "redis-aof",
    "postgres-table-durable",
    "mysql-table-durable",
];

/// The scenario called `name` (one of [`NAMES`]).
pub fn by_name(name: &str, seed: u64, duration: Duration) -> Option<Setup> {
    Some(match name {
        "local" => local(seed, duration),
        "redis" => redis(seed, duration),
        "redis-replicas" => redis_replicas(seed, duration),
        "redlock" => redlock(seed, duration),
        "redis-cluster" => redis_cluster(seed, duration),
        "redis-sentinel" => redis_sentinel(seed, duration),
        "postgres-advisory" => postgres("advisory", seed, duration),
        "postgres-table" => postgres("table", seed, duration),
        "mysql-named" => mysql("named", seed, duration),
        "mysql-table" => mysql("table", seed, duration),
        "etcd" => etcd(seed, duration),
        "redis-evicting" => redis_evicting(seed, duration),
        "postgres-table-pgbouncer-session" => postgres_pgbouncer(PoolMode::Session, seed, duration),
        "postgres-table-pgbouncer-transaction" => {
            postgres_pgbouncer(PoolMode::Transaction, seed, duration)
        }
        "redis-aof" => redis_aof(seed, duration),
        "postgres-table-durable" => postgres_durable(seed, duration),
        "mysql-table-durable" => mysql_durable(seed, duration),
        _ => return None,
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Shares a server between the scenario and its fault closures.
fn shared<T>(server: T) -> Arc<Mutex<T>> {
    Arc::new(Mutex::new(server))
}

/// Local files: holders paused past their TTL and handoffs (the workers' own faults), and what a
/// tmp cleaner does to a directory nobody listed as precious: it deletes files not modified for a
/// while (longer than any TTL, so never the record of a held key) and the fence mark, while workers
/// keep opening new clients (as PHP processes do). No proxy, no server.
pub fn local(seed: u64, duration: Duration) -> Setup {
    let dir = TempDir::new("torture-local");
    let mut plan = Plan::new(&dir.file_url(), duration, seed);
    plan.reconnect_every = Some(10);
    let mut catalogue = Catalogue::new();
    let path = dir.path().to_path_buf();
    catalogue.add(
        "tmp cleaner",
        "dir",
        Duration::from_secs(2),
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        move |_, _| {
            let mut deleted = 0;
            for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                let idle = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > MAX_TTL + Duration::from_millis(100));
                let mark = entry.file_name() == ".leasehold-fences";
                if (idle || mark) && std::fs::remove_file(entry.path()).is_ok() {
                    deleted += 1;
                }
            }
            format!("{deleted} files")
        },
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(dir)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// A Redis server's faults: SIGSTOP, and kill -9 with a restart empty after [`DOWN`] (the single
/// server keeps a lease only with AOF, which these servers do not run).
fn redis_server_faults(catalogue: &mut Catalogue, name: &str, server: &Arc<Mutex<RedisServer>>) {
    let (s1, s2, s3, s4) = (
        server.clone(),
        server.clone(),
        server.clone(),
        server.clone(),
    );
    catalogue.pause(
        &format!("SIGSTOP {name}"),
        name,
        Duration::from_secs(5),
        PAUSE,
        move || lock(&s1).pause(),
        move || lock(&s2).resume(),
    );
    catalogue.kill_restart(
        &format!("kill -9 {name}, restart empty"),
        name,
        Duration::from_secs(7),
        DOWN,
        move || lock(&s3).kill(),
        move || {
            lock(&s4).restart();
            String::new()
        },
    );
}

/// One Redis server behind a proxy: every proxy fault, SIGSTOP, kill -9 and restart empty.
pub fn redis(seed: u64, duration: Duration) -> Setup {
    let server = shared(RedisServer::start());
    let (url, proxies) = torture::proxied(&lock(&server).url());
    let plan = Plan::new(&url, duration, seed);
    let mut catalogue = Catalogue::new();
    catalogue.proxy_faults(&proxies, plan.io_timeout, true);
    redis_server_faults(&mut catalogue, "redis", &server);
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(proxies), Box::new(server)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// A Redis master with one replica and `replicas=1` (every grant and extend waits for the replica's
/// acknowledgement): every proxy fault on the master's connections, the master stopped or killed
/// and restarted empty, the replica stopped (grants then fail the `WAIT` and must say so).
pub fn redis_replicas(seed: u64, duration: Duration) -> Setup {
    let master = shared(RedisServer::start());
    let port = lock(&master).port();
    let replica = shared(RedisServer::start_with_args(
        None,
        vec!["--replicaof".into(), "127.0.0.1".into(), port.to_string()],
    ));
    let synced = wait_until(Duration::from_secs(10), || {
        lock(&master)
            .command(&[b"INFO", b"replication"])
            .contains("state=online")
    });
    assert!(synced, "the replica never came online");
    let (url, proxies) = torture::proxied(&lock(&master).url_with(&format!(
        "replicas=1&replicas_timeout_ms={}",
        REPLICAS_TIMEOUT.as_millis()
    )));
    let mut plan = Plan::new(&url, duration, seed);
    plan.write_allowance = REPLICAS_TIMEOUT;
    let mut catalogue = Catalogue::new();
    catalogue.proxy_faults(&proxies, plan.io_timeout, true);
    redis_server_faults(&mut catalogue, "master", &master);
    let (r1, r2) = (replica.clone(), replica.clone());
    catalogue.pause(
        "SIGSTOP replica",
        "replica",
        Duration::from_secs(5),
        PAUSE,
        move || lock(&r1).pause(),
        move || lock(&r2).resume(),
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(proxies), Box::new(replica), Box::new(master)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// Redlock over 5 nodes: every proxy fault (on a minority, sometimes on all); a minority stopped;
/// a node killed and restarted empty after [`DOWN`] (Redlock's delayed restart: a node that comes
/// back empty while a lease holds a bare majority would hand that lease's key to another majority,
/// which the README rules out by keeping it away longer than the longest TTL). One node at a time:
/// two of five down at once would leave a bare majority, and a third fault would leave none.
pub fn redlock(seed: u64, duration: Duration) -> Setup {
    let servers: Vec<Arc<Mutex<RedisServer>>> =
        (0..5).map(|_| shared(RedisServer::start())).collect();
    let hosts: Vec<String> = servers.iter().map(|s| lock(s).addr()).collect();
    let (url, proxies) = torture::proxied(&format!("redlock://{}", hosts.join(",")));
    let plan = Plan::new(&url, duration, seed);
    let mut catalogue = Catalogue::new();
    catalogue.proxy_faults(&proxies, plan.io_timeout, true);
    let (pa, pb) = (servers.clone(), servers.clone());
    let chosen = Arc::new(Mutex::new(Vec::<usize>::new()));
    let (c1, c2) = (chosen.clone(), chosen.clone());
    let turn = Arc::new(std::sync::atomic::AtomicUsize::new(seed as usize));
    let t1 = turn.clone();
    catalogue.pause(
        "SIGSTOP a minority of nodes",
        "nodes",
        Duration::from_secs(4),
        Duration::from_secs(1),
        move || {
            let first = t1.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 5;
            let minority = vec![first, (first + 2) % 5];
            for &i in &minority {
                lock(&pa[i]).pause();
            }
            *lock(&c1) = minority;
        },
        move || {
            for &i in lock(&c2).iter() {
                lock(&pb[i]).resume();
            }
        },
    );
    let (ka, kb) = (servers.clone(), servers.clone());
    let killed = Arc::new(Mutex::new(0usize));
    let (k1, k2) = (killed.clone(), killed.clone());
    let t2 = turn.clone();
    catalogue.kill_restart(
        "kill -9 a node, restart empty",
        "nodes",
        Duration::from_secs(4),
        DOWN,
        move || {
            let i = t2.fetch_add(3, std::sync::atomic::Ordering::Relaxed) % 5;
            lock(&ka[i]).kill();
            *lock(&k1) = i;
        },
        move || {
            let i = *lock(&k2);
            lock(&kb[i]).restart();
            format!("node {i}")
        },
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(proxies), Box::new(servers)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// The Cluster master serving the torture key `k` (see tests/support/torture.rs's key names).
fn torture_master(cluster: &RedisCluster, k: usize) -> Option<u16> {
    let key = leasehold::Key::new(format!("torture:{k}")).expect("a key");
    let slot = leasehold_redis::keys::RedisKeys::new("leasehold:", &key).slot();
    cluster.master_of(slot)
}

/// Redis Cluster (3 masters, 3 replicas): the master of a torture key stopped for less than the
/// node timeout; the master of a torture key killed, its replica promoted, the killed node
/// restarted empty (it rejoins as its successor's replica). No proxies: `CLUSTER SLOTS` announces
/// the nodes' real ports, so clients would go around them.
pub fn redis_cluster(seed: u64, duration: Duration) -> Setup {
    let cluster = shared(RedisCluster::start(3, CLUSTER_NODE_TIMEOUT_MS));
    let plan = Plan::new(&lock(&cluster).url(), duration, seed);
    let keys = plan.keys;
    let mut catalogue = Catalogue::new();
    let (c1, c2, c3) = (cluster.clone(), cluster.clone(), cluster.clone());
    let paused = Arc::new(Mutex::new(None::<u16>));
    let (p1, p2) = (paused.clone(), paused.clone());
    let key_of = Arc::new(Mutex::new(fastrand::Rng::with_seed(seed)));
    let (r1, r2) = (key_of.clone(), key_of.clone());
    catalogue.pause(
        "SIGSTOP a master",
        "cluster",
        Duration::from_secs(5),
        CLUSTER_PAUSE,
        move || {
            let k = lock(&r1).usize(..keys);
            let c = lock(&c1);
            if let Some(port) = torture_master(&c, k) {
                c.node(port).pause();
                *lock(&p1) = Some(port);
            }
        },
        move || {
            if let Some(port) = lock(&p2).take() {
                lock(&c2).node(port).resume();
            }
        },
    );
    catalogue.add(
        "kill -9 a master, fail over, restart it empty",
        "cluster",
        Duration::from_secs(7),
        Duration::ZERO,
        Duration::ZERO,
        Duration::from_secs(2),
        move |_, _| {
            // A master with a synced replica (the one killed last time may still be syncing
            // its successor's data; killing that one would leave its slots without a master).
            let mut candidates: Vec<usize> = (0..keys).collect();
            lock(&r2).shuffle(&mut candidates);
            let mut c = lock(&c3);
            let victim = candidates.into_iter().find_map(|k| {
                let port = torture_master(&c, k)?;
                let synced = c
                    .node(port)
                    .command(&[b"INFO", b"replication"])
                    .contains("state=online");
                synced.then_some((k, port))
            });
            let Some((k, port)) = victim else {
                return "no master with a synced replica".into();
            };
            c.node_mut(port).kill();
            let killed = Instant::now();
            let replaced = wait_until(FAILOVER_LIMIT, || {
                torture_master(&c, k).is_some_and(|p| p != port)
            });
            let took = killed.elapsed();
            // nodes.conf survives the restart: the node rejoins, learns it was replaced, and
            // becomes its successor's replica.
            c.node_mut(port).restart();
            format!("port {port}, replaced: {replaced} after {took:?}")
        },
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(cluster)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// Redis Sentinel (a master, 2 replicas, 3 Sentinels; `replicas=1`, as the README recommends
/// there): the master killed, the Sentinels fail over, the old master restarted empty at once (it
/// claims to be a master until the Sentinels make it a replica, seconds later); or restarted and
/// followed until it is a synced replica of its successor (the next failover may then promote
/// it). Clients reach the old master while it is empty and claims to be one: a worker idle for
/// seconds with its client through the failover (its dead connection is replaced by one to the
/// same address), or one that asks the Sentinels before most of them have caught up. It must not
/// be granted a key there that the new master holds for another (`replicas=1`: the old master has
/// no replica to acknowledge it; with that check broken, the checker finds overlaps). No proxies,
/// for the same reason as Cluster.
pub fn redis_sentinel(seed: u64, duration: Duration) -> Setup {
    let group = shared(RedisSentinel::start(2, 3, SENTINEL_DOWN_AFTER_MS));
    let url = lock(&group).url_with(&format!(
        "replicas=1&replicas_timeout_ms={}",
        REPLICAS_TIMEOUT.as_millis()
    ));
    let mut plan = Plan::new(&url, duration, seed);
    plan.write_allowance = REPLICAS_TIMEOUT;
    plan.idle = Some((0.02, Duration::from_secs(2)..=Duration::from_secs(8)));
    let mut catalogue = Catalogue::new();
    for (name, every, back_as_replica) in [
        (
            "Sentinel failover (kill -9 the master, restart it empty)",
            Duration::from_secs(6),
            false,
        ),
        (
            "Sentinel failover, the old master back as a replica (kill -9, promote, restart)",
            Duration::from_secs(10),
            true,
        ),
    ] {
        let g = group.clone();
        catalogue.add(
            name,
            "sentinel",
            every,
            Duration::ZERO,
            Duration::ZERO,
            Duration::from_secs(2),
            move |_, _| sentinel_failover(&mut lock(&g), back_as_replica),
        );
    }
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(group)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// Kills the master, waits for the Sentinels to promote another, restarts the old one empty and
/// a master (as a real one comes back: see [`RedisServer::restart_as_master`]), and, when
/// `back_as_replica`, waits until the Sentinels have made it a synced replica; says how long each
/// took.
fn sentinel_failover(g: &mut RedisSentinel, back_as_replica: bool) -> String {
    let Some(master) = g.master_port() else {
        return "no master known".into();
    };
    g.server_mut(master).kill();
    let killed = Instant::now();
    let replaced = wait_until(FAILOVER_LIMIT, || {
        g.master_port().is_some_and(|p| p != master)
    });
    let took = killed.elapsed();
    g.server_mut(master).restart_as_master();
    let mut what = format!("port {master}, replaced: {replaced} after {took:?}");
    if back_as_replica {
        let restarted = Instant::now();
        let server = g.server_mut(master);
        let synced = wait_until(REPLICA_LIMIT, || {
            let info = server.command(&[b"INFO", b"replication"]);
            info.contains("role:slave") && info.contains("master_link_status:up")
        });
        what += &format!(
            ", a synced replica: {synced} after {:?}",
            restarted.elapsed()
        );
    }
    what
}

/// A Redis that may evict keys, used anyway (`allow_eviction=true`): `maxmemory` a little above
/// what the server uses at start, `volatile-lru`, and memory pressure drawn as a fault: filler keys
/// without expiry written until the server answers OOM, held, then deleted. Under `volatile-lru`
/// the lock keys (which all expire) are the ones evicted to make room, so a key still held is
/// freed for a second holder: the checker must find that overlap (the one `doctor` predicts). No
/// proxy and no other fault, so the overlap is the eviction's. Connect without
/// `allow_eviction=true` is refused first.
pub fn redis_evicting(seed: u64, duration: Duration) -> Setup {
    let server = shared(RedisServer::start());
    let used: u64 = lock(&server)
        .command(&[b"INFO", b"memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO memory says used_memory");
    lock(&server).set_eviction(&(used + 8 * 1024 * 1024).to_string(), "volatile-lru");
    let url = lock(&server).url();
    match leasehold::connect(&url) {
        Ok(_) => panic!("connected to a Redis that evicts without allow_eviction=true"),
        Err(e) => assert!(
            e.is_refused_deployment(),
            "not refused as a deployment: {e}"
        ),
    }
    let mut plan = Plan::new(&format!("{url}?allow_eviction=true"), duration, seed);
    // Two keys for eight workers, holders at work for up to all of their lease: a key freed by
    // eviction is soon asked for by another while its holder still counts on it.
    plan.keys = 2;
    plan.work_share = 1;
    let mut catalogue = Catalogue::new();
    let s = server.clone();
    catalogue.add(
        "memory pressure (filler keys until OOM, volatile-lru evicts lock keys)",
        "memory",
        Duration::from_millis(800),
        Duration::from_millis(500),
        Duration::from_millis(1500),
        Duration::from_millis(100),
        move |d, _| {
            let evicted = || {
                lock(&s)
                    .command(&[b"INFO", b"stats"])
                    .lines()
                    .find_map(|l| l.strip_prefix("evicted_keys:")?.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let before = evicted();
            let filler = vec![b'x'; 64 * 1024];
            let mut written = 0;
            let mut oom = false;
            while written < 1000 {
                let name = format!("filler:{written}");
                let reply = lock(&s).command(&[b"SET", name.as_bytes(), &filler]);
                if reply.starts_with("-OOM") {
                    oom = true;
                    break;
                }
                written += 1;
            }
            // Held at the limit: a filler added, then the oldest deleted, every few milliseconds,
            // so each new one makes the server evict whatever lock keys were written meanwhile.
            let (mut first, until) = (0, Instant::now() + d);
            while Instant::now() < until && first < written {
                let name = format!("filler:{written}");
                lock(&s).command(&[b"SET", name.as_bytes(), &filler]);
                lock(&s).command(&[b"DEL", format!("filler:{first}").as_bytes()]);
                (first, written) = (first + 1, written + 1);
                std::thread::sleep(Duration::from_millis(5));
            }
            for i in first..written {
                lock(&s).command(&[b"DEL", format!("filler:{i}").as_bytes()]);
            }
            format!(
                "{written} filler keys, OOM reached: {oom}, {} keys evicted",
                evicted() - before
            )
        },
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(server)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// PostgreSQL table mode through a real PgBouncer in `mode`, the bouncer behind a proxy: every
/// proxy fault (in front of PgBouncer), the server stopped and crashed (restarted with its data),
/// every server session terminated (`pg_terminate_backend`: PgBouncer's server connections), and
/// PgBouncer's own actions through its admin console: `RECONNECT`, `KILL` of the database (every
/// client and server connection dropped) then `RESUME`, `PAUSE` then `RESUME` (transaction
/// pooling: `PAUSE` waits for the transactions running; under session pooling it would wait for
/// every client to leave), and PgBouncer stopped (SIGTERM) and started again. Table leases live in
/// rows, so none of it may cost a lease. Transaction pooling is named in the URL (`pooler=
/// transaction`) and offers no shared leases; session pooling is left to detection (the proxy's
/// port is not the server's, so connect looks). Advisory mode through the transaction pooler is
/// refused at connect, named or detected.
pub fn postgres_pgbouncer(mode: PoolMode, seed: u64, duration: Duration) -> Setup {
    let server = shared(PostgresServer::start());
    let bouncer = shared(PgBouncer::start(&lock(&server), mode));
    let admin = lock(&server).url();
    let transaction = mode == PoolMode::Transaction;
    if transaction {
        for query in ["lock=advisory&pooler=transaction", "lock=advisory"] {
            match leasehold::connect(&lock(&bouncer).url_with(query)) {
                Ok(_) => {
                    panic!("advisory mode through a transaction pooler was not refused ({query})")
                }
                Err(e) => assert!(
                    e.is_refused_deployment(),
                    "advisory mode through a transaction pooler ({query}): {e}"
                ),
            }
        }
    }
    let query = if transaction {
        "lock=table&pooler=transaction"
    } else {
        "lock=table"
    };
    let (url, proxies) = torture::proxied(&lock(&bouncer).url_with(query));
    let mut plan = Plan::new(&url, duration, seed);
    if transaction {
        plan.shared = false;
        plan.swaps = false;
    }
    let mut catalogue = Catalogue::new();
    catalogue.proxy_faults(&proxies, plan.io_timeout, true);
    database_faults(
        &mut catalogue,
        &server,
        ("SIGSTOP postgres", "crash postgres, restart with data"),
        Duration::from_secs(8),
    );
    catalogue.add(
        "pg_terminate_backend of every server session",
        "server",
        Duration::from_secs(4),
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        move |_, _| terminate_postgres_sessions(&admin),
    );
    let port = lock(&bouncer).port();
    catalogue.add(
        "PgBouncer RECONNECT",
        "pgbouncer",
        Duration::from_secs(3),
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        move |_, _| pgbouncer_admin(port, &["RECONNECT"]),
    );
    // KILL drops the database's server connections, PAUSE waits for them to go idle; either stops
    // new queries until RESUME. In session pooling PAUSE waits for every client to leave: never.
    let stops: &[(&'static str, &'static str)] = if transaction {
        &[
            ("PgBouncer KILL, then RESUME", "KILL postgres"),
            ("PgBouncer PAUSE, then RESUME", "PAUSE postgres"),
        ]
    } else {
        &[("PgBouncer KILL, then RESUME", "KILL postgres")]
    };
    for &(name, stop) in stops {
        catalogue.add(
            name,
            "pgbouncer",
            Duration::from_secs(4),
            Duration::from_millis(100),
            PAUSE,
            Duration::from_millis(200),
            move |d, _| {
                let stopped = pgbouncer_admin(port, &[stop]);
                std::thread::sleep(d);
                format!("{stopped}; {}", pgbouncer_admin(port, &["RESUME postgres"]))
            },
        );
    }
    let b = bouncer.clone();
    catalogue.add(
        "PgBouncer stopped (SIGTERM) and started again",
        "pgbouncer",
        Duration::from_secs(6),
        Duration::from_millis(100),
        Duration::from_millis(500),
        Duration::from_millis(500),
        move |d, _| {
            let mut b = lock(&b);
            b.stop();
            std::thread::sleep(d);
            b.restart();
            String::new()
        },
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(proxies), Box::new(bouncer), Box::new(server)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// Runs `commands` on PgBouncer's admin console (the `pgbouncer` database), straight to its port,
/// and says what came of each.
fn pgbouncer_admin(port: u16, commands: &[&str]) -> String {
    let url =
        format!("host=127.0.0.1 port={port} user=postgres dbname=pgbouncer connect_timeout=5");
    let mut c = match postgres::Client::connect(&url, postgres::NoTls) {
        Ok(c) => c,
        Err(e) => return format!("admin connection failed: {e}"),
    };
    let said: Vec<String> = commands
        .iter()
        .map(|cmd| match c.simple_query(cmd) {
            Ok(_) => format!("{cmd}: ok"),
            Err(e) => format!("{cmd}: {e}"),
        })
        .collect();
    said.join(", ")
}

/// Ends every client session on the server but the admin's own (`pg_terminate_backend`, waiting
/// until each has exited, so every session has ended when it returns).
fn terminate_postgres_sessions(admin_url: &str) -> String {
    let Ok(mut c) = postgres::Client::connect(admin_url, postgres::NoTls) else {
        return "admin connection failed".into();
    };
    let sql = "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity \
               WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'";
    match c.query_one(sql, &[]) {
        Ok(row) => format!("{} sessions", row.get::<_, i64>(0)),
        Err(e) => format!("failed: {e}"),
    }
}

/// PostgreSQL, advisory or table: proxy faults (advisory: no resets, which end the session that is
/// the lock, as documented); the server stopped (all its processes); kill (immediate shutdown, a
/// crash) and restart with its data after [`DOWN`] (advisory locks die with the sessions; table
/// rows survive); every client session terminated (`pg_terminate_backend`), which costs a table
/// lease nothing and ends every advisory lease, whose holders must see it before another client
/// is granted the key (the checker judges what they believed after). Table mode also: handoffs
/// by token (advisory cannot restore).
pub fn postgres(mode: &str, seed: u64, duration: Duration) -> Setup {
    let server = shared(PostgresServer::start());
    let admin = lock(&server).url();
    let (url, proxies) = torture::proxied(&lock(&server).url_with(&format!("lock={mode}")));
    let mut plan = Plan::new(&url, duration, seed);
    let table = mode == "table";
    if !table {
        plan.handoff_chance = 0.0;
        plan.work_share = 1;
    }
    let mut catalogue = Catalogue::new();
    catalogue.proxy_faults(&proxies, plan.io_timeout, table);
    database_faults(
        &mut catalogue,
        &server,
        ("SIGSTOP postgres", "crash postgres, restart with data"),
        Duration::from_secs(8),
    );
    let session_ends = SessionEnds::default();
    let ends = (!table).then(|| session_ends.clone());
    let relays = proxies.clone();
    catalogue.add(
        "pg_terminate_backend of every client session",
        "server",
        kill_every(table),
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        move |_, _| ending_sessions(&ends, &relays, || terminate_postgres_sessions(&admin)),
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(proxies), Box::new(server)],
        session_ends,
        restarts: Restarts::default(),
    }
}

/// A three-member etcd cluster, each member behind a proxy: every proxy fault, a member stopped
/// (SIGSTOP), a member killed and started again on its data (etcd keeps its leases and revision, so
/// it need not stay down), a member cut off from the others by a network split while its clients
/// still reach it (the leader among them, in turn). One member at a time, so a majority always serves. etcd holds a lease
/// for at least 2 s (the test cluster's minimum TTL) and ends it at its next expiry check (every
/// 500 ms) through a Raft round: the checker's floor for what the server holds.
pub fn etcd(seed: u64, duration: Duration) -> Setup {
    let cluster = shared(EtcdCluster::start());
    let (url, proxies) = torture::proxied(&lock(&cluster).url());
    let mut plan = Plan::new(&url, duration, seed);
    plan.server_hold_floor = Duration::from_millis(3000);
    let mut catalogue = Catalogue::new();
    catalogue.proxy_faults(&proxies, plan.io_timeout, true);
    let turn = Arc::new(std::sync::atomic::AtomicUsize::new(seed as usize));
    let chosen = Arc::new(Mutex::new(0usize));
    let (c1, c2, c3, c4) = (
        cluster.clone(),
        cluster.clone(),
        cluster.clone(),
        cluster.clone(),
    );
    let (t1, t2) = (turn.clone(), turn.clone());
    let (p1, p2, k1, k2) = (
        chosen.clone(),
        chosen.clone(),
        chosen.clone(),
        chosen.clone(),
    );
    catalogue.pause(
        "SIGSTOP a member",
        "members",
        Duration::from_secs(5),
        PAUSE,
        move || {
            let i = t1.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3;
            lock(&c1).pause(i);
            *lock(&p1) = i;
        },
        move || lock(&c2).resume(*lock(&p2)),
    );
    catalogue.kill_restart(
        "kill -9 a member, restart on its data",
        "members",
        Duration::from_secs(7),
        Duration::from_secs(2),
        move || {
            let mut cluster = lock(&c3);
            // The leader every other time: a leader change under load.
            let n = t2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let i = if n % 2 == 0 {
                cluster.leader().unwrap_or(n % 3)
            } else {
                n % 3
            };
            cluster.kill(i);
            *lock(&k1) = i;
        },
        move || {
            let i = *lock(&k2);
            lock(&c4).start_again(i);
            format!("member {i}")
        },
    );
    let c5 = cluster.clone();
    let t3 = std::sync::atomic::AtomicUsize::new(seed as usize);
    // At least the election timeout (1 s) and some, so etcd sees the member cut off.
    catalogue.add(
        "partition a member from the others",
        "members",
        Duration::from_secs(4),
        Duration::from_millis(1500),
        Duration::from_secs(4),
        Duration::from_millis(500),
        move |d, _| {
            // One member at a time, each in turn (the leader among them, sometimes).
            let i = t3.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3;
            let led = lock(&c5).leader() == Some(i);
            lock(&c5).partition(i);
            std::thread::sleep(d);
            let cut_off = lock(&c5).is_cut_off(i);
            lock(&c5).heal();
            format!("member {i} (leader: {led}; etcd saw it cut off: {cut_off})")
        },
    );
    let c6 = cluster.clone();
    // An operator's (or the auto-compactor's) compaction drops the history a waiter's watch resumes
    // from: the watch must say so and the waiter look again, never miss a release or hang.
    catalogue.add(
        "compact the history",
        "history",
        Duration::from_secs(2),
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        move |_, _| compact_now(&lock(&c6)),
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(proxies), Box::new(cluster)],
        session_ends: SessionEnds::default(),
        restarts: Restarts::default(),
    }
}

/// Compacts the cluster's history up to its current revision, through the first member that
/// answers (one may be stopped or cut off by another fault): what happened, for the run's log.
fn compact_now(cluster: &EtcdCluster) -> String {
    let revision_in = |body: &str| {
        let at = body.find("\"revision\":\"")? + "\"revision\":\"".len();
        let digits: String = body[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<u64>().ok()
    };
    for i in 0..cluster.members().len() {
        let Some(revision) = cluster
            .request(i, "/v3/kv/range", r#"{"key":"AA=="}"#)
            .ok()
            .and_then(|body| revision_in(&body))
        else {
            continue;
        };
        let body = format!(r#"{{"revision":"{revision}"}}"#);
        return match cluster.request(i, "/v3/kv/compaction", &body) {
            Ok(_) => format!("at revision {revision}, through member {i}"),
            Err(e) => format!("at revision {revision}, through member {i}: {e}"),
        };
    }
    "no member answered".to_owned()
}

/// How often every client session is ended: more often where that ends every lease (session-held
/// modes), whose holders are judged on what they believe after.
fn kill_every(table: bool) -> Duration {
    if table {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(1500)
    }
}

/// Runs `end`, which ends every client session, and records when into `ends` (for a backend whose
/// leases live in their sessions), with how long `proxies` held every chunk meanwhile.
fn ending_sessions(
    ends: &Option<SessionEnds>,
    proxies: &[Arc<FaultProxy>],
    end: impl FnOnce() -> String,
) -> String {
    let before = held_by(proxies);
    let invoke = Instant::now();
    let what = end();
    let complete = Instant::now();
    let held = before.max(held_by(proxies));
    if let Some(ends) = ends {
        lock(ends).push((invoke, complete, held));
    }
    what
}

/// How long `proxies` hold every chunk now (a latency fault), 0 when they forward at once. A
/// session's goodbye that a proxy reads meanwhile reaches its holder that much later, while another
/// client's traffic after the fault heals is not held: the goodbye's travel time that the guarantee
/// leaves out. The other faults hold nothing back: a black hole or dropped replies forward the
/// close at once, a slow drip the goodbye's first byte. Read before and after the kill, which is
/// far shorter than any fault.
fn held_by(proxies: &[Arc<FaultProxy>]) -> Duration {
    proxies
        .iter()
        .map(|p| match p.fault() {
            Fault::Latency(d) => d,
            _ => Duration::ZERO,
        })
        .max()
        .unwrap_or_default()
}

/// Ends every session of the workers' account but the admin's own (`KILL CONNECTION`).
fn kill_mariadb_sessions(admin_url: &str) -> String {
    use mysql::prelude::Queryable;
    let Ok(opts) = mysql::Opts::from_url(admin_url) else {
        return "bad admin URL".into();
    };
    let Ok(mut c) = mysql::Conn::new(opts) else {
        return "admin connection failed".into();
    };
    let ids: Vec<u64> = c
        .query(
            "SELECT ID FROM information_schema.PROCESSLIST \
             WHERE USER = CURRENT_USER() OR USER = SUBSTRING_INDEX(USER(), '@', 1)",
        )
        .unwrap_or_default();
    let me: u64 = c
        .query_first("SELECT CONNECTION_ID()")
        .ok()
        .flatten()
        .unwrap_or(0);
    let mut n = 0;
    for id in ids.into_iter().filter(|&i| i != me) {
        if c.query_drop(format!("KILL CONNECTION {id}")).is_ok() {
            n += 1;
        }
    }
    format!("{n} sessions")
}

/// MariaDB, named or table: proxy faults (named: no resets, which end the session that holds the
/// lock, as documented); the server stopped; kill -9 and restart with its data after [`DOWN`]
/// (named locks die with the sessions; rows survive); every worker session killed (`KILL
/// CONNECTION`), which costs a table lease nothing and ends every named lease, whose holders must
/// see it before another client is granted the key (the checker judges what they believed after).
/// Named mode offers no shared locks and no restore. Table mode also: handoffs by token.
pub fn mysql(mode: &str, seed: u64, duration: Duration) -> Setup {
    let server = shared(MariaDbServer::start());
    let admin = lock(&server).url();
    let (url, proxies) = torture::proxied(&lock(&server).url_with(&format!("lock={mode}")));
    let mut plan = Plan::new(&url, duration, seed);
    let table = mode == "table";
    if table {
        plan.writer_mark = mysql_writer_mark(&plan);
    } else {
        plan.shared = false;
        plan.swaps = false;
        plan.handoff_chance = 0.0;
        plan.work_share = 1;
    }
    let mut catalogue = Catalogue::new();
    catalogue.proxy_faults(&proxies, plan.io_timeout, table);
    database_faults(
        &mut catalogue,
        &server,
        ("SIGSTOP mariadb", "kill -9 mariadb, restart with data"),
        Duration::from_secs(9),
    );
    let session_ends = SessionEnds::default();
    let ends = (!table).then(|| session_ends.clone());
    let relays = proxies.clone();
    catalogue.add(
        "KILL CONNECTION of every worker session",
        "server",
        kill_every(table),
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        move |_, _| ending_sessions(&ends, &relays, || kill_mariadb_sessions(&admin)),
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(proxies), Box::new(server)],
        session_ends,
        restarts: Restarts::default(),
    }
}

/// How long MySQL/MariaDB table mode's waiting writer may keep new readers back past the end of its
/// wait (its row's `writer_until` mark): the mark ends with the wait as the writer computed it, and
/// reaches the server up to one attempt's trip later (at most the I/O timeout). Readers refused
/// meanwhile have no holder, a cost the README states.
fn mysql_writer_mark(plan: &Plan) -> Duration {
    plan.io_timeout
}

/// A database server the test kit runs: it can be stopped and woken, killed and started again on
/// its data.
trait DatabaseServer: Send + 'static {
    fn pause(&self);
    fn resume(&self);
    fn kill(&mut self);
    fn start_again(&mut self);
}

impl DatabaseServer for PostgresServer {
    fn pause(&self) {
        PostgresServer::pause(self)
    }
    fn resume(&self) {
        PostgresServer::resume(self)
    }
    fn kill(&mut self) {
        PostgresServer::kill(self)
    }
    fn start_again(&mut self) {
        PostgresServer::start_again(self)
    }
}

impl DatabaseServer for MariaDbServer {
    fn pause(&self) {
        MariaDbServer::pause(self)
    }
    fn resume(&self) {
        MariaDbServer::resume(self)
    }
    fn kill(&mut self) {
        MariaDbServer::kill(self)
    }
    fn start_again(&mut self) {
        MariaDbServer::start_again(self)
    }
}

/// The server faults both SQL backends get: SIGSTOP every 5 s, and a crash with a restart on the
/// same data every `kill_every`.
fn database_faults<S: DatabaseServer>(
    catalogue: &mut Catalogue,
    server: &Arc<Mutex<S>>,
    (pause_name, kill_name): (&str, &str),
    kill_every: Duration,
) {
    let (s1, s2, s3, s4) = (
        server.clone(),
        server.clone(),
        server.clone(),
        server.clone(),
    );
    catalogue.pause(
        pause_name,
        "server",
        Duration::from_secs(5),
        PAUSE,
        move || lock(&s1).pause(),
        move || lock(&s2).resume(),
    );
    catalogue.kill_restart(
        kill_name,
        "server",
        kill_every,
        DOWN,
        move || lock(&s3).kill(),
        move || {
            lock(&s4).start_again();
            String::new()
        },
    );
}

/// The TTLs workers ask for in the durability scenarios: far longer than a crashed server takes
/// to answer again with its data (Redis loading its AOF: tens of milliseconds; PostgreSQL's and
/// MariaDB's crash recovery: about a second on this machine), so that leases granted before a
/// crash are still held, and relied on, when it is back. Had the server lost them, another client
/// would be granted a held key: the checker's overlaps.
const DURABLE_TTLS: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1500)..=Duration::from_millis(5000);

/// The workers of a durability scenario: TTLs of [`DURABLE_TTLS`], holders at work for up to half
/// of what is left of their lease (so that many are at work when the server crashes), and fewer
/// pauses past the TTL (which now last seconds).
fn durable_plan(url: &str, duration: Duration, seed: u64) -> Plan {
    let mut plan = Plan::new(url, duration, seed);
    plan.ttls = DURABLE_TTLS;
    plan.work_share = 2;
    plan.pause_chance = 0.05;
    plan
}

/// The one fault of a durability scenario: the server crashed (`crash`) and started again at once
/// on its data (`start`, which returns once it answers and says what it did), recorded in
/// `restarts`. It is down for the restart's time only, far less than a TTL, so nothing but the
/// data it kept can keep a lease held across it. No proxy and no other fault: an overlap in such a
/// run is the crash's.
fn crash_restart_with_data(
    catalogue: &mut Catalogue,
    name: &str,
    every: Duration,
    restarts: &Restarts,
    crash: impl Fn() + Send + Sync + 'static,
    start: impl Fn() -> String + Send + Sync + 'static,
) {
    let restarts = restarts.clone();
    catalogue.add(
        name,
        "server",
        every,
        Duration::ZERO,
        Duration::ZERO,
        Duration::from_millis(500),
        move |_, _| {
            let crashed = Instant::now();
            crash();
            let what = start();
            let back = Instant::now();
            lock(&restarts).push((crashed, back));
            format!("back after {:?}{what}", back - crashed)
        },
    );
}

/// Redis as an operator who relies on its persistence runs it: AOF on, `appendfsync everysec`
/// from the start, then `always` and `everysec` in turn after each restart (`CONFIG SET`, so the
/// period before each crash runs under one of them). The server killed (kill -9) and restarted at
/// once on its AOF: leases and fences survive (README, "restart with persistence"), so the checker
/// must find nothing. With `--appendonly no` the same run finds overlaps.
pub fn redis_aof(seed: u64, duration: Duration) -> Setup {
    let server = shared(RedisServer::start_with_aof("everysec"));
    let plan = durable_plan(&lock(&server).url(), duration, seed);
    let mut catalogue = Catalogue::new();
    let restarts = Restarts::default();
    let (s1, s2) = (server.clone(), server.clone());
    let crashes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let policy = |n: usize| ["everysec", "always"][n % 2];
    crash_restart_with_data(
        &mut catalogue,
        "kill -9 redis, restart at once on its AOF",
        Duration::from_secs(3),
        &restarts,
        move || lock(&s1).kill(),
        move || {
            let n = crashes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let s = &mut *lock(&s2);
            s.restart();
            let next = policy(n + 1);
            let set = s.command(&[b"CONFIG", b"SET", b"appendfsync", next.as_bytes()]);
            let keys = s.command(&[b"DBSIZE"]);
            format!(
                " (crashed under appendfsync {}; {} keys; now {next}: {})",
                policy(n),
                keys.trim().trim_start_matches(':'),
                set.trim()
            )
        },
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(server)],
        session_ends: SessionEnds::default(),
        restarts,
    }
}

/// PostgreSQL table mode on a server set to `synchronous_commit = off` (an operator trading
/// durability for speed), with `wal_writer_delay = 10s` (the longest: what asynchronous commits
/// leave in the server's memory waits that long to be written), crashed (immediate shutdown: what
/// the server had not written of its WAL is lost) and started again at once on its data. Every
/// statement of table mode commits with `SET LOCAL synchronous_commit = on`, so leases and fences
/// survive (README, "restart with persistence"): the checker must find nothing; with that taken
/// out, it finds overlaps. `fsync` stays off (the testkit's default): it decides what a crash of
/// the host loses, which this test cannot do; a crash of the server loses what was not yet
/// written, which `synchronous_commit` decides.
pub fn postgres_durable(seed: u64, duration: Duration) -> Setup {
    let server =
        PostgresServer::start_with_settings(&["synchronous_commit=off", "wal_writer_delay=10s"]);
    let url = server.url_with("lock=table");
    sql_durable(
        server,
        durable_plan(&url, duration, seed),
        "crash postgres (immediate shutdown), restart at once on its data",
    )
}

/// MariaDB table mode with `innodb_flush_log_at_trx_commit=2` (the log written to the OS at every
/// commit, synced once a second), killed (kill -9) and started again at once on its data: leases
/// and fences survive (README's MySQL/MariaDB table, "restart with persistence"), so the checker
/// must find nothing. (MariaDB 10.11 kept every committed row through kill -9 even with `0`, so
/// this run cannot be broken by the setting there.)
pub fn mysql_durable(seed: u64, duration: Duration) -> Setup {
    let server = MariaDbServer::start_with_options(&["--innodb-flush-log-at-trx-commit=2"]);
    let mut plan = durable_plan(&server.url_with("lock=table"), duration, seed);
    plan.writer_mark = mysql_writer_mark(&plan);
    sql_durable(server, plan, "kill -9 mariadb, restart at once on its data")
}

/// An SQL server's durability run: its one fault, `name`, crashes it every 4 s and starts it
/// again at once on its data (see [`crash_restart_with_data`]).
fn sql_durable<S: DatabaseServer>(server: S, plan: Plan, name: &str) -> Setup {
    let server = shared(server);
    let mut catalogue = Catalogue::new();
    let restarts = Restarts::default();
    let (s1, s2) = (server.clone(), server.clone());
    crash_restart_with_data(
        &mut catalogue,
        name,
        Duration::from_secs(4),
        &restarts,
        move || lock(&s1).kill(),
        move || {
            lock(&s2).start_again();
            String::new()
        },
    );
    Setup {
        plan,
        catalogue,
        keep: vec![Box::new(server)],
        session_ends: SessionEnds::default(),
        restarts,
    }
}

/// The end of a run without faults: the last leases are judged on a healed system.
const TAIL: Duration = Duration::from_secs(2);

/// Draws the schedule from the seed, runs the workers and the faults for the plan's duration, and
/// checks what the workers did.
pub fn run(name: &str, setup: Setup, seed: u64) -> leasehold_testkit::Report {
    let Setup {
        plan,
        catalogue,
        keep,
        session_ends,
        restarts,
    } = setup;
    let schedule = Schedule::draw(&catalogue, seed, plan.duration, TAIL);
    eprintln!("{name}: seed={seed}: {schedule}");
    let run = torture::start(&plan);
    let generator = Generator::start(&catalogue, &schedule);
    std::thread::sleep(plan.duration);
    let log = generator.finish();
    eprintln!("{name}: {} faults applied:", log.len());
    for line in &log {
        eprintln!("  {line}");
    }
    for &(invoke, complete, held) in lock(&session_ends).iter() {
        run.history.sessions_ended(invoke, complete, held);
    }
    for &(crashed, back) in lock(&restarts).iter() {
        run.history.server_restarted(crashed, back);
    }
    let report = run.finish(Duration::from_secs(3));
    drop(keep);
    report
}
