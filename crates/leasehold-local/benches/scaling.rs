//! `cargo bench -p leasehold-local --bench scaling`: how the work of an acquire and of a release of a
//! fresh key grows with the leases held in the same directory, on a tmpfs (/dev/shm, the file system
//! of the default directory /run/lock). Local files have no server: the work is this thread's CPU
//! time, user and system (`CLOCK_THREAD_CPUTIME_ID`), the kernel's file system work included.
//!
//! - `keys_{1k,10k,100k}`: a directory holding that many other leases beside an empty one (the
//!   floor), rounds alternated, the ratio the median of the rounds' ratios;
//! - `memory`: the file system blocks of the records per lease held.
//!
//! A million would be 4 GB of tmpfs (a record takes a 4 KiB page) on a machine shared with other
//! work, so the rows stop at 100,000. Written to `<criterion home>/scaling/local.json`.

#[path = "../../../tests/support/paired.rs"]
mod paired;

use paired::median;

use leasehold_core::{Client, Config, Lease};
use leasehold_local::LocalBackend;
use leasehold_testkit::TempDir;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(3_600);
const ROUNDS: usize = 15;
const PER_ROUND: usize = 1_000;

fn open(dir: &TempDir) -> Client {
    let url = dir.file_url();
    let config = Config::parse(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(LocalBackend::open(&config).unwrap_or_else(|e| panic!("open {url}: {e}")))
}

fn thread_cpu_us() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec on this stack frame.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) },
        0
    );
    t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
}

/// CPU µs per acquire of `PER_ROUND` fresh keys, then per release of them.
fn acquire_release_us(lock: &Client, round: &mut u64) -> (f64, f64) {
    *round += 1;
    let t0 = thread_cpu_us();
    let held: Vec<Lease> = (0..PER_ROUND)
        .map(|i| lock.try_acquire(format!("fresh:{round}:{i}"), TTL).unwrap())
        .collect();
    let t1 = thread_cpu_us();
    for lease in held {
        lease.release().unwrap();
    }
    let t2 = thread_cpu_us();
    let n = PER_ROUND as f64;
    ((t1 - t0) / n, (t2 - t1) / n)
}

/// File system bytes (allocated blocks) of the files in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

fn main() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/local: load average at start {}", load.trim());
    let (empty_dir, full_dir) = (
        TempDir::new_in(Path::new("/dev/shm"), "scale-local-empty"),
        TempDir::new_in(Path::new("/dev/shm"), "scale-local-full"),
    );
    let (empty, full) = (open(&empty_dir), open(&full_dir));
    let (mut round_e, mut round_f) = (0, 0);
    acquire_release_us(&empty, &mut round_e);
    acquire_release_us(&full, &mut round_f);
    let mut held: Vec<Lease> = Vec::new();
    let mut json = Vec::new();
    for (name, n) in [("1k", 1_000usize), ("10k", 10_000), ("100k", 100_000)] {
        while held.len() < n {
            held.push(
                full.try_acquire(format!("held:{}", held.len()), TTL)
                    .unwrap(),
            );
        }
        let (mut acq, mut rel) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let f = acquire_release_us(&full, &mut round_f);
            let e = acquire_release_us(&empty, &mut round_e);
            acq.push((f.0, e.0));
            rel.push((f.1, e.1));
        }
        for (what, pairs) in [("acquire", acq), ("release", rel)] {
            let figure = median(pairs.iter().map(|p| p.0).collect());
            let floor = median(pairs.iter().map(|p| p.1).collect());
            let ratio = median(pairs.iter().map(|p| p.0 / p.1).collect());
            println!(
                "scaling/local/keys_{name}/{what}: {figure:.2} µs of CPU beside a floor of {floor:.2} µs = {ratio:.3}× \
                 ({n} other leases held in the directory vs none; median of {ROUNDS} rounds)"
            );
            json.push(format!(
                "{{\"name\": \"keys_{name}/{what}\", \"figure_us\": {figure:.3}, \"floor_us\": {floor:.3}, \"ratio\": {ratio:.4}}}"
            ));
        }
    }
    let per_lease = dir_bytes(full_dir.path()) as f64 / held.len() as f64;
    println!(
        "scaling/local/memory: {per_lease:.0} B of tmpfs per lease held ({} held)",
        held.len()
    );
    json.push(format!(
        "{{\"name\": \"memory\", \"held\": {}, \"bytes_per_lease\": {per_lease:.1}}}",
        held.len()
    ));
    drop(held);
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/local: load average at end {}", load_end.trim());
    paired::save(
        "scaling",
        "local.json",
        &format!(
            "{{\"load_start\": \"{}\", \"load_end\": \"{}\", \"rows\": [\n{}\n]}}\n",
            load.trim(),
            load_end.trim(),
            json.join(",\n")
        ),
    );
}
