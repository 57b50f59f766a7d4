//! Torture (issue 12): on every backend, 8 workers acquire short leases on 4 keys, write to a fenced
//! store, sometimes pause past their TTL, and release, while fault proxies and server hooks get in the
//! way; the checker must then report no overlap among unexpired leases, no fence out of order, no
//! stale write accepted, no call past its bound and no stranded lease.
//!
//! Each backend runs `LEASEHOLD_TORTURE_SECS` (16 by default) with a random schedule whose seed is
//! printed (`seed=…`); `TORTURE_SEED=…` replays it. The scenarios run one at a time: they measure
//! bounds, and two of them at once on 2 cores would measure each other. A watchdog fails a scenario
//! that hangs instead of letting it block the test command.
//!
//! Faults per backend (the server hooks repeat every few seconds, so a long run — a soak,
//! `LEASEHOLD_TORTURE_SECS=600 cargo test --release --test torture -- --nocapture` — gets many):
//! - local: the directory's fence mark and every record file not in use deleted every 2 s (a tmp
//!   cleaner) while workers keep opening new clients (as PHP processes do); holders paused past their
//!   TTL.
//! - redis: every proxy fault; every 6 s a SIGKILL and a restart without persistence. The server stays
//!   down longer than the longest TTL, so no lease that was valid before the crash can be valid after
//!   it: exclusion across a data loss is not promised, fence order is.
//! - redlock (5 nodes): every proxy fault (on a minority, sometimes on all); every 8 s a minority
//!   SIGSTOPped for 1 s, then a minority killed and restarted empty after the longest TTL (Redlock's
//!   delayed restart).
//! - postgres advisory / table: every proxy fault (advisory: but resets, which end the session that
//!   is the lock); every 6 s the server SIGSTOPped for 1.5 s.
//! - mysql named / table (MariaDB): every proxy fault (named: but resets, which end the session
//!   that holds the lock); every 6 s the server SIGSTOPped for 1.5 s.
//! - redis cluster (3 masters, 3 replicas): every 6 s the master of a torture key SIGSTOPped for
//!   1 s, then 3 s later the master of a torture key killed, its replica promoted, and the killed
//!   node restarted empty (it rejoins as its successor's replica). No proxies: `CLUSTER SLOTS`
//!   announces the nodes' real ports, so clients would go around them.
//! - redis sentinel (a master, 2 replicas, 3 Sentinels; `replicas=1`): every 8 s (from 4 s) the
//!   master killed, the Sentinels fail over, and the old master restarted empty (the Sentinels
//!   make it a replica). No proxies, for the same reason.
//!
//! What is asserted across a failover: everything, overlaps included, although the README does not
//! promise exclusion across a failover without `replicas`. Here it holds for a reason of the
//! scenario's own, which is why the scenario can check it: a failover takes at least the
//! `cluster-node-timeout` or the Sentinels' `down-after-milliseconds` (1 to 2 s) after the kill,
//! longer than any lease the workers hold (TTLs up to 200 ms, an extend renews up to 200 ms), so
//! every lease the lost master knew of has expired before the promoted replica grants anything.
//! The pause (1 s) is shorter than the node timeout (2 s), so it never starts a failover: a
//! master that wakes up demoted while clients still send it writes is the one case where
//! exclusion would really break, and the README's `replicas` advice is about it. Sentinel runs
//! with `replicas=1`, the configuration the README recommends there, so its acquires also pay and
//! are checked for the `WAIT`.

#[path = "support/torture.rs"]
mod torture;

use leasehold_testkit::history::seed;
use leasehold_testkit::{
    wait_until, FaultCycler, FaultProxy, MariaDbServer, PostgresServer, RedisCluster,
    RedisSentinel, RedisServer, Report, TempDir,
};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use torture::Plan;

