//! A rolling upgrade from 0.3.0: while a deployment rolls, 0.3 clients (the 0.3.0 release's CLI, built
//! from its commit: tests/support/old_release.rs) and this version's library hold the same keys on the
//! same backend. On every backend 0.3.0 had, they must exclude each other both ways, fences must keep
//! rising across the versions, and a table 0.3 created must work for both once this version has
//! connected to it (tables migrate in place while 0.3 clients still use them).
//!
//! Per backend: 0.3 holds → 0.4 is refused, then gets the key once 0.3 released it; 0.4 holds → 0.3
//! is refused (and 0.3's `status` shows 0.4's holder); ten alternations with rising fences; then 0.3
//! `run` processes and 0.4 threads contend for one key, each holder marking the critical section (a
//! directory only one can create) and logging its fence, and the log must show no overlap and
//! strictly rising fences. Then shared leases (readers of both versions share a key, a writer of
//! either excludes the other's readers), a semaphore's permits (counted across the versions), and
//! `once` records (what one version ran or started, the other does not run again). Then what this
//! version's `leasehold doctor` says of the other (see [`doctor_sees`]). Last, the key's
//! stored fence raised far past the clock before each version draws the next, so that each must read
//! what the other stored, not merely rise with the clock (except 0.3 after a 0.4 release on Redis,
//! which draws from the clock: see [`Stored`]), where the test can find the stored fence (Redis one
//! server, Cluster and Sentinel, PostgreSQL and MySQL; not the local files' binary records nor
//! Redlock's per-node fences). It comes last because a raised fence stays ahead of the clock.
//!
//! The raise adds 10^12 µs to a PostgreSQL fence sequence (advisory mode's `leasehold_fence`) for
//! good: harmless, fences only rise, but note it on a server named by LEASEHOLD_TEST_POSTGRES_URL.
//!
//! Run time: 10–20 s on 2 cores (12–23 s in 30 runs beside two busy loops), once 0.3.0 is built
//! (about 3 minutes, the first time).
//!
//! Each backend starts with a 0.3 client (which creates 0.3's tables), and only then is this version
//! connected, as in a real rollout. Redis runs as one server and as Redlock, Cluster and Sentinel.
//! etcd is new in 0.4 and has no 0.3 clients.

#[path = "support/old_release.rs"]
mod old_release;

use leasehold::ErrorKind;
use leasehold_testkit::{
    unique_key, MariaDbServer, PostgresServer, RedisCluster, RedisSentinel, RedisServer, TempDir,
};
use old_release::{OldCli, HELD_ELSEWHERE};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);
/// How long contenders wait for the key: far longer than the whole contention run, so running out of
/// it means a waiter was never woken.
const WAIT: Duration = Duration::from_secs(60);
/// The backend offers shared (read) leases.
const SHARED: bool = true;
/// How far a stored fence is raised: 11.6 days of microseconds, far past any clock's reading, so a
/// fence above it was drawn from the stored one, not from the time.
const RAISE: u64 = 1_000_000_000_000;

/// Finds where the backend stores a key's last fence (by its value, `from`) and raises it to `to`;
/// returns how many places held it.
type Raise<'a> = &'a dyn Fn(u64, u64) -> usize;

/// Where the test can raise a key's stored fence, and whether 0.3 reads what this version stores
/// there once its lease is released: PostgreSQL and MySQL keep a key's fence in one place both
/// versions read; on Redis this version keeps a key's own fence only while a lease holds the key
/// (its fences come from a high-water per server that 0.3 does not know), so after a 0.4 release a
/// 0.3 client's next fence comes from the server's clock, as the CHANGELOG's upgrade note says.
struct Stored<'a> {
    raise: Raise<'a>,
    old_reads_new: bool,
}

#[test]
fn local_files() {
    let locks = TempDir::new("upgrade-locks");
    // The local backend keeps its fences in binary records: no raise here.
    rolling_upgrade("file", &locks.file_url(), SHARED, None);
}

