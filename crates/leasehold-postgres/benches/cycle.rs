//! `cargo bench -p leasehold-postgres`: the uncontended lock cycle (try_acquire + release of a fresh key,
//! one thread) in both modes next to the floor, measured in the same run against a server this bench
//! starts on a free loopback port:
//!
//! - `postgres/advisory` and `postgres/table` beside a bare `pg_try_advisory_lock($1)` then
//!   `pg_advisory_unlock($1)` on one connection, prepared statements, two round trips (what pgbench
//!   would run);
//! - `postgres/bare_pair`: that pair beside two `SELECT 1` round trips, the protocol's own floor.
//!
//! Each figure is timed in alternation with its floor (../leasehold-testkit/bench/paired.rs):
//! `target/criterion/postgres/<bench>/new/estimates.json` is the figure, `paired.json` beside it the
//! floor and the ratio (see scripts/bench.sh).

#[path = "../../leasehold-testkit/bench/paired.rs"]
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
}

criterion_group! {
    name = benches;
    config = paired::config(SAMPLES);
    targets = postgres
}
criterion_main!(benches);