/// The longest TTL the workers ask for, plus margin: how long a crashed server stays down.
const DOWN: Duration = Duration::from_millis(300);
/// How long the PostgreSQL (and MariaDB) server is stopped each time.
const PG_PAUSE: Duration = Duration::from_millis(1500);
/// How long a minority of Redlock nodes is stopped each time.
const REDLOCK_PAUSE: Duration = Duration::from_secs(1);
/// `cluster-node-timeout` of the Cluster scenario: longer than its pause, so a pause never starts a
/// failover (see the module docs), and far longer than any TTL.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 2000;
/// How long a Cluster master is stopped each time.
const CLUSTER_PAUSE: Duration = Duration::from_secs(1);
/// `down-after-milliseconds` of the Sentinel scenario: far longer than any TTL.
const SENTINEL_DOWN_AFTER_MS: u64 = 1000;
/// `replicas_timeout_ms` of the Sentinel scenario.
const SENTINEL_REPLICAS_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a killed master is given to be replaced before it is restarted anyway (empty, which
/// the scenario also survives: it stayed down longer than any TTL).
const FAILOVER_LIMIT: Duration = Duration::from_secs(10);
/// How long one proxy fault lasts at most (and the heal between two).
const MAX_FAULT: Duration = Duration::from_millis(400);

fn secs() -> Duration {
    let s = std::env::var("LEASEHOLD_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    Duration::from_secs(s)
}

/// The moments `period`, 2 × `period`, … before the run's last two seconds, as offsets from its start.
fn every(period: Duration) -> impl Iterator<Item = Duration> {
    let last = secs().saturating_sub(Duration::from_secs(2));
    (1..)
        .map(move |k| period * k)
        .take_while(move |at| *at < last)
}

fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `scenario` on its own thread and fails if it has not finished after its run plus `extra`.
fn with_watchdog(
    name: &str,
    seed: u64,
    extra: Duration,
    scenario: impl FnOnce() -> Report + Send + 'static,
) -> Report {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(scenario());
    });
    let cap = secs() + extra;
    match rx.recv_timeout(cap) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{name}: the scenario hung past {cap:?} (seed={seed})")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{name}: the scenario panicked (seed={seed}); see above")
        }
    }
}

fn assert_clean(name: &str, seed: u64, r: &Report) {
    eprintln!("{}", torture::summary(name, seed, r));
    let replay = format!("(replay: TORTURE_SEED={seed})");
    assert!(r.acquired > 0, "{name}: nothing was ever acquired {replay}");
    assert_eq!(
        r.overlaps.count, 0,
        "{name}: (a) overlapping leases {replay}\n{r}"
    );
    assert_eq!(
        r.fence_order.count, 0,
        "{name}: (b) fence order {replay}\n{r}"
    );
    assert_eq!(
        r.stale_writes.count, 0,
        "{name}: (c) stale writes {replay}\n{r}"
    );
    assert_eq!(
        r.bound_overruns.count, 0,
        "{name}: (d) bounds {replay}\n{r}"
    );
    assert_eq!(r.stranded.count, 0, "{name}: (e) stranded {replay}\n{r}");
}

/// Sleeps until `at` after `start`.
fn sleep_until(start: Instant, at: Duration) {
    let now = start.elapsed();
    if at > now {
        std::thread::sleep(at - now);
    }
}

fn faults(proxies: &[Arc<FaultProxy>], seed: u64) -> FaultCycler {
    FaultCycler::start(proxies.to_vec(), seed, MAX_FAULT)
}

/// Stops the faults, then the workers, and checks.
fn finish(run: torture::Run, cycler: Option<FaultCycler>, name: &str) -> Report {
    if let Some(c) = cycler {
        let log = c.finish();
        eprintln!(
            "{name}: {} proxy faults, first: {:?}",
            log.len(),
            log.first()
        );
    }
    run.finish(Duration::from_secs(3))
}

