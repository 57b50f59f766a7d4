//! Torture: on every backend and topology, 8 workers take exclusive, shared and permit leases (each
//! kind the backend offers) on a few keys, extend some, write to a fenced store, sometimes pause past
//! their TTL or hand their lease to another worker by token, and release, recording every call and
//! what each holder believed of its lease (`remaining()`), while a seeded fault generator draws a
//! schedule from the faults that apply to the target (tests/support/scenarios.rs) and applies it.
//! The checker must then report no violation of any kind (overlaps of derived windows, believed
//! overlaps, fence order, stale writes, calls past their bound) and no stranded refusal; but for
//! one deployment the README says loses exclusion (a Redis that evicts, with `allow_eviction=true`),
//! where it must find the overlap.
//!
//! Three runs put the durability rows of the README's fault table to the test: the server set up
//! as an operator who relies on it would (Redis with AOF, `appendfsync` `everysec` and `always`;
//! PostgreSQL with `synchronous_commit = off` at server level; MariaDB with
//! `innodb_flush_log_at_trx_commit=2`), crashed and restarted at once on its data, with leases of
//! seconds, so that leases granted before a crash are still relied on after it. The checker gets
//! no allowance for them; the run must also show that some were (`held_across_restarts`).
//!
//! Each backend runs `LEASEHOLD_TORTURE_SECS` (20 by default); the seed is printed (`seed=…`) and
//! `TORTURE_SEED=…` replays the schedule. The scenarios run one at a time: they measure bounds, and
//! two at once on 2 cores would measure each other. A watchdog fails a scenario that hangs.

#[path = "support/scenarios.rs"]
mod scenarios;
#[path = "support/torture.rs"]
mod torture;

use leasehold_testkit::history::seed;
use leasehold_testkit::{PoolMode, Report};
use scenarios::Setup;
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn secs() -> Duration {
    let s = std::env::var("LEASEHOLD_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(s)
}

fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets up, runs workers and the seed's faults for [`secs`], and checks; all under a watchdog that
/// fails the test if the run has not ended `extra` after its time (server starts included). Returns
/// the (clean) report.
fn generated(
    name: &'static str,
    extra: Duration,
    setup: impl FnOnce(u64, Duration) -> Setup + Send + 'static,
) -> Report {
    let _one = serial();
    let seed = seed(&format!("torture {name}"));
    let (tx, rx) = mpsc::channel();
    let began = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(scenarios::run(name, setup(seed, secs()), seed));
    });
    let cap = secs() + extra;
    let report = match rx.recv_timeout(cap) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{name}: the scenario hung past {cap:?} (seed={seed})")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{name}: the scenario panicked (seed={seed}); see above")
        }
    };
    eprintln!("{name}: took {:?}", began.elapsed());
    assert_clean(name, seed, &report);
    report
}

/// Runs `setup` for `time` under the same watchdog as [`generated`] and returns the report,
/// for a scenario whose checker must find something.
fn found(
    name: &'static str,
    time: Duration,
    extra: Duration,
    setup: impl FnOnce(u64, Duration) -> Setup + Send + 'static,
) -> (u64, Report) {
    let _one = serial();
    let seed = seed(&format!("torture {name}"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(scenarios::run(name, setup(seed, time), seed));
    });
    match rx.recv_timeout(time + extra) {
        Ok(r) => {
            eprintln!("{}", torture::summary(name, seed, &r));
            println!("{name} seed={seed}: {}", r.summary_line());
            (seed, r)
        }
        Err(e) => panic!("{name}: the scenario hung or panicked ({e:?}, seed={seed})"),
    }
}

fn assert_clean(name: &str, seed: u64, r: &Report) {
    eprintln!("{}", torture::summary(name, seed, r));
    println!("{name} seed={seed}: {}", r.summary_line());
    let replay = format!("(replay: TORTURE_SEED={seed})");
    assert!(r.acquired > 0, "{name}: nothing was ever acquired {replay}");
    assert!(r.is_clean(), "{name}: {} {replay}\n{r}", r.summary_line());
    assert_eq!(
        r.stranded.count, 0,
        "{name}: stranded refusals {replay}\n{r}"
    );
}

#[test]
fn torture_local() {
    generated("local", Duration::from_secs(30), scenarios::local);
}

#[test]
fn torture_redis() {
    generated("redis", Duration::from_secs(30), scenarios::redis);
}

