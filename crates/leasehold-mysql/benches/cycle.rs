//! `cargo bench -p leasehold-mysql`: the uncontended lock cycle (try_acquire + release of a fresh
//! key, one thread) in both modes next to the floor, measured in the same run against a MariaDB this
//! bench starts on a free loopback port. The floor is a bare `SELECT GET_LOCK(name, 0)` then
//! `SELECT RELEASE_LOCK(name)` on one connection (two round trips, what a hand-written client would
//! run); `mysql/bare_pair` puts that pair beside two `SELECT 1` round trips, the protocol's own floor.
//!
//! No criterion, but its pairing (../leasehold-redis/benches/support/paired.rs): the machine is
//! shared and its load drifts within seconds, so each sample runs the figure a number of times, then
//! the floor as many times, and the figure is the median over samples of figure ÷ floor, in which
//! slower drift cancels out. `MYSQL_BENCH_SAMPLES` and `MYSQL_BENCH_OPS` (per sample) change the
//! run's length. Prints one line per figure; `--round-trips` also counts the statements one cycle
//! sends (from the server's `Com_*`/`Questions` counters).

use leasehold_core::{Client, Config};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::MariaDbServer;
use mysql::prelude::Queryable;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(30);

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("bad bench URL: {e}"));
    Client::new(MysqlBackend::connect(&config).unwrap_or_else(|e| panic!("connect: {e}")))
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A cycle (try_acquire + release) on a key never used before, as a worker taking job ids sees it.
fn fresh_cycle<'a>(client: &'a Client, label: &str) -> impl FnMut() + 'a {
    let prefix = leasehold_testkit::unique_key(label);
    let mut i = 0u64;
    move || {
        i += 1;
        let key = format!("{prefix}:{i}");
        client.try_acquire(&key, TTL).unwrap().release().unwrap();
    }
}

/// Times `figure` beside `floor`, `ops` of each per sample, after a warm-up; prints and returns the
/// median ratio.
fn paired(
    name: &str,
    samples: usize,
    ops: usize,
    mut figure: impl FnMut(),
    mut floor: impl FnMut(),
) -> f64 {
    for _ in 0..ops {
        figure();
        floor();
    }
    let (mut ratios, mut figs, mut floors) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..samples {
        let t0 = Instant::now();
        for _ in 0..ops {
            figure();
        }
        let fig = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        for _ in 0..ops {
            floor();
        }
        let flo = t1.elapsed().as_secs_f64();
        ratios.push(fig / flo);
        figs.push(fig * 1e6 / ops as f64);
        floors.push(flo * 1e6 / ops as f64);
    }
    let ratio = median(ratios);
    println!(
        "mysql/{name}: {:.1} µs beside a floor of {:.1} µs = {ratio:.2}× (median of {samples} paired \
         samples of {ops})",
        median(figs),
        median(floors)
    );
    ratio
}

/// The statements (and their kinds) the server counted while `op` ran `n` times, per run.
fn count_statements(raw: &RefCell<mysql::Conn>, name: &str, n: usize, mut op: impl FnMut()) {
    let status = |raw: &RefCell<mysql::Conn>| -> Vec<(String, u64)> {
        raw.borrow_mut()
            .query::<(String, String), _>(
                "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_select', \
                 'Com_insert', 'Com_update', 'Com_delete', 'Com_begin', 'Com_commit', \
                 'Com_rollback', 'Com_set_option', 'Com_stmt_execute', 'Com_stmt_prepare', \
                 'Com_insert_select', 'Com_replace', 'Com_kill')",
            )
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.parse().unwrap_or(0)))
            .collect()
    };
    let before = status(raw);
    for _ in 0..n {
        op();
    }
    let after = status(raw);
    let per: Vec<String> = before
        .iter()
        .zip(&after)
        .map(|((k, b), (_, a))| (k, (a - b) as f64 / n as f64))
        .filter(|(_, d)| *d > 0.005)
        .map(|(k, d)| format!("{k}={d:.2}"))
        .collect();
    // The SHOW itself counts one Question and one Com_select, sent between the two reads.
    println!(
        "mysql/{name}: per cycle {} (SHOW STATUS adds 1/{n})",
        per.join(" ")
    );
}

fn main() {
    let samples = env_or("MYSQL_BENCH_SAMPLES", 20);
    let ops = env_or("MYSQL_BENCH_OPS", 200);
    let round_trips = std::env::args().any(|a| a == "--round-trips");
    let server = MariaDbServer::start();
    let named = client(&server.url_with("lock=named"));
    let table = client(&server.url_with("lock=table&table=bench_locks"));
    let raw = mysql::Conn::new(mysql::Opts::from_url(&server.url()).unwrap())
        .unwrap_or_else(|e| panic!("raw connection to MariaDB on port {}: {e}", server.port()));
    let raw = RefCell::new(raw);
    let id = Cell::new(0u64);
    let prefix = leasehold_testkit::unique_key("bench-floor");
    let bare_pair = || {
        id.set(id.get() + 1);
        let name = format!("{prefix}:{}", id.get());
        let mut raw = raw.borrow_mut();
        let got: Option<i64> = raw
            .query_first(format!("SELECT GET_LOCK('{name}', 0)"))
            .unwrap();
        assert_eq!(got, Some(1), "a fresh named lock was taken");
        let freed: Option<i64> = raw
            .query_first(format!("SELECT RELEASE_LOCK('{name}')"))
            .unwrap();
        assert_eq!(freed, Some(1));
    };
    let two_select1 = || {
        let mut raw = raw.borrow_mut();
        for _ in 0..2 {
            let _: Option<i64> = raw.query_first("SELECT 1").unwrap();
        }
    };

    paired(
        "named",
        samples,
        ops,
        fresh_cycle(&named, "bench-named"),
        bare_pair,
    );
    paired(
        "table",
        samples,
        ops,
        fresh_cycle(&table, "bench-table"),
        bare_pair,
    );
    paired("bare_pair", samples, ops, bare_pair, two_select1);

    if round_trips {
        count_statements(&raw, "named", 500, fresh_cycle(&named, "count-named"));
        count_statements(&raw, "table", 500, fresh_cycle(&table, "count-table"));
        count_statements(&raw, "bare_pair", 500, bare_pair);
    }
}