#[test]
fn redis() {
    let server = RedisServer::start();
    let raise = |from, to| raise_in_redis(&[&server], from, to);
    rolling_upgrade(
        "redis",
        &server.url(),
        SHARED,
        Some(Stored {
            raise: &raise,
            old_reads_new: false,
        }),
    );
}

#[test]
fn redlock() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = servers.iter().map(RedisServer::addr).collect();
    let url = format!("redlock://{}", hosts.join(","));
    // Each node stores a fence of its own, not the one the quorum gave: no raise here.
    rolling_upgrade("redlock", &url, SHARED, None);
}

#[test]
fn redis_cluster() {
    // A node timeout well past any stall of a loaded machine: a failover is not what this tests.
    let cluster = RedisCluster::start(3, 30_000);
    let nodes: Vec<&RedisServer> = cluster.nodes().iter().collect();
    let raise = |from, to| raise_in_redis(&nodes, from, to);
    rolling_upgrade(
        "redis cluster",
        &cluster.url(),
        SHARED,
        Some(Stored {
            raise: &raise,
            old_reads_new: false,
        }),
    );
}

#[test]
fn redis_sentinel() {
    // Down-after well past any stall of a loaded machine: a failover is not what this tests.
    let group = RedisSentinel::start(1, 3, 30_000);
    let servers: Vec<&RedisServer> = group.servers().iter().collect();
    let raise = |from, to| raise_in_redis(&servers, from, to);
    rolling_upgrade(
        "redis sentinel",
        &group.url(),
        SHARED,
        Some(Stored {
            raise: &raise,
            old_reads_new: false,
        }),
    );
}

#[test]
fn postgres_advisory() {
    let url = PostgresServer::shared().url();
    let raise = |from, to| raise_in_postgres(&url, None, from, to);
    rolling_upgrade(
        "postgres advisory",
        &url,
        SHARED,
        Some(Stored {
            raise: &raise,
            old_reads_new: true,
        }),
    );
}

#[test]
fn postgres_table() {
    let url = PostgresServer::shared().url_with("lock=table&table=upgrade_locks");
    let raise = |from, to| raise_in_postgres(&url, Some("upgrade_locks"), from, to);
    rolling_upgrade(
        "postgres table",
        &url,
        SHARED,
        Some(Stored {
            raise: &raise,
            old_reads_new: true,
        }),
    );
}

#[test]
fn mysql_named() {
    // Named mode keeps its TTLs and fences in `<table>_fences`, which 0.3 creates here.
    let url = MariaDbServer::shared().url_with("table=upgrade_named");
    let raise = |from, to| raise_in_mysql(&url, from, to);
    // A named lock is exclusive: shared leases are refused there, by 0.3 and by this version.
    rolling_upgrade(
        "mysql named",
        &url,
        !SHARED,
        Some(Stored {
            raise: &raise,
            old_reads_new: true,
        }),
    );
}

#[test]
fn mysql_table() {
    let url = MariaDbServer::shared().url_with("lock=table&table=upgrade_locks");
    let raise = |from, to| raise_in_mysql(&url, from, to);
    rolling_upgrade(
        "mysql table",
        &url,
        SHARED,
        Some(Stored {
            raise: &raise,
            old_reads_new: true,
        }),
    );
}

