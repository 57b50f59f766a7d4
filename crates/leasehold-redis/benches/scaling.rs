//! `cargo bench -p leasehold-redis --bench scaling`: how the server's work per operation grows with
//! what the server holds, judged on the server's own counters (`INFO commandstats`: the
//! microseconds Redis spent running each command, scripts with what they call), against servers
//! this bench starts on free loopback ports:
//!
//! - `keys_{1k,10k,100k,1m}`: an acquire and a release of a fresh key on a server holding that many
//!   other leases, beside the same on an empty server (the floor);
//! - `permits_{10,100,127,129,1000}`: a permit acquire + release on a semaphore of 65,535 that many
//!   others hold, beside one that 1 other holds (127 and 129: either side of the 128 members up to
//!   which Redis keeps a sorted set as a flat list);
//! - `waiters_{80,120,140,256,800}`: the server's work per handoff while that many waiters queue on one key
//!   (each takes the key, releases it at once and queues again), beside the same with 8 waiters;
//! - `memory`: `used_memory` per lease held (taken the ordinary way), and per permit held.
//!
//! Every row prints its figure beside its floor and the ratio, and is written to
//! `<criterion home>/scaling/redis.json`. Rounds alternate between figure and floor, and the ratio
//! is the median of the rounds' ratios, so the machine's drifting load cancels out.
//! `LEASEHOLD_SCALING_MAX_KEYS` caps the keys rows (default 1,000,000).

#[path = "../../../tests/support/paired.rs"]
mod paired;

use paired::median;

