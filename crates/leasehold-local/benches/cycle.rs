//! `cargo bench -p leasehold-local`: the uncontended lock cycle (try_acquire + release, one thread) on a
//! key never used before (`local/fresh`: its record is created), timed in alternation with the same
//! cycle on a key whose record exists, in a private directory this bench makes.
//!
//! `target/criterion/local/fresh/new/estimates.json` is the figure, `paired.json` beside it the
//! known-key cycle and the ratio (../leasehold-testkit/bench/paired.rs, scripts/bench.sh).

#[path = "../../leasehold-testkit/bench/paired.rs"]
mod paired;

use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_core::{Client, Config};
use leasehold_local::LocalBackend;
use leasehold_testkit::TempDir;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);
const SAMPLES: usize = 20;

fn local(c: &mut Criterion) {
    let dir = TempDir::new("bench-local");
    let url = dir.file_url();
    let config = Config::parse(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let lock =
        Client::new(LocalBackend::open(&config).unwrap_or_else(|e| panic!("open {url}: {e}")));

    let mut i = 0u64;
    let fresh = || {
        i += 1;
        let key = format!("bench:fresh:{i}");
        lock.try_acquire(&key, TTL).unwrap().release().unwrap();
    };
    // Formatted like the fresh key, so the two differ only in the record's existence.
    let known_key = |n: u64| format!("bench:known:{n}");
    lock.try_acquire(known_key(0), TTL)
        .unwrap()
        .release()
        .unwrap();
    let known = || {
        let key = known_key(std::hint::black_box(0));
        lock.try_acquire(&key, TTL).unwrap().release().unwrap();
    };
    let mut g = c.benchmark_group("local");
    paired::bench(&mut g, "local", "fresh", SAMPLES, fresh, known);
    g.finish();
}

criterion_group! {
    name = benches;
    config = paired::config(SAMPLES);
    targets = local
}
criterion_main!(benches);