fn rolling_upgrade(name: &str, url: &str, shared: bool, raise: Option<Stored<'_>>) {
    // The default 1 s budgets for a connect and a round trip are what production wants; here they
    // made one run in ten fail (calls of several backends out of time at once) while two busy loops
    // and other builds stalled the 2 cores. This test is about what each version sees, not speed.
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = &format!("{url}{sep}connect_timeout_ms=10000&io_timeout_ms=10000");
    let work = TempDir::new("upgrade-work");
    let old = OldCli::new(url);
    let key = unique_key("upgrade");
    let mut fences = Vec::new();

    // 0.3 holds (and, on a table backend, has just created 0.3's tables); this version connects to
    // them only now.
    let holder = old.hold(&key, work.path());
    fences.push(holder.fence);
    let new = leasehold::connect(url).unwrap_or_else(|e| panic!("{name}: 0.4 connects: {e}"));
    match new.try_acquire(&key, TTL) {
        Ok(lease) => panic!(
            "{name}: 0.4 took {key} (fence {}) while 0.3 held it (fence {})",
            lease.fence(),
            holder.fence
        ),
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotAcquired, "{name}: {e}"),
    }
    holder.finish();
    let lease = new
        .try_acquire(&key, TTL)
        .unwrap_or_else(|e| panic!("{name}: 0.4 after 0.3 released: {e}"));
    fences.push(lease.fence());

    // 0.4 holds: 0.3 is refused, without waiting.
    let ran = old.run_once(&key, Duration::ZERO);
    assert_eq!(
        ran.code(),
        Some(HELD_ELSEWHERE),
        "{name}: 0.3 beside 0.4's lease (fence {}): {ran:?}",
        lease.fence()
    );
    // An operator still on 0.3's CLI sees 0.4's holder, and its fence where the backend can tell.
    let status: serde_json::Value =
        serde_json::from_str(&old.status(&key)).expect("0.3's status prints JSON");
    assert_eq!(status["held"], true, "{name}: 0.3's status: {status}");
    assert!(
        status["fence"].is_null() || status["fence"] == lease.fence(),
        "{name}: 0.3's status beside 0.4's fence {}: {status}",
        lease.fence()
    );
    lease
        .release()
        .unwrap_or_else(|e| panic!("{name}: 0.4 releases: {e}"));

    // Turns, one version after the other.
    for _ in 0..10 {
        fences.push(old_fence(name, &old, &key));
        let lease = new
            .try_acquire(&key, TTL)
            .unwrap_or_else(|e| panic!("{name}: 0.4's turn: {e}"));
        fences.push(lease.fence());
        lease.release().expect("0.4 releases");
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "{name}: fences across 0.3 and 0.4 do not rise: {fences:?}"
    );

    contend(name, &old, &new, &key, work.path());
    if shared {
        shared_leases(name, &old, &new, work.path());
    }
    semaphores(name, &old, &new, work.path());
    once_records(name, &old, &new);
    doctor_sees(name, url, &old, &new);
    // Last: a raised fence stays ahead of the clock on the server for the rest of the run.
    if let Some(stored) = raise {
        stored_fences(name, &old, &new, &key, stored);
    }
    eprintln!("{name}: 0.3 and 0.4 exclude each other, fences {fences:?}");
}