use leasehold_core::{Client, Config};
use leasehold_redis::RedisBackend;
use leasehold_testkit::{unique_key, RedisServer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(600);
/// Rounds per row, alternating figure and floor.
const ROUNDS: usize = 15;
/// Operations per round: enough that a round's counters are well above their microsecond grain.
const PER_ROUND: usize = 1_000;

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(RedisBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

fn used_memory(server: &RedisServer) -> f64 {
    server.number(&[b"INFO", b"memory"], "used_memory:")
}

/// One row: the median over rounds of the figure's and the floor's server µs per operation, and of
/// their ratio.
struct Row {
    name: String,
    figure_us: f64,
    floor_us: f64,
    ratio: f64,
    note: String,
}

impl Row {
    fn new(name: &str, pairs: &[(f64, f64)], note: String) -> Row {
        let row = Row {
            name: name.to_string(),
            figure_us: median(pairs.iter().map(|p| p.0).collect()),
            floor_us: median(pairs.iter().map(|p| p.1).collect()),
            ratio: median(pairs.iter().map(|p| p.0 / p.1).collect()),
            note,
        };
        println!(
            "scaling/redis/{}: {:.2} µs of server work beside a floor of {:.2} µs = {:.3}× ({}; median of {} rounds)",
            row.name,
            row.figure_us,
            row.floor_us,
            row.ratio,
            row.note,
            pairs.len()
        );
        row
    }

    fn json(&self) -> String {
        format!(
            "{{\"name\": \"{}\", \"figure_us\": {:.3}, \"floor_us\": {:.3}, \"ratio\": {:.4}, \"note\": \"{}\"}}",
            self.name, self.figure_us, self.floor_us, self.ratio, self.note
        )
    }
}

/// The server's µs (commandstats, reset first) per run of `op` over `n` runs.
fn server_us(server: &RedisServer, n: usize, mut op: impl FnMut()) -> f64 {
    server.reset_stats();
    for _ in 0..n {
        op();
    }
    server.busy_usec() / n as f64
}

/// Writes leases the way the lock script leaves them (a lock key with its TTL and a fence counter),
/// numbered `from..to`: taken one by one through the client, a million would take minutes here.
fn fill(server: &RedisServer, from: u64, to: u64) {
    const SCRIPT: &[u8] = b"for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do \
        redis.call('SET', 'leasehold:{scale-' .. i .. '}l:held', 'token', 'PX', 3600000) \
        redis.call('SET', 'leasehold:{scale-' .. i .. '}f:held', i, 'PX', 3600000) end return 1";
    let mut at = from;
    while at < to {
        let end = (at + 50_000).min(to);
        let reply = server.command(&[
            b"EVAL",
            SCRIPT,
            b"0",
            (at + 1).to_string().as_bytes(),
            end.to_string().as_bytes(),
        ]);
        assert!(reply.starts_with(":1"), "fill: {reply}");
        at = end;
    }
}

/// Acquire and release of fresh keys as separate figures: a round takes `PER_ROUND` fresh keys
/// (server µs per acquire), then releases them (per release).
fn acquire_release_us(server: &RedisServer, lock: &Client, label: &str) -> (f64, f64) {
    let prefix = unique_key(label);
    server.reset_stats();
    let held: Vec<_> = (0..PER_ROUND)
        .map(|i| lock.try_acquire(format!("{prefix}:{i}"), TTL).unwrap())
        .collect();
    let acquire = server.busy_usec() / PER_ROUND as f64;
    server.reset_stats();
    for lease in held {
        lease.release().unwrap();
    }
    (acquire, server.busy_usec() / PER_ROUND as f64)
}

/// The same shape with no lock library: `PER_ROUND` plain `SET NX PX` of fresh keys (server µs per
/// SET), then as many `DEL`s (per DEL), on one raw connection. Whatever grows here with the keys
/// held is the keyspace's own cost, which every lock on that server pays.
fn plain_set_del_us(server: &RedisServer, con: &mut redis::Connection, label: &str) -> (f64, f64) {
    let prefix = unique_key(label);
    server.reset_stats();
    for i in 0..PER_ROUND {
        let _: Option<String> = redis::cmd("SET")
            .arg(format!("{prefix}:{i}"))
            .arg("token")
            .arg("NX")
            .arg("PX")
            .arg(600_000)
            .query(con)
            .unwrap();
    }
    let set = server.busy_usec() / PER_ROUND as f64;
    server.reset_stats();
    for i in 0..PER_ROUND {
        let _: i64 = redis::cmd("DEL")
            .arg(format!("{prefix}:{i}"))
            .query(con)
            .unwrap();
    }
    (set, server.busy_usec() / PER_ROUND as f64)
}

fn raw(server: &RedisServer) -> redis::Connection {
    redis::Client::open(format!("redis://{}", server.addr()))
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("raw connection to {}: {e}", server.addr()))
}

fn keys_rows(rows: &mut Vec<Row>) {
    let max: u64 = std::env::var("LEASEHOLD_SCALING_MAX_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let (empty, full) = (RedisServer::start(), RedisServer::start());
    let (on_empty, on_full) = (client(&empty.url()), client(&full.url()));
    // Warm both (connections, loaded scripts).
    acquire_release_us(&empty, &on_empty, "scale-warm");
    acquire_release_us(&full, &on_full, "scale-warm");
    let (mut raw_empty, mut raw_full) = (raw(&empty), raw(&full));
    let mut held = 0;
    for (name, n) in [
        ("1k", 1_000u64),
        ("10k", 10_000),
        ("100k", 100_000),
        ("1m", 1_000_000),
    ] {
        if n > max {
            break;
        }
        fill(&full, held, n);
        held = n;
        let dbsize = full.number(&[b"DBSIZE"], ":");
        let (mut acq, mut rel, mut set, mut del) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let f = acquire_release_us(&full, &on_full, "scale-fresh");
            let e = acquire_release_us(&empty, &on_empty, "scale-fresh");
            acq.push((f.0, e.0));
            rel.push((f.1, e.1));
            let f = plain_set_del_us(&full, &mut raw_full, "scale-plain");
            let e = plain_set_del_us(&empty, &mut raw_empty, "scale-plain");
            set.push((f.0, e.0));
            del.push((f.1, e.1));
        }
        let note = format!("{n} other leases held ({dbsize} keys) vs none");
        rows.push(Row::new(
            &format!("keys_{name}/acquire"),
            &acq,
            note.clone(),
        ));
        rows.push(Row::new(
            &format!("keys_{name}/release"),
            &rel,
            note.clone(),
        ));
        rows.push(Row::new(
            &format!("keys_{name}/plain_set"),
            &set,
            format!("plain SET NX PX, no lock library; {note}"),
        ));
        rows.push(Row::new(
            &format!("keys_{name}/plain_del"),
            &del,
            format!("plain DEL, no lock library; {note}"),
        ));
    }
}

fn permits_rows(rows: &mut Vec<Row>) {
    let server = RedisServer::start();
    let lock = client(&server.url());
    let mut held = Vec::new();
    let floor_key = unique_key("scale-sem-floor");
    let _floor_holder = lock.try_acquire_permit(&floor_key, 65_535, TTL).unwrap();
    let cycle = |key: &str| {
        lock.try_acquire_permit(key, 65_535, TTL)
            .unwrap()
            .release()
            .unwrap();
    };
    for n in [10usize, 100, 127, 129, 1_000] {
        let key = unique_key(&format!("scale-sem-{n}"));
        held.clear();
        for _ in 0..n {
            held.push(lock.try_acquire_permit(&key, 65_535, TTL).unwrap());
        }
        let pairs: Vec<(f64, f64)> = (0..ROUNDS)
            .map(|_| {
                (
                    server_us(&server, PER_ROUND, || cycle(&key)),
                    server_us(&server, PER_ROUND, || cycle(&floor_key)),
                )
            })
            .collect();
        rows.push(Row::new(
            &format!("permits_{n}"),
            &pairs,
            format!("permit acquire + release, semaphore of 65535 with {n} held vs 1 held"),
        ));
    }
}

/// What `waiters` threads queued on one key cost the server per handoff over `secs`: each takes
/// the key, releases it at once and queues again, so the queue stays `waiters - 1` long. Returns the
/// server's commandstats µs per handoff, its process CPU µs per handoff, µs per script call, the
/// handoffs per second, script calls and `BLPOP`s per handoff, and the queue's median length and
/// the share of samples that found it a listpack.
fn handoff_round(server: &RedisServer, lock: &Arc<Client>, waiters: usize, secs: f64) -> [f64; 8] {
    let key = unique_key("scale-handoff");
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..waiters)
        .map(|_| {
            let (lock, key, stop, count) = (lock.clone(), key.clone(), stop.clone(), count.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let lease = lock
                        .acquire(&key, Duration::from_secs(30), Duration::from_secs(60))
                        .unwrap();
                    count.fetch_add(1, Ordering::Relaxed);
                    lease.release().unwrap();
                }
            })
        })
        .collect();
    // Until every waiter is queued and the heartbeats run at their steady rate.
    std::thread::sleep(Duration::from_millis(1_500));
    server.reset_stats();
    let (cpu0, n0, t0) = (
        server.cpu_usec(),
        count.load(Ordering::Relaxed),
        Instant::now(),
    );
    // The queue's length and encoding, sampled through the window: the key ends in `}q:<key>`.
    let found = server.command(&[
        b"SCAN",
        b"0",
        b"MATCH",
        format!("*}}q:{key}").as_bytes(),
        b"COUNT",
        b"100000",
    ]);
    let queue = found.lines().find(|l| l.contains("}q:")).map(str::to_owned);
    let (mut lengths, mut listpacks) = (Vec::new(), 0);
    for _ in 0..10 {
        std::thread::sleep(Duration::from_secs_f64(secs / 10.0));
        if let Some(q) = &queue {
            lengths.push(server.number(&[b"ZCARD", q.as_bytes()], ":"));
            if server
                .command(&[b"OBJECT", b"ENCODING", q.as_bytes()])
                .contains("listpack")
            {
                listpacks += 1;
            }
        }
    }
    let queue_len = if lengths.is_empty() {
        0.0
    } else {
        median(lengths)
    };
    let usec = server.busy_usec();
    let stats = server.command(&[b"INFO", b"commandstats"]);
    let (cpu, n, elapsed) = (
        server.cpu_usec() - cpu0,
        (count.load(Ordering::Relaxed) - n0) as f64,
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // Per command: its calls and µs per call (EVALSHA is every script: acquire attempts,
    // the waiters' heartbeats, releases).
    let field = |cmd: &str, f: &str| -> f64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:")))
            .and_then(|l| l.split(',').find_map(|p| p.strip_prefix(f)))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    [
        usec / n,
        cpu / n,
        field("evalsha", "usec_per_call="),
        n / elapsed,
        field("evalsha", "calls=") / n,
        field("blpop", "calls=") / n,
        queue_len,
        f64::from(listpacks) / 10.0,
    ]
}

