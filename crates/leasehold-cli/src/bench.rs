//! `leasehold bench`: worker threads take and release leases on a set of keys for a while, then the
//! run is summed up: lock cycles per second, acquire and release latency, handoff latency, errors.
//!
//! Handoff latency is the time from the moment a holder starts releasing a key to the moment the next
//! holder's acquire of that key returns, counted only when that next holder was already waiting (its
//! acquire began before the release did). It is measured inside this one process: each key has a
//! shared "release started at" timestamp on one monotonic clock.
//!
//! Latencies go into histograms shared by the workers (see `latency`): percentiles within 1 %, the
//! maximum exact, and memory that stays fixed however long the run.

use crate::cli::BenchArgs;
use crate::exit::{self, Failure};
use crate::latency::{self, Histogram, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use leasehold::{Client, Error, ErrorKind};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// No release of this key has started yet.
const NEVER: u64 = u64::MAX;

/// After a backend error a worker pauses this long, so a dead backend is not hammered in a tight loop.
const ERROR_PAUSE: Duration = Duration::from_millis(10);

struct Shared {
    start: Instant,
    deadline: Instant,
    keys: Vec<Vec<u8>>,
    /// Per key: when (ns after `start`) its last release began.
    released_at: Vec<AtomicU64>,
    cycles: AtomicU64,
    acquire: Histogram,
    release: Histogram,
    handoff: Histogram,
    errors: [AtomicU64; ErrorKind::ALL.len()],
}

impl Shared {
    fn now_ns(&self) -> u64 {
        latency::nanos(self.start.elapsed())
    }

    fn error(&self, e: &Error) {
        if let Some(i) = ErrorKind::ALL.iter().position(|k| *k == e.kind()) {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub backend: String,
    pub url: String,
    pub workers: u32,
    pub keys: u32,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub hold_ms: u64,
    pub elapsed_s: f64,
    /// Completed acquire + release pairs.
    pub cycles: u64,
    pub cycles_per_sec: f64,
    pub acquire: Option<Summary>,
    pub release: Option<Summary>,
    pub handoff: Option<Summary>,
    /// Failed calls by error kind (`not_acquired` only counts waits that ran out before the end).
    pub errors: serde_json::Map<String, serde_json::Value>,
}

pub fn bench(client: &Client, described_url: &str, args: &BenchArgs) -> Result<u8, Failure> {
    let start = Instant::now();
    let shared = Shared {
        start,
        deadline: start.checked_add(args.duration).unwrap_or(start),
        keys: (0..args.keys)
            .map(|i| format!("{}{i}", args.key_prefix).into_bytes())
            .collect(),
        released_at: (0..args.keys).map(|_| AtomicU64::new(NEVER)).collect(),
        cycles: AtomicU64::new(0),
        acquire: Histogram::default(),
        release: Histogram::default(),
        handoff: Histogram::default(),
        errors: Default::default(),
    };
    // Validate once up front, so a bad key prefix or TTL is one usage error, not one per cycle.
    if let Some(key) = shared.keys.last() {
        leasehold::Key::new(key)?;
    }
    leasehold::Ttl::new(args.ttl)?;

    let progress = progress_bar(args);
    let joined: Vec<std::thread::Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.workers)
            .map(|i| {
                let shared = &shared;
                let client = client.clone();
                scope.spawn(move || worker(i, &client, shared, args))
            })
            .collect();
        while Instant::now() < shared.deadline && !handles.iter().all(|h| h.is_finished()) {
            let elapsed = start.elapsed();
            progress.set_position(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
            let cycles = shared.cycles.load(Ordering::Relaxed);
            let rate = cycles as f64 / elapsed.as_secs_f64().max(1e-9);
            progress.set_message(format!(
                "{:.1}s/{:.1}s  {cycles} cycles, {rate:.0}/s",
                elapsed.as_secs_f64(),
                args.duration.as_secs_f64()
            ));
            std::thread::sleep(Duration::from_millis(100));
        }
        handles.into_iter().map(|h| h.join()).collect()
    });
    progress.finish_and_clear();
    let elapsed = start.elapsed();
    if joined.iter().any(|r| r.is_err()) {
        return Err(Failure::new(
            exit::INTERNAL,
            format!(
                "internal error: a bench worker panicked (a bug in leasehold): {}",
                crate::last_panic()
            ),
        ));
    }

    let cycles = shared.cycles.load(Ordering::Relaxed);
    let report = Report {
        backend: client.backend_name().to_owned(),
        url: described_url.to_owned(),
        workers: args.workers,
        keys: args.keys,
        ttl_ms: millis(args.ttl),
        wait_ms: millis(args.wait),
        hold_ms: millis(args.hold),
        elapsed_s: elapsed.as_secs_f64(),
        cycles,
        cycles_per_sec: cycles as f64 / elapsed.as_secs_f64().max(1e-9),
        acquire: shared.acquire.summary(),
        release: shared.release.summary(),
        handoff: shared.handoff.summary(),
        errors: ErrorKind::ALL
            .iter()
            .zip(&shared.errors)
            .map(|(k, n)| (k.as_str().to_owned(), n.load(Ordering::Relaxed).into()))
            .collect(),
    };
    if args.json {
        let text = serde_json::to_string(&report)
            .map_err(|e| Failure::new(exit::INTERNAL, format!("cannot encode JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", text(&report));
    }
    Ok(0)
}

fn worker(index: u32, client: &Client, shared: &Shared, args: &BenchArgs) {
    // Seeded by the worker's index, so runs spread workers over keys the same way.
    let mut rng = fastrand::Rng::with_seed(u64::from(index));
    let keys = shared.keys.len();
    loop {
        let now = Instant::now();
        let Some(left) = shared
            .deadline
            .checked_duration_since(now)
            .filter(|d| !d.is_zero())
        else {
            break;
        };
        let k = if keys == 1 { 0 } else { rng.usize(..keys) };
        let t0 = shared.now_ns();
        match client.acquire(&shared.keys[k], args.ttl, args.wait.min(left)) {
            Ok(lease) => {
                let t1 = shared.now_ns();
                shared.acquire.record(since(t0, t1));
                let released = shared.released_at[k].load(Ordering::SeqCst);
                if released != NEVER && released >= t0 {
                    shared.handoff.record(since(released, t1));
                }
                if !args.hold.is_zero() {
                    std::thread::sleep(args.hold);
                }
                let t2 = shared.now_ns();
                // Stored before the release, while we still hold the key: the next holder reads it
                // only after it has the key, so it always sees this value.
                shared.released_at[k].store(t2, Ordering::SeqCst);
                match lease.release() {
                    Ok(()) => {
                        shared.release.record(since(t2, shared.now_ns()));
                        shared.cycles.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        shared.error(&e);
                        std::thread::sleep(ERROR_PAUSE);
                    }
                }
            }
            Err(e @ Error::NotAcquired(_)) => {
                // A wait cut short by the end of the run is not a failure.
                if Instant::now() < shared.deadline {
                    shared.error(&e);
                }
            }
            Err(e) => {
                shared.error(&e);
                std::thread::sleep(ERROR_PAUSE);
            }
        }
    }
}

/// The time from `from` to `to` (ns after the start), zero if the clock readings crossed.
fn since(from: u64, to: u64) -> Duration {
    Duration::from_nanos(to.saturating_sub(from))
}

fn progress_bar(args: &BenchArgs) -> ProgressBar {
    if args.json {
        return ProgressBar::hidden();
    }
    // Draws to stderr, and not at all when stderr is not a terminal.
    let bar = ProgressBar::new(millis(args.duration));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {wide_bar}") {
        bar.set_style(style);
    }
    bar
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn text(r: &Report) -> String {
    let line = |name: &str, s: &Option<Summary>, none: &str| match s {
        Some(s) => format!(
            "{name:<9}p50 {:>9}  p90 {:>9}  p99 {:>9}  max {:>9}  (n={})\n",
            latency::human(s.p50_us),
            latency::human(s.p90_us),
            latency::human(s.p99_us),
            latency::human(s.max_us),
            s.count
        ),
        None => format!("{name:<9}{none}\n"),
    };
    let errors: Vec<String> = r
        .errors
        .iter()
        .filter(|(_, n)| n.as_u64().unwrap_or(0) > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let mut out = format!(
        "leasehold bench: {} ({}), {} worker{}, {} key{}, {:.1}s, ttl {}ms, wait {}ms, hold {}ms\n",
        r.backend,
        r.url,
        r.workers,
        if r.workers == 1 { "" } else { "s" },
        r.keys,
        if r.keys == 1 { "" } else { "s" },
        r.elapsed_s,
        r.ttl_ms,
        r.wait_ms,
        r.hold_ms
    );
    out.push_str(&format!(
        "cycles:  {} ({:.0} lock cycles/s)\n",
        r.cycles, r.cycles_per_sec
    ));
    out.push_str(&line("acquire:", &r.acquire, "no successful acquire"));
    out.push_str(&line("release:", &r.release, "no successful release"));
    out.push_str(&line(
        "handoff:",
        &r.handoff,
        "none measured (no worker waited for a key another one released)",
    ));
    out.push_str(&format!(
        "errors:  {}\n",
        if errors.is_empty() {
            "none".to_owned()
        } else {
            errors.join(", ")
        }
    ));
    out
}