/// Old `run` processes and new threads contend for `key`; every holder creates `mark` (a directory:
/// only one can create it, so a second holder at once finds it) and appends its fence to `log`
/// while it holds the key.
fn contend(name: &str, old: &OldCli, new: &leasehold::Client, key: &str, work: &Path) {
    const OLD_WORKERS: usize = 3;
    const OLD_TURNS: usize = 5;
    const NEW_WORKERS: usize = 2;
    const NEW_TURNS: usize = 10;
    let mark = work.join("holding");
    let log = work.join("log");
    fs::write(&log, "").expect("create the log");
    let script = "if ! mkdir \"$MARK\" 2>/dev/null; then echo overlap >> \"$LOG\"; fi; \
                  echo \"0.3 $LEASEHOLD_FENCE\" >> \"$LOG\"; sleep 0.01; rmdir \"$MARK\" 2>/dev/null; true";
    // Workers report failures instead of panicking, so that an overlap (which the other failures
    // follow from) is what the test says first.
    let failures: Vec<String> = std::thread::scope(|s| {
        let mut workers = Vec::new();
        for _ in 0..OLD_WORKERS {
            workers.push(s.spawn(|| -> Result<(), String> {
                for _ in 0..OLD_TURNS {
                    let ran = old.run_script(key, WAIT, script, &[("MARK", &mark), ("LOG", &log)]);
                    if ran.code() != Some(0) {
                        return Err(format!("a contending 0.3 run: {ran:?}"));
                    }
                }
                Ok(())
            }));
        }
        for _ in 0..NEW_WORKERS {
            workers.push(s.spawn(|| -> Result<(), String> {
                for _ in 0..NEW_TURNS {
                    let lease = new
                        .acquire(key, TTL, WAIT)
                        .map_err(|e| format!("a contending 0.4 holder: {e}"))?;
                    let mut line = String::new();
                    if fs::create_dir(&mark).is_err() {
                        line.push_str("overlap\n");
                    }
                    line.push_str(&format!("0.4 {}\n", lease.fence()));
                    OpenOptions::new()
                        .append(true)
                        .open(&log)
                        .and_then(|mut f| f.write_all(line.as_bytes()))
                        .map_err(|e| format!("append to the log: {e}"))?;
                    std::thread::sleep(Duration::from_millis(10));
                    let _ = fs::remove_dir(&mark);
                    lease
                        .release()
                        .map_err(|e| format!("a contending 0.4 release: {e}"))?;
                }
                Ok(())
            }));
        }
        workers
            .into_iter()
            .filter_map(|w| w.join().expect("a worker panicked").err())
            .collect()
    });
    let text = fs::read_to_string(&log).expect("read the log");
    assert!(
        !text.contains("overlap"),
        "{name}: 0.3 and 0.4 held {key} at once:\n{text}"
    );
    assert!(failures.is_empty(), "{name}: {failures:#?}");
    let turns: Vec<(&str, u64)> = text
        .lines()
        .map(|line| {
            let (who, fence) = line.split_once(' ').expect("version fence");
            (who, fence.parse().expect("a numeric fence"))
        })
        .collect();
    assert_eq!(
        turns.len(),
        OLD_WORKERS * OLD_TURNS + NEW_WORKERS * NEW_TURNS
    );
    assert!(
        turns.windows(2).all(|w| w[0].1 < w[1].1),
        "{name}: fences in the order the holders held do not rise:\n{text}"
    );
    let handoffs = turns.windows(2).filter(|w| w[0].0 != w[1].0).count();
    eprintln!(
        "{name}: {} turns under contention, {handoffs} handed between versions",
        turns.len()
    );
}

fn refused(name: &str, what: &str, taken: leasehold::Result<leasehold::Lease>) {
    match taken {
        Ok(lease) => panic!("{name}: {what} (fence {})", lease.fence()),
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotAcquired, "{name}: {what}: {e}"),
    }
}

/// Shared leases across the versions: readers of both share a key, a writer of either excludes the
/// readers of the other.
fn shared_leases(name: &str, old: &OldCli, new: &leasehold::Client, work: &Path) {
    let key = unique_key("upgrade-shared");
    let writer = old.hold(&key, work);
    refused(
        name,
        "0.4 read beside 0.3's writer",
        new.try_acquire_shared(&key, TTL),
    );
    writer.finish();

    let reader = old.hold_as(&key, &["--shared"], work);
    refused(
        name,
        "0.4 wrote beside 0.3's reader",
        new.try_acquire(&key, TTL),
    );
    let lease = new
        .try_acquire_shared(&key, TTL)
        .unwrap_or_else(|e| panic!("{name}: 0.4 reads beside 0.3's reader: {e}"));
    reader.finish();
    let ran = old.run_once(&key, Duration::ZERO);
    assert_eq!(
        ran.code(),
        Some(HELD_ELSEWHERE),
        "{name}: 0.3 wrote beside 0.4's reader: {ran:?}"
    );
    let ran = old.run_once_as(&key, &["--shared"], Duration::ZERO);
    assert_eq!(
        ran.code(),
        Some(0),
        "{name}: 0.3 reads beside 0.4's reader: {ran:?}"
    );
    lease.release().expect("0.4's reader releases");

    let lease = new
        .try_acquire(&key, TTL)
        .unwrap_or_else(|e| panic!("{name}: 0.4 writes once the readers left: {e}"));
    let ran = old.run_once_as(&key, &["--shared"], Duration::ZERO);
    assert_eq!(
        ran.code(),
        Some(HELD_ELSEWHERE),
        "{name}: 0.3 read beside 0.4's writer: {ran:?}"
    );
    lease.release().expect("0.4's writer releases");
}