fn waiters_rows(rows: &mut Vec<Row>) {
    let server = RedisServer::start();
    // One connection per waiter blocked in BLPOP, and some for the rest.
    let lock = Arc::new(client(&format!("{}?pool_size=1024", server.url())));
    let secs: f64 = std::env::var("LEASEHOLD_SCALING_HANDOFF_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.0);
    for n in [80usize, 120, 140, 256, 800] {
        let (mut work, mut cpu, mut script) = (Vec::new(), Vec::new(), Vec::new());
        let mut rates = (Vec::new(), Vec::new());
        let mut calls = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut queue = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let f = handoff_round(&server, &lock, n, secs);
            let e = handoff_round(&server, &lock, 8, secs);
            work.push((f[0], e[0]));
            cpu.push((f[1], e[1]));
            script.push((f[2], e[2]));
            rates.0.push(f[3]);
            rates.1.push(e[3]);
            calls.0.push(f[4]);
            calls.1.push(f[5]);
            calls.2.push(e[4]);
            calls.3.push(e[5]);
            queue.0.push(f[6]);
            queue.1.push(f[7]);
        }
        let note = format!(
            "{n} waiters on one key vs 8; {:.0} vs {:.0} handoffs/s; per handoff {:.2} vs {:.2} \
             scripts and {:.2} vs {:.2} BLPOPs; queue {:.0} long, a listpack in {:.0} % of samples",
            median(rates.0),
            median(rates.1),
            median(calls.0),
            median(calls.2),
            median(calls.1),
            median(calls.3),
            median(queue.0),
            median(queue.1) * 100.0
        );
        rows.push(Row::new(
            &format!("waiters_{n}/handoff"),
            &work,
            note.clone(),
        ));
        rows.push(Row::new(
            &format!("waiters_{n}/handoff_cpu"),
            &cpu,
            format!("server process CPU (INFO cpu) per handoff; {note}"),
        ));
        rows.push(Row::new(
            &format!("waiters_{n}/script_call"),
            &script,
            format!("µs per script call (EVALSHA usec_per_call); {note}"),
        ));
    }
}

