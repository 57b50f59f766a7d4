//! The measurements of the benchmark suite that criterion fits badly, each next to the floor
//! it is compared with, measured in the same run against servers this program starts on free loopback
//! ports:
//!
//! - handoff: 8 processes contend for one key on each backend (native waiting, 1 ms of work per hold);
//!   handoff = the holder starts releasing → the next waiter has the key. Its p50 and p99, beside one
//!   raw round trip to the same server (`PING` on a raw socket; a prepared `SELECT 1` on PostgreSQL),
//!   taken just before and just after the row, and, on Redis, the sleeping-client floor taken after it
//!   (a reader blocked in `BLPOP` woken by an `LPUSH` from another connection: p50 and p99);
//! - load: `leasehold bench` (the CLI, `LEASEHOLD_BIN`) with 50 workers on random keys of 1,000,000,
//!   beside `redis-benchmark -c 50` running `EVALSHA` of a script that does one `SET` on random keys,
//!   run before and after it on the same server.
//!
//! ```sh
//! LEASEHOLD_BIN=target/release/leasehold cargo run --release --example perf_run -- target/perf/custom.json 5
//! ```
//!
//! `scripts/bench.sh` runs it and `examples/perf_report.rs` turns its JSON into docs/perf/rust.md.

#[path = "../tests/support/contend.rs"]
mod contend;

use contend::{analyze, Waiting};
use leasehold_testkit::{PostgresServer, RedisServer, TempDir};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const WORKERS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);
const LOAD_WORKERS: u32 = 50;
const LOAD_KEYS: u32 = 1_000_000;

fn main() {
    if contend::worker_main() {
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = PathBuf::from(
        args.first()
            .map_or("target/perf/custom.json", String::as_str),
    );
    let secs: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let duration = Duration::from_secs(secs);

    let dir = TempDir::new("perf-handoff");
    let redis = RedisServer::start();
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let pg = PostgresServer::start();
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    let rows: Vec<(&str, String, Rtt)> = vec![
        ("local", dir.file_url(), Rtt::None),
        ("redis", redis.url(), Rtt::Ping(redis.port())),
        (
            "redlock3",
            format!("redlock://{}", hosts.join(",")),
            Rtt::Ping(nodes[0].port()),
        ),
        ("postgres-advisory", pg.url(), Rtt::Select1(pg.url())),
        (
            "postgres-table",
            pg.url_with("lock=table&table=perf_locks"),
            Rtt::Select1(pg.url()),
        ),
    ];

    let exe = std::env::current_exe().expect("own path");
    let mut handoff = Vec::new();
    for (name, url, rtt) in &rows {
        // One cycle from here first: the workers then find the server up and the table made (eight
        // first connections at once would race to create it).
        let warm = leasehold::connect(url).unwrap_or_else(|e| panic!("{name}: connect: {e}"));
        warm.try_acquire(format!("perf:warm:{name}"), Duration::from_secs(10))
            .and_then(|lease| lease.release())
            .unwrap_or_else(|e| panic!("{name}: first cycle: {e}"));
        drop(warm);
        let before = rtt.median();
        // On the single server, the server's own time per acquisition too (`INFO commandstats`).
        let counted = (*name == "redis").then_some(&redis);
        if let Some(server) = counted {
            server.reset_stats();
        }
        // On PostgreSQL, the transactions the server ran per acquisition: each is one statement
        // batch, so one round trip of some client.
        let pg_transactions = name.starts_with("postgres").then(|| transactions(&pg));
        let records = contend::run(
            &exe,
            &[],
            url,
            &format!("perf:handoff:{name}"),
            WORKERS,
            duration,
            HOLD,
            Waiting::Native,
        );
        let server_us = counted.map(|server| server.busy_usec() / records.len().max(1) as f64);
        let transactions_per_acquisition = pg_transactions
            .map(|before| (transactions(&pg) - before) / records.len().max(1) as f64);
        let after = rtt.median();
        // The sleeping-client floor, right after the row: how fast the server can wake a client
        // blocked on it at all, which every handoff by wake-up pays once.
        let wake = rtt.wake();
        let r = analyze(&records, WORKERS, duration);
        assert_eq!(r.overlaps, 0, "{name}: two holders at once");
        assert!(r.handoff.n > 0, "{name}: no handoff measured");
        let rtt_us = before.zip(after).map(|(b, a)| us((b + a) / 2));
        println!(
            "handoff {name:<18} p50 {:>8.1} µs  p99 {:>8.1} µs  (n={})  1 RTT {}",
            us(r.handoff.p50),
            us(r.handoff.p99),
            r.handoff.n,
            rtt_us.map_or("—".to_owned(), |v| format!("{v:.1} µs")),
        );
        handoff.push(json!({
            "backend": name,
            "workers": WORKERS,
            "hold_ms": HOLD.as_secs_f64() * 1e3,
            "seconds": secs,
            "n": r.handoff.n,
            "p50_us": us(r.handoff.p50),
            "p99_us": us(r.handoff.p99),
            "cycles_per_sec": r.cycles_per_sec,
            "rtt_us": rtt_us,
            "rtt_of": rtt.describe(),
            "wake_p50_us": wake.map(|(p50, _)| us(p50)),
            "wake_p99_us": wake.map(|(_, p99)| us(p99)),
            "server_us_per_acquisition": server_us,
            "transactions_per_acquisition": transactions_per_acquisition,
        }));
    }

    let load = load(&redis, duration);
    let report = json!({ "handoff": handoff, "load": load });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).expect("output directory");
    }
    std::fs::write(&out, serde_json::to_string_pretty(&report).unwrap() + "\n")
        .unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
    println!("wrote {}", out.display());
}