/// A semaphore's permits are counted across the versions: 0.3's and 0.4's holders together never
/// exceed the size.
fn semaphores(name: &str, old: &OldCli, new: &leasehold::Client, work: &Path) {
    let key = unique_key("upgrade-semaphore");
    let two = ["--permits", "2"];
    let first = old.hold_as(&key, &two, work);
    let second = new
        .try_acquire_permit(&key, 2, TTL)
        .unwrap_or_else(|e| panic!("{name}: 0.4's permit beside one of 0.3's: {e}"));
    refused(
        name,
        "0.4 took a third permit of 2",
        new.try_acquire_permit(&key, 2, TTL),
    );
    let ran = old.run_once_as(&key, &two, Duration::ZERO);
    assert_eq!(
        ran.code(),
        Some(HELD_ELSEWHERE),
        "{name}: 0.3 took a third permit of 2: {ran:?}"
    );
    first.finish();
    let ran = old.run_once_as(&key, &two, Duration::ZERO);
    assert_eq!(
        ran.code(),
        Some(0),
        "{name}: 0.3's permit once one was free: {ran:?}"
    );
    second.release().expect("0.4's permit releases");
}

/// What this version's doctor reports of the other version. On Redis (one server, Cluster,
/// Sentinel) it counts the keys holding a 0.3 fence counter: one more after 0.3 takes and releases
/// a fresh key, one fewer once this version has taken and released that key after it (its
/// acquisition replaces the counter, its release deletes it), and fence order is judged
/// `holds_if` while any is seen. Elsewhere the versions share one layout and are not told apart.
fn doctor_sees(name: &str, url: &str, old: &OldCli, new: &leasehold::Client) {
    use leasehold::doctor::{Promise, Verdict, OTHER_VERSIONS};
    let report = |when: &str| {
        let report =
            leasehold::doctor(url).unwrap_or_else(|e| panic!("{name}: doctor {when}: {e}"));
        let seen = report.diagnosis.facts()[OTHER_VERSIONS].clone();
        let fences = report
            .diagnosis
            .judgement(Promise::FenceOrder)
            .unwrap()
            .clone();
        eprintln!(
            "{name}: doctor {when}: {OTHER_VERSIONS}: {seen}; fence order {} ({})",
            fences.verdict, fences.because
        );
        (seen, fences)
    };
    let counted = |seen: &str| -> u64 {
        if seen == "none seen" {
            return 0;
        }
        seen.strip_prefix("0.3 seen (")
            .and_then(|rest| rest.strip_suffix(" keys)").or(rest.strip_suffix(" key)")))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: doctor says {seen:?}, not \"0.3 seen (N keys)\""))
    };
    let old_clients = |fences: &leasehold::doctor::Judgement| {
        assert_eq!(
            fences.verdict,
            Verdict::HoldsIf,
            "{name}: {}",
            fences.because
        );
        assert!(
            fences.because.contains("0.3 clients share these keys"),
            "{name}: {}",
            fences.because
        );
    };
    let redis = name.starts_with("redis");
    let (seen, fences) = report("after the turns");
    if !redis {
        assert!(seen.starts_with("not told apart"), "{name}: {seen}");
        assert_ne!(
            fences.verdict,
            Verdict::DoesNotHold,
            "{name}: {}",
            fences.because
        );
        return;
    }
    let before = counted(&seen);
    if before > 0 {
        old_clients(&fences);
    }

    let key = unique_key("upgrade-doctor");
    old_fence(name, old, &key);
    let (seen, fences) = report("after a 0.3 turn on a fresh key");
    assert_eq!(counted(&seen), before + 1, "{name}: {seen}");
    old_clients(&fences);

    let lease = new
        .try_acquire(&key, TTL)
        .unwrap_or_else(|e| panic!("{name}: 0.4 after 0.3 on {key}: {e}"));
    lease.release().expect("0.4 releases");
    let (seen, _) = report("after a 0.4 turn on that key");
    assert_eq!(counted(&seen), before, "{name}: {seen}");
}

