//! A figure timed in alternation with its floor, shared by the backend crates' benches (each includes
//! this file by path).
//!
//! The machine these run on is shared, and its load drifts within seconds: a floor measured by its own
//! bench a few seconds away from its figure can be off by half. So each of criterion's samples (10 to
//! 200 ms) runs the figure its number of times, then the floor as many times; criterion gets the
//! figure's time (its estimates.json is the figure), and `<criterion home>/<group>/<name>/paired.json`
//! the floor per operation and the median over samples of figure ÷ floor, in which slower drift cancels
//! out. (Alternating single operations was worse: each one then woke a server process gone idle, which
//! on a loaded machine waits for a core.)

#![allow(dead_code)]

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A cycle (try_acquire + release with `ttl`) on a key never used before, as a worker taking job
/// ids sees it.
pub fn fresh_cycle<'a>(
    client: &'a leasehold_core::Client,
    label: &str,
    ttl: Duration,
) -> impl FnMut() + 'a {
    let prefix = leasehold_testkit::unique_key(label);
    let mut i = 0u64;
    move || {
        i += 1;
        let key = format!("{prefix}:{i}");
        client.try_acquire(&key, ttl).unwrap().release().unwrap();
    }
}

/// Short runs: the machine is shared, and the suite as a whole must stay within minutes.
pub fn config(samples: usize) -> Criterion {
    Criterion::default()
        .sample_size(samples)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
}

/// Where criterion writes: `CRITERION_HOME` (scripts/bench.sh sets it), else the workspace's target.
/// Writes `text` to `<criterion home>/<dir>/<file>` (`dir` like `redis/cycle`), where
/// `scripts/bench.sh`'s report reads what a bench measured beside criterion's own estimates.
pub fn save(dir: &str, file: &str, text: &str) {
    let dir = criterion_home().join(dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

pub fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("criterion")
}

/// The middle value (the upper of the two middle ones for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Benchmarks `group/name` = `figure`, each iteration followed by one `floor`.
pub fn bench(
    g: &mut BenchmarkGroup<'_, WallTime>,
    group: &str,
    name: &str,
    sample_size: usize,
    mut figure: impl FnMut(),
    mut floor: impl FnMut(),
) {
    // (figure, floor, iterations) per call; criterion's last `sample_size` calls are the samples.
    let mut calls: Vec<(Duration, Duration, u64)> = Vec::new();
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t0 = Instant::now();
            for _ in 0..iters {
                figure();
            }
            let fig = t0.elapsed();
            let t1 = Instant::now();
            for _ in 0..iters {
                floor();
            }
            calls.push((fig, t1.elapsed(), iters));
            fig
        })
    });
    let samples = &calls[calls.len().saturating_sub(sample_size)..];
    if samples.is_empty() {
        return; // filtered out on the command line
    }
    let per_op = |d: Duration, n: u64| d.as_secs_f64() * 1e9 / n as f64;
    let ratio = median(
        samples
            .iter()
            .map(|(f, l, _)| f.as_secs_f64() / l.as_secs_f64())
            .collect(),
    );
    let floor_ns = median(samples.iter().map(|(_, l, n)| per_op(*l, *n)).collect());
    let figure_ns = median(samples.iter().map(|(f, _, n)| per_op(*f, *n)).collect());
    let json = format!(
        "{{\"figure_ns\": {figure_ns:.1}, \"floor_ns\": {floor_ns:.1}, \"ratio\": {ratio:.4}, \"samples\": {}}}\n",
        samples.len()
    );
    save(&format!("{group}/{name}"), "paired.json", &json);
    println!("{group}/{name}: {figure_ns:.0} ns beside a floor of {floor_ns:.0} ns = {ratio:.2}× (median of {} paired samples)", samples.len());
}