#[test]
fn torture_local() {
    let _one = serial();
    let seed = seed("torture_local");
    let r = with_watchdog("local", seed, Duration::from_secs(30), move || {
        let dir = TempDir::new("torture-local");
        let mut plan = Plan::new(&dir.file_url(), secs(), seed);
        plan.reconnect_every = Some(10);
        let start = Instant::now();
        let run = torture::start(&plan);
        let mut deleted = 0;
        for at in every(Duration::from_secs(2)) {
            sleep_until(start, at);
            // What a tmp cleaner does to a directory nobody listed as precious: it deletes files
            // not modified for a while (here: not within the last 300 ms, longer than any TTL), so
            // never the record of a held key.
            for entry in std::fs::read_dir(dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let idle = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_millis(300));
                let mark = entry.file_name() == ".leasehold-fences";
                if (idle || mark) && std::fs::remove_file(entry.path()).is_ok() {
                    deleted += 1;
                }
            }
        }
        eprintln!("local: {deleted} bookkeeping files deleted");
        finish(run, None, "local")
    });
    assert_clean("local", seed, &r);
}

#[test]
fn torture_redis() {
    let _one = serial();
    let seed = seed("torture_redis");
    let r = with_watchdog("redis", seed, Duration::from_secs(30), move || {
        let mut server = RedisServer::start();
        let (url, proxies) = torture::proxied(&server.url());
        let plan = Plan::new(&url, secs(), seed);
        let start = Instant::now();
        let run = torture::start(&plan);
        let cycler = faults(&proxies, seed);
        let mut restarts = 0;
        for at in every(Duration::from_secs(6)) {
            sleep_until(start, at);
            server.kill();
            std::thread::sleep(DOWN);
            // Started empty: it keeps nothing on disk (the fences must still go up).
            server.restart();
            restarts += 1;
        }
        eprintln!("redis: {restarts} restarts without persistence");
        sleep_until(start, secs());
        finish(run, Some(cycler), "redis")
    });
    assert_clean("redis", seed, &r);
}

#[test]
fn torture_redlock() {
    let _one = serial();
    let seed = seed("torture_redlock");
    let r = with_watchdog("redlock", seed, Duration::from_secs(30), move || {
        let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
        let hosts: Vec<String> = servers.iter().map(RedisServer::addr).collect();
        let (url, proxies) = torture::proxied(&format!("redlock://{}", hosts.join(",")));
        let mut plan = Plan::new(&url, secs(), seed);
        // Requests sent to a paused node run when it wakes, their TTL starting then.
        plan.stranded_slack += REDLOCK_PAUSE;
        let start = Instant::now();
        let run = torture::start(&plan);
        let cycler = faults(&proxies, seed);
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut minority = || {
            let mut all: Vec<usize> = (0..5).collect();
            rng.shuffle(&mut all);
            all.truncate(2);
            all
        };
        for at in every(Duration::from_secs(8)) {
            sleep_until(start, at - Duration::from_millis(3500));
            let paused = minority();
            for &i in &paused {
                servers[i].pause();
            }
            std::thread::sleep(REDLOCK_PAUSE);
            for &i in &paused {
                servers[i].resume();
            }
            sleep_until(start, at);
            let killed = minority();
            for &i in &killed {
                servers[i].kill();
            }
            std::thread::sleep(DOWN);
            for &i in &killed {
                servers[i].restart();
            }
            eprintln!("redlock: paused {paused:?}, killed and restarted {killed:?}");
        }
        sleep_until(start, secs());
        finish(run, Some(cycler), "redlock")
    });
    assert_clean("redlock", seed, &r);
}

/// The postmaster and its backends, found through /proc (the testkit's PostgresServer keeps its
/// child private): SIGSTOP of them all is a hung server host.
fn postgres_pids(port: u16) -> Vec<i32> {
    let mut procs: Vec<(i32, i32, String)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        procs.push((pid, ppid, cmd));
    }
    let needle = format!("-p {port} ");
    let Some(&(master, _, _)) = procs
        .iter()
        .find(|(_, _, c)| c.contains("postgres") && c.contains(&needle))
    else {
        return Vec::new();
    };
    let mut pids = vec![master];
    pids.extend(procs.iter().filter(|p| p.1 == master).map(|p| p.0));
    pids
}

fn signal_all(pids: &[i32], sig: i32) {
    for &p in pids {
        // SAFETY: kill(2) on the test's own PostgreSQL processes.
        unsafe {
            libc::kill(p, sig);
        }
    }
}

