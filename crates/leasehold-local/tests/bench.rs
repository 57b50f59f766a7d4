//! Numbers, printed, never asserted: an acquire+release cycle on a key whose record exists (taken
//! over and over) next to one on a fresh key each time (its record created, then deleted on release),
//! in alternating rounds so drift in machine load hits both alike; the figures are medians of the
//! rounds. The floor of what a fresh key adds is measured alongside: creating a file, writing one
//! record into it and deleting it (the metadata operations that keeping no state behind costs). Run with `cargo test -p leasehold-local --release --test bench -- --ignored --nocapture`
//! (`LEASEHOLD_BENCH_DIR=/dev/shm/x` to measure another file system than the temp dir's).

use leasehold_core::{Client, Config};
use leasehold_local::LocalBackend;
use leasehold_testkit::unique_key;
use std::time::{Duration, Instant};

const ROUNDS: usize = 15;
const CYCLES: u32 = 1_000;
const TTL: Duration = Duration::from_secs(10);

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
#[ignore = "benchmark: prints numbers, run on demand"]
fn bench_local() {
    let dir = match std::env::var_os("LEASEHOLD_BENCH_DIR") {
        Some(d) => tempfile::Builder::new()
            .prefix("leasehold-bench-")
            .tempdir_in(d),
        None => tempfile::Builder::new()
            .prefix("leasehold-bench-")
            .tempdir(),
    }
    .expect("temp dir");
    let url = format!("file://{}", dir.path().display());
    let client = Client::new(LocalBackend::open(&Config::parse(&url).unwrap()).unwrap());
    let known = unique_key("bench-known");
    let fresh_prefix = unique_key("bench-fresh");
    let mut n = 0u64;
    let mut fresh_key = || {
        n += 1;
        format!("{fresh_prefix}-{n}")
    };
    let cycle = |key: &str| client.try_acquire(key, TTL).unwrap().release().unwrap();
    for _ in 0..200 {
        cycle(&known);
        cycle(&fresh_key());
    }
    let (mut k, mut f, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let floor_dir = dir.path().join("floor");
    std::fs::create_dir(&floor_dir).unwrap();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for i in 0..CYCLES {
            use std::os::unix::fs::FileExt;
            let path = floor_dir.join(format!("f-{i}"));
            let file = std::fs::File::create(&path).unwrap();
            file.write_all_at(&[1u8; 96], 0).unwrap();
            drop(file);
            std::fs::remove_file(&path).unwrap();
        }
        c.push(start.elapsed() / CYCLES);
        let start = Instant::now();
        for _ in 0..CYCLES {
            cycle(&known);
        }
        k.push(start.elapsed() / CYCLES);
        let keys: Vec<String> = (0..CYCLES).map(|_| fresh_key()).collect();
        let start = Instant::now();
        for key in &keys {
            cycle(key);
        }
        f.push(start.elapsed() / CYCLES);
    }
    let (k, f, c) = (median(k), median(f), median(c));
    std::fs::remove_dir(&floor_dir).unwrap();
    let left = std::fs::read_dir(dir.path()).unwrap().count();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "local ({}): known key {:.2} µs/cycle, fresh key {:.2} µs/cycle, fresh ÷ known = {:.2}; \
         floor: create+write+unlink {:.2} µs, so a fresh key adds {:.2} × that floor \
         ({left} files left in the directory)",
        dir.path().display(),
        us(k),
        us(f),
        f.as_secs_f64() / k.as_secs_f64(),
        us(c),
        (f.as_secs_f64() - k.as_secs_f64()) / c.as_secs_f64(),
    );
}
