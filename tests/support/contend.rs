//! Several OS processes contending for one key: the workers, and the analysis of what they recorded.
//! Shared by the fairness test (tests/fairness.rs) and the handoff benchmark (examples/handoff.rs), which
//! both re-run their own executable as the workers.
//!
//! Timestamps are CLOCK_MONOTONIC nanoseconds, which all processes on one Linux host share, so one
//! process's release can be compared with another's acquisition.

#![allow(dead_code)]

use leasehold_testkit::processes::{check_sections, monotonic_ns as now_ns, Section};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a worker waits for the key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Waiting {
    /// `client.acquire(key, ttl, wait)`: the backend's own waiting.
    Native,
    /// try_acquire, then sleep this long ± 10 % and try again: Symfony Lock's default is 100 ms.
    Poll(Duration),
}

/// One acquisition: when the worker started waiting (t0), got the key (t1), started releasing (t2),
/// and finished releasing (t3), with the fence it was given.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    pub worker: usize,
    pub t0: u64,
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
    pub fence: u64,
}

const ENV: &str = "LEASEHOLD_CONTEND";

/// In a worker process (started by [`run`]), does the work and returns true; elsewhere returns false.
pub fn worker_main() -> bool {
    let Ok(spec) = std::env::var(ENV) else {
        return false;
    };
    // url \t key \t worker \t duration_ms \t hold_us \t poll_ms (0 = native)
    let parts: Vec<&str> = spec.split('\t').collect();
    let [url, key, worker, duration_ms, hold_us, poll_ms] = parts[..] else {
        panic!("bad {ENV}");
    };
    let worker: usize = worker.parse().unwrap();
    let duration = Duration::from_millis(duration_ms.parse().unwrap());
    let hold = Duration::from_micros(hold_us.parse().unwrap());
    let poll: u64 = poll_ms.parse().unwrap();
    let waiting = if poll == 0 {
        Waiting::Native
    } else {
        Waiting::Poll(Duration::from_millis(poll))
    };
    let client = leasehold::connect(url).expect("worker connects");
    let ttl = Duration::from_secs(10);
    let end = Instant::now() + duration;
    let mut rng = now_ns() | 1;
    // Printed only at the end: a worker blocked writing to a full pipe (the parent reads the workers
    // one after another) would stop contending and skew everything.
    let mut lines = Vec::new();
    'work: while Instant::now() < end {
        let t0 = now_ns();
        let lease = match waiting {
            Waiting::Native => {
                match client.acquire(key, ttl, end.saturating_duration_since(Instant::now())) {
                    Ok(l) => l,
                    Err(leasehold::Error::NotAcquired(_)) => break 'work,
                    Err(e) => panic!("acquire: {e}"),
                }
            }
            Waiting::Poll(every) => loop {
                match client.try_acquire(key, ttl) {
                    Ok(l) => break l,
                    Err(leasehold::Error::NotAcquired(_)) if Instant::now() < end => {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let tenth = every.as_micros() as u64 / 10;
                        let jitter = rng % (2 * tenth + 1);
                        std::thread::sleep(
                            every - Duration::from_micros(tenth) + Duration::from_micros(jitter),
                        );
                    }
                    Err(leasehold::Error::NotAcquired(_)) => break 'work,
                    Err(e) => panic!("try_acquire: {e}"),
                }
            },
        };
        let t1 = now_ns();
        if !hold.is_zero() {
            std::thread::sleep(hold);
        }
        let fence = lease.fence();
        let t2 = now_ns();
        lease.release().expect("release");
        let t3 = now_ns();
        lines.push(format!("R {worker} {t0} {t1} {t2} {t3} {fence}"));
    }
    println!("{}", lines.join("\n"));
    true
}

/// Starts `workers` processes of `exe args…` contending for `key` on `url` for `duration`, and collects
/// their records.
#[allow(clippy::too_many_arguments)]
pub fn run(
    exe: &std::path::Path,
    args: &[&str],
    url: &str,
    key: &str,
    workers: usize,
    duration: Duration,
    hold: Duration,
    waiting: Waiting,
) -> Vec<Record> {
    let poll_ms = match waiting {
        Waiting::Native => 0,
        Waiting::Poll(d) => d.as_millis().max(1) as u64,
    };
    let children: Vec<_> = (0..workers)
        .map(|w| {
            let spec = format!(
                "{url}\t{key}\t{w}\t{}\t{}\t{poll_ms}",
                duration.as_millis(),
                hold.as_micros()
            );
            Command::new(exe)
                .args(args)
                .env(ENV, spec)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut records = Vec::new();
    for mut child in children {
        let out = child.stdout.take().expect("worker stdout");
        for line in BufReader::new(out).lines() {
            let line = line.expect("worker output");
            let Some(rest) = line.strip_prefix("R ") else {
                continue;
            };
            let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
            records.push(Record {
                worker: f[0] as usize,
                t0: f[1],
                t1: f[2],
                t2: f[3],
                t3: f[4],
                fence: f[5],
            });
        }
        assert!(
            child.wait().expect("worker exit").success(),
            "a worker failed"
        );
    }
    records.sort_by_key(|r| r.t1);
    records
}

/// What the records show.
#[derive(Debug)]
pub struct Report {
    pub acquisitions: usize,
    pub per_worker: Vec<usize>,
    pub overlaps: usize,
    pub fence_regressions: usize,
    /// Holder's release started → next (waiting) holder got the key.
    pub handoff: Percentiles,
    /// Time each acquisition waited.
    pub wait: Percentiles,
    pub cycles_per_sec: f64,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Percentiles {
    pub n: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Percentiles {
    pub fn of(mut ns: Vec<u64>) -> Percentiles {
        if ns.is_empty() {
            return Percentiles::default();
        }
        ns.sort_unstable();
        let at = |q: f64| Duration::from_nanos(ns[((ns.len() - 1) as f64 * q).round() as usize]);
        Percentiles {
            n: ns.len(),
            p50: at(0.5),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

pub fn analyze(records: &[Record], workers: usize, duration: Duration) -> Report {
    let mut per_worker = vec![0; workers];
    let mut handoffs = Vec::new();
    for r in records {
        per_worker[r.worker] += 1;
    }
    // Held from getting the key (t1) until starting to release it (t2).
    let sections: Vec<Section> = records
        .iter()
        .map(|r| Section {
            enter: r.t1,
            exit: r.t2,
            fence: r.fence,
            who: r.worker.to_string(),
        })
        .collect();
    let check = check_sections(&sections);
    for pair in records.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        // A handoff only where the next holder was already waiting when the previous one let go.
        if next.t0 < prev.t2 {
            handoffs.push(next.t1.saturating_sub(prev.t2));
        }
    }
    Report {
        acquisitions: records.len(),
        per_worker,
        overlaps: check.overlaps,
        fence_regressions: check.fence_out_of_order,
        handoff: Percentiles::of(handoffs),
        wait: Percentiles::of(records.iter().map(|r| r.t1 - r.t0).collect()),
        cycles_per_sec: records.len() as f64 / duration.as_secs_f64(),
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}
