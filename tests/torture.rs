//! Torture: on every backend and topology, 8 workers take exclusive, shared and permit leases (each
//! kind the backend offers) on a few keys, extend some, write to a fenced store, sometimes pause past
//! their TTL or hand their lease to another worker by token, and release, recording every call and
//! what each holder believed of its lease (`remaining()`), while a seeded fault generator draws a
//! schedule from the faults that apply to the target (tests/support/scenarios.rs) and applies it.
//! The checker must then report no violation of any kind (overlaps of derived windows, believed
//! overlaps, fence order, stale writes, calls past their bound) and no stranded refusal.
//!
//! Each backend runs `LEASEHOLD_TORTURE_SECS` (20 by default); the seed is printed (`seed=…`) and
//! `TORTURE_SEED=…` replays the schedule. The scenarios run one at a time: they measure bounds, and
//! two at once on 2 cores would measure each other. A watchdog fails a scenario that hangs.

#[path = "support/scenarios.rs"]
mod scenarios;
#[path = "support/torture.rs"]
mod torture;

use leasehold_testkit::history::seed;
use leasehold_testkit::Report;
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
/// fails the test if the run has not ended `extra` after its time (server starts included).
fn generated(
    name: &'static str,
    extra: Duration,
    setup: impl FnOnce(u64, Duration) -> Setup + Send + 'static,
) {
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