fn torture_postgres(mode: &'static str) {
    let _one = serial();
    let name = format!("postgres {mode}");
    let seed = seed(&format!("torture_postgres_{mode}"));
    let n = name.clone();
    let r = with_watchdog(&name, seed, Duration::from_secs(40), move || {
        let server = PostgresServer::start();
        let (url, proxies) = torture::proxied(&server.url_with(&format!("lock={mode}")));
        let mut plan = Plan::new(&url, secs(), seed);
        // A statement sent while the server is stopped runs when it wakes: the lease it takes
        // starts only then.
        plan.stranded_slack = PG_PAUSE + plan.stranded_slack;
        let start = Instant::now();
        let run = torture::start(&plan);
        // An advisory lock lives in its session: a reset connection frees it at once and its holder
        // learns so only at its next call (documented); resets are for the table mode only.
        let cycler = FaultCycler::start_with(proxies.clone(), seed, MAX_FAULT, mode != "advisory");
        for at in every(Duration::from_secs(6)) {
            sleep_until(start, at);
            let pids = postgres_pids(server.port());
            assert!(!pids.is_empty(), "no PostgreSQL processes found to pause");
            signal_all(&pids, libc::SIGSTOP);
            std::thread::sleep(PG_PAUSE);
            signal_all(&pids, libc::SIGCONT);
        }
        sleep_until(start, secs());
        let r = finish(run, Some(cycler), &n);
        drop(proxies);
        r
    });
    assert_clean(&name, seed, &r);
}

#[test]
fn torture_postgres_advisory() {
    torture_postgres("advisory");
}

#[test]
fn torture_postgres_table() {
    torture_postgres("table");
}

fn torture_mysql(mode: &'static str) {
    let _one = serial();
    let name = format!("mysql {mode}");
    let seed = seed(&format!("torture_mysql_{mode}"));
    let n = name.clone();
    let r = with_watchdog(&name, seed, Duration::from_secs(40), move || {
        let server = MariaDbServer::start();
        let (url, proxies) = torture::proxied(&server.url_with(&format!("lock={mode}")));
        let mut plan = Plan::new(&url, secs(), seed);
        // A statement sent while the server is stopped runs when it wakes: the lease it takes
        // starts only then.
        plan.stranded_slack = PG_PAUSE + plan.stranded_slack;
        let start = Instant::now();
        let run = torture::start(&plan);
        // A named lock lives in its session: a reset connection frees it at once and its holder
        // learns so only at its next call (documented); resets are for the table mode only.
        let cycler = FaultCycler::start_with(proxies.clone(), seed, MAX_FAULT, mode != "named");
        for at in every(Duration::from_secs(6)) {
            sleep_until(start, at);
            server.pause();
            std::thread::sleep(PG_PAUSE);
            server.resume();
        }
        sleep_until(start, secs());
        let r = finish(run, Some(cycler), &n);
        drop(proxies);
        r
    });
    assert_clean(&name, seed, &r);
}

#[test]
fn torture_mysql_named() {
    torture_mysql("named");
}

#[test]
fn torture_mysql_table() {
    torture_mysql("table");
}

/// The Cluster master serving the torture key `k` (see tests/support/torture.rs's key names).
fn torture_master(cluster: &RedisCluster, k: usize) -> Option<u16> {
    let key = leasehold::Key::new(format!("torture:{k}")).expect("a key");
    let slot = leasehold_redis::keys::RedisKeys::new("leasehold:", &key).slot();
    cluster.master_of(slot)
}