/// `used_memory` per lease held, taken through the client, and per permit held.
fn memory(rows: &mut Vec<String>) {
    let server = RedisServer::start();
    let lock = client(&server.url());
    lock.try_acquire(unique_key("scale-mem-warm"), TTL)
        .unwrap()
        .release()
        .unwrap();
    const N: usize = 20_000;
    let before = used_memory(&server);
    let prefix = unique_key("scale-mem");
    let held: Vec<_> = (0..N)
        .map(|i| lock.try_acquire(format!("{prefix}:{i}"), TTL).unwrap())
        .collect();
    let per_lease = (used_memory(&server) - before) / N as f64;
    let before = used_memory(&server);
    let sem = unique_key("scale-mem-sem");
    let permits: Vec<_> = (0..N)
        .map(|_| lock.try_acquire_permit(&sem, 65_535, TTL).unwrap())
        .collect();
    let per_permit = (used_memory(&server) - before) / N as f64;
    println!(
        "scaling/redis/memory: {per_lease:.0} B per lease held, {per_permit:.0} B per permit held \
         (used_memory over {N} of each)"
    );
    rows.push(format!(
        "{{\"name\": \"memory\", \"held\": {N}, \"bytes_per_lease\": {per_lease:.1}, \"bytes_per_permit\": {per_permit:.1}}}"
    ));
    drop((held, permits));
}

fn main() {
    // `cargo bench` passes `--bench` and any filter; a filter picks the row groups to run.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |g: &str| filter.is_empty() || filter.iter().any(|f| g.contains(f.as_str()));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/redis: load average at start {}", load.trim());
    let mut rows = Vec::new();
    if want("keys") {
        keys_rows(&mut rows);
    }
    if want("permits") {
        permits_rows(&mut rows);
    }
    if want("waiters") {
        waiters_rows(&mut rows);
    }
    let mut json: Vec<String> = rows.iter().map(Row::json).collect();
    if want("memory") {
        memory(&mut json);
    }
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/redis: load average at end {}", load_end.trim());
    paired::save(
        "scaling",
        "redis.json",
        &format!(
            "{{\"load_start\": \"{}\", \"load_end\": \"{}\", \"rows\": [\n{}\n]}}\n",
            load.trim(),
            load_end.trim(),
            json.join(",\n")
        ),
    );
}
