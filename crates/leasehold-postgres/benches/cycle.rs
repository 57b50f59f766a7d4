//! `cargo bench -p leasehold-postgres`: the uncontended lock cycle (try_acquire + release of a fresh key,
//! one thread) in both modes next to the floor, measured in the same run against a server this bench
//! starts on a free loopback port:
//!
//! - `postgres/advisory` and `postgres/table` beside a bare `pg_try_advisory_lock($1)` then
//!   `pg_advisory_unlock($1)` on one connection, prepared statements, two round trips (what pgbench
//!   would run);
//! - `postgres/bare_pair`: that pair beside two `SELECT 1` round trips, the protocol's own floor;
//! - `postgres/pgbench/result.json`: the advisory cycle beside `pgbench -c 1` of the same pair.
//!
//! Each figure is timed in alternation with its floor (tests/support/paired.rs):
//! `target/criterion/postgres/<bench>/new/estimates.json` is the figure, `paired.json` beside it the
//! floor and the ratio (see scripts/bench.sh).

#[path = "../../../tests/support/paired.rs"]
mod paired;

use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_core::{Client, Config};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::PostgresServer;
use std::cell::{Cell, RefCell};
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);
const SAMPLES: usize = 20;

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(PostgresBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

fn postgres(c: &mut Criterion) {
    let server = PostgresServer::start();
    let advisory = client(&server.url_with("lock=advisory"));
    let table = client(&server.url_with("lock=table&table=bench_locks"));
    let mut raw = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap_or_else(|e| {
        panic!(
            "raw connection to PostgreSQL on port {}: {e}",
            server.port()
        )
    });
    let lock = raw.prepare("SELECT pg_try_advisory_lock($1)").unwrap();
    let unlock = raw.prepare("SELECT pg_advisory_unlock($1)").unwrap();
    let select1 = raw.prepare("SELECT 1").unwrap();
    let raw = RefCell::new(raw);
    let id = Cell::new(0x4c48_0000_0000_i64);
    let bare_pair = || {
        id.set(id.get() + 1);
        let mut raw = raw.borrow_mut();
        let got: bool = raw.query_one(&lock, &[&id.get()]).unwrap().get(0);
        assert!(got, "fresh advisory key was taken");
        let freed: bool = raw.query_one(&unlock, &[&id.get()]).unwrap().get(0);
        assert!(freed);
    };
    let two_select1 = || {
        let mut raw = raw.borrow_mut();
        for _ in 0..2 {
            let _: i32 = raw.query_one(&select1, &[]).unwrap().get(0);
        }
    };

    let mut g = c.benchmark_group("postgres");
    paired::bench(
        &mut g,
        "postgres",
        "advisory",
        SAMPLES,
        paired::fresh_cycle(&advisory, "bench-advisory", TTL),
        bare_pair,
    );
    paired::bench(
        &mut g,
        "postgres",
        "table",
        SAMPLES,
        paired::fresh_cycle(&table, "bench-table", TTL),
        bare_pair,
    );
    paired::bench(
        &mut g,
        "postgres",
        "bare_pair",
        SAMPLES,
        bare_pair,
        two_select1,
    );
    g.finish();
    beside_pgbench(
        &server,
        paired::fresh_cycle(&advisory, "bench-pgbench", TTL),
    );
}

/// How long each side of [`beside_pgbench`] runs.
const PGBENCH_SECS: u64 = 3;

/// The advisory cycle beside PostgreSQL's own client running the same pair: `pgbench -c 1` (its
/// default, simple protocol) of `SELECT pg_try_advisory_lock(42); SELECT pg_advisory_unlock(42);`
/// as one transaction, before and after [`PGBENCH_SECS`] of cycles; averages on both sides (pgbench
/// reports its average latency). pgbench is a child of this bench, so it shares its CPU pinning.
/// Written to `<criterion home>/postgres/pgbench/result.json`.
fn beside_pgbench(server: &PostgresServer, mut cycle: impl FnMut()) {
    let dir = paired::criterion_home().join("postgres").join("pgbench");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let script = dir.join("advisory.sql");
    std::fs::write(
        &script,
        "SELECT pg_try_advisory_lock(42);\nSELECT pg_advisory_unlock(42);\n",
    )
    .expect("write the pgbench script");
    let pgbench = || {
        let bin = PostgresServer::program("pgbench");
        let out = std::process::Command::new(&bin)
            .args(["-n", "-c", "1", "-T", &PGBENCH_SECS.to_string()])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &server.port().to_string(),
                "-U",
                "postgres",
            ])
            .arg("-f")
            .arg(&script)
            .arg("postgres")
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "pgbench failed: {text}");
        // `latency average = 0.052 ms`
        text.lines()
            .find_map(|l| {
                l.strip_prefix("latency average = ")?
                    .strip_suffix(" ms")?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no latency average in pgbench's output: {text}"))
            * 1e3
    };
    let before = pgbench();
    let start = std::time::Instant::now();
    let mut cycles = 0u64;
    while start.elapsed() < Duration::from_secs(PGBENCH_SECS) {
        cycle();
        cycles += 1;
    }
    let cycle_us = start.elapsed().as_secs_f64() * 1e6 / cycles as f64;
    let after = pgbench();
    let floor = (before + after) / 2.0;
    std::fs::write(
        dir.join("result.json"),
        format!("{{\"cycle_us\": {cycle_us:.2}, \"pgbench_us\": {floor:.2}}}\n"),
    )
    .expect("write result.json");
    println!(
        "postgres/pgbench: advisory cycle {cycle_us:.1} µs (mean) beside pgbench -c 1 of the same pair \
         {before:.1} then {after:.1} µs: {:.2}",
        cycle_us / floor
    );
}

criterion_group! {
    name = benches;
    config = paired::config(SAMPLES);
    targets = postgres
}
criterion_main!(benches);