#[test]
fn torture_redis_cluster() {
    let _one = serial();
    let seed = seed("torture_redis_cluster");
    let r = with_watchdog("redis cluster", seed, Duration::from_secs(60), move || {
        let mut cluster = RedisCluster::start(3, CLUSTER_NODE_TIMEOUT_MS);
        let mut plan = Plan::new(&cluster.url(), secs(), seed);
        // Requests sent to the paused master run when it wakes, their TTL starting then.
        plan.stranded_slack = CLUSTER_PAUSE + Duration::from_millis(500);
        let keys = plan.keys;
        let start = Instant::now();
        let run = torture::start(&plan);
        let mut rng = fastrand::Rng::with_seed(seed);
        let (mut pauses, mut failovers) = (0, Vec::new());
        for at in every(Duration::from_secs(6)) {
            sleep_until(start, at - Duration::from_secs(3));
            if let Some(port) = torture_master(&cluster, rng.usize(..keys)) {
                cluster.node(port).pause();
                std::thread::sleep(CLUSTER_PAUSE);
                cluster.node(port).resume();
                pauses += 1;
            }
            sleep_until(start, at);
            // A master with a synced replica (the one killed last time may still be syncing its
            // successor's data; killing that one would leave its slots without a master).
            let mut candidates: Vec<usize> = (0..keys).collect();
            rng.shuffle(&mut candidates);
            let victim = candidates.into_iter().find_map(|k| {
                let port = torture_master(&cluster, k)?;
                let synced = cluster
                    .node(port)
                    .command(&[b"INFO", b"replication"])
                    .contains("state=online");
                synced.then_some((k, port))
            });
            let Some((k, port)) = victim else {
                eprintln!("redis cluster: no master with a synced replica at {at:?}, no kill");
                continue;
            };
            cluster.node_mut(port).kill();
            let killed = Instant::now();
            let replaced = wait_until(FAILOVER_LIMIT, || {
                torture_master(&cluster, k).is_some_and(|p| p != port)
            });
            let took = killed.elapsed();
            // nodes.conf survives the restart: the node rejoins, learns it was replaced, and
            // becomes its successor's replica (Redis keeps a rebooted master unwritable for 2 s
            // meanwhile, so it never takes writes as a stale master).
            cluster.node_mut(port).restart();
            failovers.push((port, replaced.then_some(took)));
        }
        eprintln!("redis cluster: {pauses} pauses; kills (port, failover took): {failovers:?}");
        sleep_until(start, secs());
        finish(run, None, "redis cluster")
    });
    assert_clean("redis cluster", seed, &r);
}

#[test]
fn torture_redis_sentinel() {
    let _one = serial();
    let seed = seed("torture_redis_sentinel");
    let r = with_watchdog("redis sentinel", seed, Duration::from_secs(60), move || {
        let mut group = RedisSentinel::start(2, 3, SENTINEL_DOWN_AFTER_MS);
        let url = group.url_with(&format!(
            "replicas=1&replicas_timeout_ms={}",
            SENTINEL_REPLICAS_TIMEOUT.as_millis()
        ));
        let mut plan = Plan::new(&url, secs(), seed);
        plan.write_allowance = SENTINEL_REPLICAS_TIMEOUT;
        let start = Instant::now();
        let run = torture::start(&plan);
        let mut failovers = Vec::new();
        // Every 8 s from 4 s on, so a 16 s run gets two failovers.
        let (period, last) = (
            Duration::from_secs(8),
            secs().saturating_sub(Duration::from_secs(2)),
        );
        let moments = (0..)
            .map(move |k| period / 2 + period * k)
            .take_while(move |at| *at < last);
        for at in moments {
            sleep_until(start, at);
            let Some(master) = group.master_port() else {
                eprintln!("redis sentinel: no master known at {at:?}, no kill");
                continue;
            };
            group.server_mut(master).kill();
            let killed = Instant::now();
            let replaced = wait_until(FAILOVER_LIMIT, || {
                group.master_port().is_some_and(|p| p != master)
            });
            let took = killed.elapsed();
            // Empty, and a master by its own configuration: the Sentinels turn it into a replica
            // of the new master (clients go only where the Sentinels point and ROLE confirms).
            group.server_mut(master).restart();
            failovers.push((master, replaced.then_some(took)));
        }
        eprintln!("redis sentinel: kills (port, failover took): {failovers:?}");
        sleep_until(start, secs());
        finish(run, None, "redis sentinel")
    });
    assert_clean("redis sentinel", seed, &r);
}