/// One turn of 0.3 on a free key: the fence it was given.
fn old_fence(name: &str, old: &OldCli, key: &str) -> u64 {
    let ran = old.run_once(key, Duration::ZERO);
    match (ran.code(), ran.fence) {
        (Some(0), Some(fence)) => fence,
        _ => panic!("{name}: 0.3's turn: {ran:?}"),
    }
}

/// Fences are drawn from the clock as well as from the stored fence, so rising fences alone do not
/// show that one version reads the other's: a version that kept its fences apart would still give
/// rising ones while the clock moves on between acquisitions. Here the stored fence is raised far
/// past the clock before the other version draws the next.
fn stored_fences(name: &str, old: &OldCli, new: &leasehold::Client, key: &str, stored: Stored<'_>) {
    let raise = stored.raise;
    let raised = |fence: u64| -> u64 {
        let to = fence + RAISE;
        let found = raise(fence, to);
        assert!(
            found > 0,
            "{name}: fence {fence} of {key} not found where it is stored"
        );
        to
    };
    let first = old_fence(name, old, key);
    // The raise reaches the fence 0.3 reads (else the next checks would test nothing).
    let floor = raised(first);
    let second = old_fence(name, old, key);
    assert!(
        second > floor,
        "{name}: 0.3 drew {second} after its stored fence was raised to {floor} (the raise missed)"
    );
    let floor = raised(second);
    let lease = new
        .try_acquire(key, TTL)
        .unwrap_or_else(|e| panic!("{name}: 0.4 after the raise: {e}"));
    let third = lease.fence();
    lease.release().expect("0.4 releases");
    assert!(
        third > floor,
        "{name}: 0.4 drew {third} after 0.3's stored fence was raised to {floor}: 0.4 does not read \
         0.3's fences"
    );
    // Where 0.3 does not read what 0.4 stores after a release, its next fence comes from the clock,
    // which a raised fence stands ahead of as a clock stepped back would: the bound the upgrade
    // note states, shown in order by the alternating turns before this.
    if !stored.old_reads_new {
        return;
    }
    let floor = raised(third);
    let fourth = old_fence(name, old, key);
    assert!(
        fourth > floor,
        "{name}: 0.3 drew {fourth} after 0.4's stored fence was raised to {floor}: 0.3 does not read \
         0.4's fences"
    );
}

