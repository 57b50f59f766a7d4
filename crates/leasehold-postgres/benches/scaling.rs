//! `cargo bench -p leasehold-postgres --bench scaling`: table mode's server work per acquire and per
//! release of a fresh key as the leases held in the table grow, judged on the server's own
//! counters: the CPU time of the backends serving the lock client (`/proc/<pid>/schedstat`, in
//! nanoseconds, of every `client backend` in `pg_stat_activity` but the measuring one).
//!
//! - `keys_{1k,10k,100k,1m}`: a server whose lock table holds that many other leases beside an
//!   empty one (the floor), rounds alternated, the ratio the median of the rounds' ratios;
//! - `sweep`: the once-a-minute statement that deletes rows crashed holders left, which reads the
//!   table without an index on the expiry: its time with 1 M rows held, from `EXPLAIN ANALYZE`.
//! - `memory`: the table's and its index's size per lease held (`pg_total_relation_size`).
//!
//! The held rows are written by one `INSERT … SELECT` in the shape a lease leaves (taking a million
//! through the client would take minutes here). `LEASEHOLD_SCALING_MAX_KEYS` caps the rows
//! (default 1,000,000). Written to `<criterion home>/scaling/postgres.json`.

#[path = "../../../tests/support/paired.rs"]
mod paired;

use paired::median;

use leasehold_core::{Client, Config, Lease};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use std::time::Duration;

const TTL: Duration = Duration::from_secs(3_600);
const ROUNDS: usize = 11;
const PER_ROUND: usize = 500;
const TABLE: &str = "scale_locks";

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(PostgresBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

/// A server, its lock client and a connection that reads its counters.
struct Side {
    _server: PostgresServer,
    lock: Client,
    raw: postgres::Client,
}

impl Side {
    fn start() -> Side {
        let server = PostgresServer::start();
        let lock = client(&server.url_with(&format!("lock=table&table={TABLE}")));
        let raw = postgres::Client::connect(&server.url(), postgres::NoTls)
            .unwrap_or_else(|e| panic!("raw connection to PostgreSQL: {e}"));
        Side {
            _server: server,
            lock,
            raw,
        }
    }

    /// CPU ns used so far by the client backends other than ours.
    fn backends_cpu_ns(&mut self) -> f64 {
        let rows = self
            .raw
            .query(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' \
                 AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap();
        rows.iter()
            .map(|r| {
                let pid: i32 = r.get(0);
                std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
                    .ok()
                    .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
                    .unwrap_or(0.0)
            })
            .sum()
    }

    /// Server µs per acquire of `PER_ROUND` fresh keys, then per release of them.
    fn acquire_release_us(&mut self) -> (f64, f64) {
        let prefix = unique_key("scale-fresh");
        let t0 = self.backends_cpu_ns();
        let held: Vec<Lease> = (0..PER_ROUND)
            .map(|i| self.lock.try_acquire(format!("{prefix}:{i}"), TTL).unwrap())
            .collect();
        let t1 = self.backends_cpu_ns();
        for lease in held {
            lease.release().unwrap();
        }
        let t2 = self.backends_cpu_ns();
        let n = PER_ROUND as f64 * 1e3;
        ((t1 - t0) / n, (t2 - t1) / n)
    }

    fn fill(&mut self, from: usize, to: usize) {
        self.raw
            .execute(
                &format!(
                    "INSERT INTO {TABLE} (key, token, expires_at) \
                     SELECT convert_to('scale-held:' || g, 'UTF8'), 'held-token', \
                            clock_timestamp() + interval '1 hour' \
                     FROM generate_series($1::int, $2::int) g"
                ),
                &[&(from as i32 + 1), &(to as i32)],
            )
            .unwrap();
        // Settled as a server would be some time after the rows came: statistics and the
        // visibility map up to date, so autovacuum does not run inside one side's rounds.
        self.raw
            .batch_execute(&format!("VACUUM ANALYZE {TABLE}"))
            .unwrap();
    }
}

fn main() {
    let max: usize = std::env::var("LEASEHOLD_SCALING_MAX_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/postgres: load average at start {}", load.trim());
    let (mut empty, mut full) = (Side::start(), Side::start());
    // Creates the tables, opens the pools' connections.
    empty.acquire_release_us();
    full.acquire_release_us();
    empty
        .raw
        .batch_execute(&format!("VACUUM ANALYZE {TABLE}"))
        .unwrap();
    let mut json = Vec::new();
    let mut held = 0;
    for (name, n) in [
        ("1k", 1_000usize),
        ("10k", 10_000),
        ("100k", 100_000),
        ("1m", 1_000_000),
    ] {
        if n > max {
            break;
        }
        full.fill(held, n);
        held = n;
        let (mut acq, mut rel) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let f = full.acquire_release_us();
            let e = empty.acquire_release_us();
            acq.push((f.0, e.0));
            rel.push((f.1, e.1));
        }
        for (what, pairs) in [("acquire", acq), ("release", rel)] {
            let figure = median(pairs.iter().map(|p| p.0).collect());
            let floor = median(pairs.iter().map(|p| p.1).collect());
            let ratio = median(pairs.iter().map(|p| p.0 / p.1).collect());
            println!(
                "scaling/postgres/keys_{name}/{what}: {figure:.1} µs of server CPU beside a floor of {floor:.1} µs = {ratio:.3}× \
                 ({n} other leases held in the table vs none; median of {ROUNDS} rounds)"
            );
            json.push(format!(
                "{{\"name\": \"keys_{name}/{what}\", \"figure_us\": {figure:.2}, \"floor_us\": {floor:.2}, \"ratio\": {ratio:.4}}}"
            ));
        }
    }
    // The sweep's read: the part of it that grows with the rows held (none of them expired).
    let plan: Vec<String> = full
        .raw
        .query(
            &format!(
                "EXPLAIN (ANALYZE, TIMING OFF) SELECT key FROM {TABLE} \
                 WHERE expires_at < clock_timestamp() - interval '1 second' LIMIT 1000 FOR UPDATE SKIP LOCKED"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let sweep_ms = plan
        .iter()
        .find_map(|l| l.strip_prefix("Execution Time: "))
        .and_then(|v| v.trim_end_matches(" ms").parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    println!(
        "scaling/postgres/sweep: the expired-rows sweep's read takes {sweep_ms:.1} ms with {held} rows held \
         (once a minute per backend; {})",
        plan.first().map_or("", String::as_str)
    );
    json.push(format!(
        "{{\"name\": \"sweep\", \"held\": {held}, \"ms\": {sweep_ms:.2}}}"
    ));
    let bytes: i64 = full
        .raw
        .query_one(&format!("SELECT pg_total_relation_size('{TABLE}')"), &[])
        .unwrap()
        .get(0);
    let per_lease = bytes as f64 / held.max(1) as f64;
    println!(
        "scaling/postgres/memory: {per_lease:.0} B of table and index per lease held ({held} held)"
    );
    json.push(format!(
        "{{\"name\": \"memory\", \"held\": {held}, \"bytes_per_lease\": {per_lease:.1}}}"
    ));
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/postgres: load average at end {}", load_end.trim());
    paired::save(
        "scaling",
        "postgres.json",
        &format!(
            "{{\"load_start\": \"{}\", \"load_end\": \"{}\", \"rows\": [\n{}\n]}}\n",
            load.trim(),
            load_end.trim(),
            json.join(",\n")
        ),
    );
}
