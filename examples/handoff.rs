//! The handoff benchmark: 8 processes contend for one key on each backend, once with the
//! backend's native waiting and once with a 100 ms polling waiter (Symfony Lock's default), in the
//! same run. Prints handoff latency (holder's release → next holder's acquire) p50/p99, lock cycles
//! per second, and the wait distribution (fairness).
//!
//! ```sh
//! cargo run --release --example handoff              # every backend, 10 s each mode
//! cargo run --release --example handoff -- 30 local  # 30 s, only the named backends
//! ```
//!
//! It starts its own redis-server(s) and PostgreSQL on free loopback ports; the workers are this
//! program, run again.

#[path = "../tests/support/contend.rs"]
mod contend;

use contend::{analyze, ms, Report, Waiting};
use leasehold_testkit::{PostgresServer, RedisServer, TempDir};
use std::time::Duration;

const WORKERS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);

fn main() {
    if contend::worker_main() {
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(10);
    let wanted: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let want = |name: &str| wanted.is_empty() || wanted.contains(&name);
    let duration = Duration::from_secs(secs);

    let dir = TempDir::new("handoff");
    let mut backends: Vec<(&str, String)> = vec![("local", dir.file_url())];
    let redis = want("redis").then(RedisServer::start);
    if let Some(r) = &redis {
        backends.push(("redis", r.url()));
    }
    let nodes: Vec<RedisServer> = if want("redlock") {
        (0..3).map(|_| RedisServer::start()).collect()
    } else {
        vec![]
    };
    if !nodes.is_empty() {
        let hosts: Vec<String> = nodes.iter().map(|n| n.addr()).collect();
        backends.push(("redlock", format!("redlock://{}", hosts.join(","))));
    }
    let pg = (want("postgres-advisory") || want("postgres-table")).then(PostgresServer::start);
    if let Some(pg) = &pg {
        backends.push(("postgres-advisory", pg.url()));
        backends.push(("postgres-table", pg.url_with("lock=table")));
    }

    println!(
        "{WORKERS} processes, one key, {HOLD:?} of work per hold, {secs} s per row; handoff = release → next waiter's acquire"
    );
    println!(
        "{:<18} {:<10} {:>9} {:>11} {:>11} {:>11} {:>11} {:>7}",
        "backend",
        "waiting",
        "cycles/s",
        "handoff p50",
        "handoff p99",
        "wait p50",
        "wait max",
        "max/p50"
    );
    let exe = std::env::current_exe().expect("own path");
    for (name, url) in backends.iter().filter(|(n, _)| want(n)) {
        for (label, waiting) in [
            ("native", Waiting::Native),
            ("poll 100ms", Waiting::Poll(Duration::from_millis(100))),
        ] {
            let key = format!("handoff:{name}:{label}");
            let records = contend::run(&exe, &[], url, &key, WORKERS, duration, HOLD, waiting);
            let r = analyze(&records, WORKERS, duration);
            print_row(name, label, &r);
        }
    }
}

fn print_row(name: &str, label: &str, r: &Report) {
    assert_eq!(r.overlaps, 0, "{name}: two holders at once");
    let fewest = r.per_worker.iter().min().copied().unwrap_or(0);
    let most = r.per_worker.iter().max().copied().unwrap_or(0);
    println!(
        "{:<18} {:<10} {:>9.0} {:>11} {:>11} {:>11} {:>11} {:>7.1}× {:>13}",
        name,
        label,
        r.cycles_per_sec,
        ms(r.handoff.p50),
        ms(r.handoff.p99),
        ms(r.wait.p50),
        ms(r.wait.max),
        r.wait.max.as_secs_f64() / r.wait.p50.as_secs_f64().max(1e-9),
        format!("{fewest}–{most}")
    );
}