/// Every string key, and every field of a hash, holding `from`, on every server that takes the
/// write (replicas refuse it). Found by value, so the test does not depend on the layout it checks.
fn raise_in_redis(servers: &[&RedisServer], from: u64, to: u64) -> usize {
    const SCRIPT: &str = "local n = 0 \
        for _, k in ipairs(redis.call('KEYS', '*')) do \
          local t = redis.call('TYPE', k).ok \
          if t == 'string' and redis.call('GET', k) == ARGV[1] then \
            redis.call('SET', k, ARGV[2], 'KEEPTTL') n = n + 1 \
          elseif t == 'hash' then \
            local kv = redis.call('HGETALL', k) \
            for i = 1, #kv, 2 do \
              if kv[i + 1] == ARGV[1] then redis.call('HSET', k, kv[i], ARGV[2]) n = n + 1 end \
            end \
          end \
        end \
        return n";
    let (from, to) = (from.to_string(), to.to_string());
    servers
        .iter()
        .map(|server| {
            let reply = server.command(&[
                b"EVAL",
                SCRIPT.as_bytes(),
                b"0",
                from.as_bytes(),
                to.as_bytes(),
            ]);
            reply
                .trim()
                .strip_prefix(':')
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// PostgreSQL draws a fence as the greatest of the clock, the next value of a sequence (advisory
/// mode's `leasehold_fence`, or the table's identity) and, in table mode, the key's row's fence + 1:
/// the sequence is raised to `to`, and the rows of `table` holding `from`.
fn raise_in_postgres(url: &str, table: Option<&str>, from: u64, to: u64) -> usize {
    let base = url.split('?').next().expect("a URL");
    let mut c = postgres::Client::connect(base, postgres::NoTls).expect("connect to PostgreSQL");
    let (from, to) = (from as i64, to as i64);
    let mut found = 0;
    let sequence = match table {
        Some(table) => {
            found += c
                .execute(
                    &format!("UPDATE {table} SET fence = $2 WHERE fence = $1"),
                    &[&from, &to],
                )
                .expect("raise the key's row") as usize;
            c.query_one("SELECT pg_get_serial_sequence($1, 'fence')", &[&table])
                .expect("the table's identity sequence")
                .get(0)
        }
        None => "leasehold_fence".to_owned(),
    };
    found += c
        .query(
            &format!("SELECT setval('{sequence}', GREATEST(last_value, $1)) FROM {sequence}"),
            &[&to],
        )
        .expect("raise the fence sequence")
        .len();
    found
}

/// Every `fence` column holding `from`.
fn raise_in_mysql(url: &str, from: u64, to: u64) -> usize {
    use mysql::prelude::Queryable;
    let base = url.split('?').next().expect("a URL");
    let opts = mysql::Opts::from_url(base).expect("a MySQL URL");
    let mut c = mysql::Conn::new(opts).expect("connect to MariaDB");
    let tables: Vec<String> = c
        .query(
            "SELECT CONCAT('`', TABLE_NAME, '`') FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND COLUMN_NAME = 'fence'",
        )
        .expect("list fence columns");
    let mut found = 0;
    for table in tables {
        c.exec_drop(
            format!("UPDATE {table} SET fence = ? WHERE fence = ?"),
            (to, from),
        )
        .expect("raise a fence column");
        found += c.affected_rows() as usize;
    }
    found
}

type NoRecovery = fn(
    leasehold::once::Incomplete,
    &leasehold::Lease,
) -> leasehold::Result<leasehold::once::Recovery>;

/// `once` (idempotency keys) across the versions: what 0.3 ran is not run again by 0.4, and an
/// attempt 0.4 started and never finished stops 0.3 (it exits 76) instead of running it again.
fn once_records(name: &str, old: &OldCli, new: &leasehold::Client) {
    let key = unique_key("upgrade-once");
    let (ran, stdout) = old.once(&key, "echo ran-by-0.3; exit 3");
    assert_eq!(ran.code(), Some(3), "{name}: 0.3's once: {ran:?}");
    assert_eq!(stdout.trim(), "ran-by-0.3", "{name}");
    let recorded = new
        .once(
            &key,
            TTL,
            Duration::ZERO,
            Duration::from_secs(3600),
            |_| panic!("{name}: 0.4 ran again what 0.3 ran once"),
            None::<NoRecovery>,
        )
        .unwrap_or_else(|e| panic!("{name}: 0.4 reads 0.3's once record: {e}"));
    assert!(
        String::from_utf8_lossy(&recorded).contains("ran-by-0.3"),
        "{name}: 0.4 read {recorded:?} for 0.3's record"
    );

    let key = unique_key("upgrade-once");
    let lease = new
        .once_lock(&key, TTL, Duration::ZERO)
        .unwrap_or_else(|e| panic!("{name}: 0.4's once lock: {e}"));
    lease
        .once_started(Duration::from_secs(3600))
        .unwrap_or_else(|e| panic!("{name}: 0.4 records a start: {e}"));
    lease.release().expect("0.4 releases the once lock");
    let (ran, stdout) = old.once(&key, "echo ran-by-0.3");
    assert_eq!(
        ran.code(),
        Some(76),
        "{name}: 0.3 beside 0.4's unfinished attempt: {ran:?}, printed {stdout:?}"
    );
}