/// Transactions committed or rolled back in the server's database so far (`pg_stat_database`),
/// after a pause: a backend reports its counts when it has been idle a while or when it exits, and
/// the workers' sessions have just ended.
fn transactions(pg: &PostgresServer) -> f64 {
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = postgres::Client::connect(&pg.url(), postgres::NoTls)
        .unwrap_or_else(|e| panic!("PostgreSQL statistics connection: {e}"));
    let n: i64 = c
        .query_one(
            "SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database \
             WHERE datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    n as f64
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One raw round trip to the server a backend talks to.
enum Rtt {
    None,
    Ping(u16),
    Select1(String),
}

impl Rtt {
    fn describe(&self) -> Option<&'static str> {
        match self {
            Rtt::None => None,
            Rtt::Ping(_) => Some("PING on a raw socket"),
            Rtt::Select1(_) => Some("prepared SELECT 1"),
        }
    }

    /// The median of 2,000 round trips, after 200 to warm up.
    fn median(&self) -> Option<Duration> {
        let mut round_trip: Box<dyn FnMut()> = match self {
            Rtt::None => return None,
            Rtt::Ping(port) => {
                let mut s = TcpStream::connect(("127.0.0.1", *port)).expect("connect for PING");
                s.set_nodelay(true).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                Box::new(move || {
                    s.write_all(b"PING\r\n").unwrap();
                    let mut reply = [0u8; 7];
                    s.read_exact(&mut reply).expect("PONG");
                    assert_eq!(&reply, b"+PONG\r\n");
                })
            }
            Rtt::Select1(url) => {
                let mut c = postgres::Client::connect(url, postgres::NoTls)
                    .unwrap_or_else(|e| panic!("raw PostgreSQL connection: {e}"));
                let stmt = c.prepare("SELECT 1").unwrap();
                Box::new(move || {
                    let _: i32 = c.query_one(&stmt, &[]).unwrap().get(0);
                })
            }
        };
        for _ in 0..200 {
            round_trip();
        }
        let mut times: Vec<Duration> = (0..2000)
            .map(|_| {
                let t = Instant::now();
                round_trip();
                t.elapsed()
            })
            .collect();
        times.sort_unstable();
        Some(times[times.len() / 2])
    }
}

/// How many times the sleeping-client floor wakes its reader.
const WAKES: usize = 1000;

impl Rtt {
    /// The sleeping-client floor of a Redis server, p50 and p99: a reader blocked in `BLPOP` on one
    /// connection, woken by an `LPUSH` on another, timed from the moment the write is sent to the
    /// moment the reader has the answer. The writer lets the reader sleep 1 ms first (as a waiter
    /// sleeps through a 1 ms hold), so each sample pays a real wake-up, as a handoff does.
    fn wake(&self) -> Option<(Duration, Duration)> {
        let Rtt::Ping(port) = self else { return None };
        let connect = || {
            let s = TcpStream::connect(("127.0.0.1", *port)).expect("connect for the wake floor");
            s.set_nodelay(true).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s
        };
        let (mut reader, mut writer) = (connect(), connect());
        let (woke_tx, woke_rx) = std::sync::mpsc::channel::<Instant>();
        let blpop = b"*3\r\n$5\r\nBLPOP\r\n$9\r\nperf:wake\r\n$1\r\n0\r\n";
        let popped = b"*2\r\n$9\r\nperf:wake\r\n$1\r\nx\r\n";
        let sleeper = std::thread::spawn(move || {
            for _ in 0..WAKES {
                reader.write_all(blpop).unwrap();
                let mut reply = [0u8; 26];
                reader.read_exact(&mut reply).expect("BLPOP reply");
                assert_eq!(&reply, popped);
                woke_tx.send(Instant::now()).unwrap();
            }
        });
        let mut times = Vec::with_capacity(WAKES);
        for _ in 0..WAKES {
            std::thread::sleep(HOLD);
            let sent = Instant::now();
            writer
                .write_all(b"*3\r\n$5\r\nLPUSH\r\n$9\r\nperf:wake\r\n$1\r\nx\r\n")
                .unwrap();
            let mut reply = [0u8; 4];
            writer.read_exact(&mut reply).expect("LPUSH reply");
            let woke = woke_rx.recv().expect("the reader woke");
            times.push(woke.duration_since(sent));
        }
        sleeper.join().expect("the sleeping reader");
        times.sort_unstable();
        Some((times[WAKES / 2], times[WAKES * 99 / 100]))
    }
}

/// `leasehold bench` with 50 workers on random keys, between two `redis-benchmark -c 50` runs of
/// `EVALSHA` of a one-`SET` script (the two rates are averaged, so drift hits both sides alike).
fn load(server: &RedisServer, duration: Duration) -> Value {
    let bin = std::env::var("LEASEHOLD_BIN").unwrap_or_else(|_| "target/release/leasehold".into());
    let script = "return redis.call('SET', KEYS[1], ARGV[1])";
    let reply = server.command(&[b"SCRIPT", b"LOAD", script.as_bytes()]);
    let sha = reply
        .lines()
        .find(|l| l.len() == 40 && l.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("SCRIPT LOAD answered {reply:?}"))
        .to_owned();
    let evalsha_before = redis_benchmark(server.port(), &sha);
    let url = server.url_with(&format!("pool_size={LOAD_WORKERS}"));
    let out = Command::new(&bin)
        .args(["bench", "--url", &url, "--json"])
        .args(["--workers", &LOAD_WORKERS.to_string()])
        .args(["--keys", &LOAD_KEYS.to_string()])
        .args(["--duration", &format!("{}s", duration.as_secs())])
        .output()
        .unwrap_or_else(|e| panic!("run {bin} (set LEASEHOLD_BIN): {e}"));
    assert!(
        out.status.success(),
        "{bin} bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bench: Value = serde_json::from_slice(&out.stdout).expect("leasehold bench --json");
    let evalsha_after = redis_benchmark(server.port(), &sha);
    let cycles = bench["cycles_per_sec"].as_f64().expect("cycles_per_sec");
    let evalsha = (evalsha_before + evalsha_after) / 2.0;
    println!(
        "load: leasehold bench {LOAD_WORKERS} workers, {LOAD_KEYS} keys: {cycles:.0} cycles/s; \
         redis-benchmark -c {LOAD_WORKERS} EVALSHA one SET: {evalsha_before:.0} then {evalsha_after:.0}/s"
    );
    json!({
        "workers": LOAD_WORKERS,
        "keys": LOAD_KEYS,
        "cycles_per_sec": cycles,
        "errors": bench["errors"],
        "evalsha_per_sec": evalsha,
        "evalsha_runs": [evalsha_before, evalsha_after],
    })
}

/// Requests per second of `redis-benchmark -c 50` running `EVALSHA sha 1 <random key> x`.
fn redis_benchmark(port: u16, sha: &str) -> f64 {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-c",
            &LOAD_WORKERS.to_string(),
            "-n",
            "200000",
            "-r",
            "1000000",
        ])
        .args(["--csv", "EVALSHA", sha, "1", "perf:rand:__rand_int__", "x"])
        .output()
        .unwrap_or_else(|e| panic!("run redis-benchmark: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "redis-benchmark failed: {text}");
    // --csv: a header line, then `"<command>","<rps>",...`.
    text.lines()
        .filter_map(|l| l.split(',').nth(1))
        .filter_map(|f| f.trim_matches('"').parse::<f64>().ok())
        .next()
        .unwrap_or_else(|| panic!("no rate in redis-benchmark's output: {text}"))
}
