//! Measurements of the local backend, printed, never asserted:
//!
//! ```text
//! cargo run --release -p leasehold-local --example local_bench [-- --fair-secs 30 --procs 8 --hold-us 0]
//! ```
//!
//! 1. uncontended `try_acquire` + `release` cycles per second (one thread), on one key and on a fresh
//!    key every cycle;
//!    and per kind (exclusive, shared, permit of 3) on a known key, p50 and p99 (`--only 5` alone);
//! 2. handoff latency between two threads: holder's release → waiter's `acquire` returns;
//! 3. cycles per second with 16 threads contending for one key;
//! 4. fairness: N processes contending for one key; every acquisition's wait, per process and overall.

use leasehold_core::{Client, Config};
use leasehold_local::LocalBackend;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn client(url: &str) -> Client {
    Client::new(LocalBackend::open(&Config::parse(url).expect("url")).expect("open"))
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--worker") {
        return worker(&args[i + 1], arg("--secs", 5), arg("--hold-us", 0));
    }
    let dir = std::env::temp_dir().join(format!("leasehold-bench-{}", std::process::id()));
    let url = format!("file://{}", dir.display());
    let c = client(&url);

    let only = arg("--only", 0);
    let run = |part: u64| only == 0 || only == part;

    // 1. uncontended cycles
    let n = if run(1) { 20_000 } else { 1 };
    let start = Instant::now();
    for _ in 0..n {
        c.try_acquire("bench:solo", LONG)
            .expect("acquire")
            .release()
            .expect("release");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "uncontended try_acquire+release: {:.0} cycles/s ({:.1} µs/cycle)",
        n as f64 / secs,
        secs * 1e6 / n as f64
    );

    // 1b. the same on a fresh key every cycle (a job id per lock)
    let start = Instant::now();
    for i in 0..n {
        c.try_acquire(format!("bench:fresh:{i}"), LONG)
            .expect("acquire")
            .release()
            .expect("release");
    }
    let secs = start.elapsed().as_secs_f64();
    let left = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    println!(
        "fresh-key try_acquire+release: {:.0} cycles/s ({:.1} µs/cycle; {left} files left in the directory)",
        n as f64 / secs,
        secs * 1e6 / n as f64
    );

    // 1c. per kind, interleaved so every kind sees the same machine: exclusive, shared and permit
    // try_acquire+release on a known key, µs per cycle
    let per_kind = if run(1) || run(5) { 20_000 } else { 1 };
    let mut times: [Vec<Duration>; 3] = Default::default();
    for _ in 0..per_kind {
        for (i, t) in times.iter_mut().enumerate() {
            let start = Instant::now();
            let lease = match i {
                0 => c.try_acquire("bench:kind", LONG),
                1 => c.try_acquire_shared("bench:kind", LONG),
                _ => c.try_acquire_permit("bench:kind", 3, LONG),
            };
            lease.expect("acquire").release().expect("release");
            t.push(start.elapsed());
        }
    }
    for (name, t) in ["exclusive", "shared", "permit"]
        .iter()
        .zip(times.iter_mut())
    {
        t.sort();
        println!(
            "{name:>9} try_acquire+release ({per_kind} cycles): p50 {:.1} µs  p99 {:.1} µs",
            pct(t, 0.5).as_secs_f64() * 1e6,
            pct(t, 0.99).as_secs_f64() * 1e6
        );
    }

    // 2. handoff latency between two threads
    let rounds = if run(2) {
        arg("--rounds", 500) as usize
    } else {
        1
    };
    let mut lat = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let lease = c.try_acquire("bench:handoff", LONG).expect("holder");
        let barrier = Arc::new(Barrier::new(2));
        let (c2, b2) = (c.clone(), barrier.clone());
        let waiter = std::thread::spawn(move || {
            b2.wait();
            let l = c2.acquire("bench:handoff", LONG, LONG).expect("waiter");
            let got = Instant::now();
            l.release().expect("release");
            got
        });
        barrier.wait();
        std::thread::sleep(Duration::from_millis(3)); // let the waiter queue and block
        let released = Instant::now();
        lease.release().expect("release");
        let got = waiter.join().expect("waiter thread");
        lat.push(got.saturating_duration_since(released));
    }
    lat.sort();
    println!(
        "handoff between 2 threads ({rounds} rounds): p50 {:?}  p99 {:?}  max {:?}",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );

    // 3. 16 contending threads
    let (threads, cycles) = (16, if run(3) { 300 } else { 1 });
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || {
                for _ in 0..cycles {
                    c.acquire("bench:contended", LONG, LONG)
                        .expect("acquire")
                        .release()
                        .expect("release");
                }
            })
        })
        .collect();
    for h in hs {
        h.join().expect("thread");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{threads} contending threads: {:.0} cycles/s",
        (threads * cycles) as f64 / secs
    );

    // 4. fairness across processes
    let procs = if run(4) { arg("--procs", 8) } else { 0 };
    let fair_secs = arg("--fair-secs", 5);
    let hold_us = arg("--hold-us", 0);
    let exe = std::env::current_exe().expect("own path");
    let children: Vec<_> = (0..procs)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "--worker",
                    &url,
                    "--secs",
                    &fair_secs.to_string(),
                    "--hold-us",
                    &hold_us.to_string(),
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut all = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("worker");
        let waits: Vec<Duration> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .map(Duration::from_nanos)
            .collect();
        let mut sorted = waits.clone();
        sorted.sort();
        println!(
            "  process {i}: {} acquisitions, median wait {:?}, longest {:?}",
            sorted.len(),
            pct(&sorted, 0.5),
            pct(&sorted, 1.0)
        );
        all.extend(waits);
    }
    all.sort();
    let (median, longest) = (pct(&all, 0.5), pct(&all, 1.0));
    let over = all.iter().filter(|w| **w > median * 10).count();
    println!(
        "fairness, {procs} processes for {fair_secs} s (hold {hold_us} µs): {} acquisitions, median wait {:?}, p99 {:?}, longest {:?} ({:.1}x median; {over} waits above 10x median)",
        all.len(),
        median,
        pct(&all, 0.99),
        longest,
        longest.as_secs_f64() / median.as_secs_f64().max(1e-9)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn worker(url: &str, secs: u64, hold_us: u64) {
    let c = client(url);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut out = String::new();
    while Instant::now() < end {
        let start = Instant::now();
        let lease = c.acquire("bench:fair", LONG, LONG).expect("acquire");
        out.push_str(&format!("{} ", start.elapsed().as_nanos()));
        if hold_us > 0 {
            std::thread::sleep(Duration::from_micros(hold_us));
        }
        lease.release().expect("release");
    }
    println!("{out}");
}