#[test]
fn torture_redis_replicas() {
    generated(
        "redis replicas=1",
        Duration::from_secs(30),
        scenarios::redis_replicas,
    );
}

#[test]
fn torture_redlock() {
    generated("redlock", Duration::from_secs(30), scenarios::redlock);
}

#[test]
fn torture_redis_cluster() {
    generated(
        "redis cluster",
        Duration::from_secs(60),
        scenarios::redis_cluster,
    );
}

#[test]
fn torture_redis_sentinel() {
    generated(
        "redis sentinel",
        Duration::from_secs(60),
        scenarios::redis_sentinel,
    );
}

#[test]
fn torture_postgres_advisory() {
    generated("postgres advisory", Duration::from_secs(45), |seed, d| {
        scenarios::postgres("advisory", seed, d)
    });
}

#[test]
fn torture_postgres_table() {
    generated("postgres table", Duration::from_secs(45), |seed, d| {
        scenarios::postgres("table", seed, d)
    });
}

#[test]
fn torture_postgres_table_pgbouncer_session() {
    generated(
        "postgres table pgbouncer session",
        Duration::from_secs(45),
        |seed, d| scenarios::postgres_pgbouncer(PoolMode::Session, seed, d),
    );
}

#[test]
fn torture_postgres_table_pgbouncer_transaction() {
    generated(
        "postgres table pgbouncer transaction",
        Duration::from_secs(45),
        |seed, d| scenarios::postgres_pgbouncer(PoolMode::Transaction, seed, d),
    );
}

/// The one scenario whose checker must find a violation: a Redis that evicts lock keys, used with
/// `allow_eviction=true`, hands a held key to a second holder under memory pressure (what `doctor`
/// predicts for it, and why connect refuses such a server otherwise: the scenario checks that
/// too). 10 s are enough.
#[test]
fn torture_redis_evicting_finds_the_overlap() {
    let name = "redis evicting allow_eviction=true";
    let (seed, r) = found(
        name,
        Duration::from_secs(10),
        Duration::from_secs(30),
        scenarios::redis_evicting,
    );
    assert!(
        r.acquired > 0,
        "{name}: nothing was ever acquired (seed={seed})"
    );
    assert!(
        r.overlaps.count > 0,
        "{name}: the checker found no overlap where eviction frees held keys (seed={seed})\n{r}"
    );
}

#[test]
fn torture_mysql_named() {
    generated("mysql named", Duration::from_secs(60), |seed, d| {
        scenarios::mysql("named", seed, d)
    });
}

#[test]
fn torture_mysql_table() {
    generated("mysql table", Duration::from_secs(60), |seed, d| {
        scenarios::mysql("table", seed, d)
    });
}

#[test]
fn torture_etcd() {
    generated("etcd", Duration::from_secs(45), scenarios::etcd);
}

/// The etcd scenario with every worker on one key of each kind and a semaphore of one permit:
/// semaphore waiters queue behind one another and behind the holder, so a permit granted past the
/// count shows as an overlap. (On the default plan's four keys, a semaphore of two permits rarely
/// has three workers at once: a waiter let in past the count went unseen there.)
#[test]
fn torture_etcd_one_key() {
    generated("etcd one key", Duration::from_secs(45), |seed, time| {
        let mut setup = scenarios::etcd(seed, time);
        setup.plan.keys = 1;
        setup.plan.permits = Some(1);
        setup
    });
}

/// [`generated`] for a durability scenario: clean, and some lease granted before a crash was
/// relied on after the restart (else the run tested nothing of what the server kept).
fn durable(
    name: &'static str,
    extra: Duration,
    setup: impl FnOnce(u64, Duration) -> Setup + Send + 'static,
) {
    let report = generated(name, extra, setup);
    assert!(
        report.held_across_restarts > 0,
        "{name}: no lease granted before a crash was relied on after it\n{report}"
    );
}

#[test]
fn torture_redis_aof() {
    durable(
        "redis aof (everysec, always)",
        Duration::from_secs(30),
        scenarios::redis_aof,
    );
}

#[test]
fn torture_postgres_table_synchronous_commit_off() {
    durable(
        "postgres table synchronous_commit=off",
        Duration::from_secs(45),
        scenarios::postgres_durable,
    );
}

#[test]
fn torture_mysql_table_flush_log_2() {
    durable(
        "mysql table innodb_flush_log_at_trx_commit=2",
        Duration::from_secs(60),
        scenarios::mysql_durable,
    );
}
