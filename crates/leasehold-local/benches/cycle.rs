//! `cargo bench -p leasehold-local`: the uncontended lock cycle (try_acquire + release, one thread) on a
//! key never used before (its record is created, and deleted by the release), timed in alternation
//! with the same cycle on a key whose record exists, in a private directory this bench makes: on a
//! tmpfs (`local/fresh`, /dev/shm: the file system of the default directory, /run/lock) and in the
//! temporary directory (`local/fresh_disk`, a disk file system on most machines); which file system
//! each was is written to `local/file_systems.json`.
//!
//! `target/criterion/local/fresh/new/estimates.json` is the figure, `paired.json` beside it the
//! known-key cycle and the ratio (tests/support/paired.rs, scripts/bench.sh).

#[path = "../../../tests/support/paired.rs"]
mod paired;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use leasehold_core::{Client, Config};
use leasehold_local::LocalBackend;
use leasehold_testkit::TempDir;
use std::path::Path;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);
const SAMPLES: usize = 20;

fn local(c: &mut Criterion) {
    let mut g = c.benchmark_group("local");
    // The default directory, /run/lock/leasehold, is on a tmpfs wherever systemd mounts /run:
    // the row the goal is read on. /dev/shm is a tmpfs on every Linux system we know of.
    let ram = TempDir::new_in(Path::new("/dev/shm"), "bench-local");
    pair(&mut g, "fresh", &ram);
    // A `file://` URL on a disk file system (the temporary directory): creating and deleting the
    // record's inode is journalled work there.
    let disk = TempDir::new("bench-local");
    pair(&mut g, "fresh_disk", &disk);
    g.finish();

    let kinds = format!(
        "{{\"fresh\": \"{}\", \"fresh_disk\": \"{}\"}}\n",
        file_system(ram.path()),
        file_system(disk.path())
    );
    paired::save("local", "file_systems.json", &kinds);
}

/// The fresh-key cycle timed in alternation with the known-key one, in `dir`.
fn pair(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, dir: &TempDir) {
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
    paired::bench(g, "local", name, SAMPLES, fresh, known);
}

/// The name of the file system `path` is on, with the path, for the report.
fn file_system(path: &Path) -> String {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in a path");
    // SAFETY: statfs is plain data; a NUL-terminated path and a pointer to it on this frame.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    let kind = if unsafe { libc::statfs(c.as_ptr(), &mut s) } == 0 {
        match s.f_type as u64 {
            0x0102_1994 => "tmpfs",
            0xEF53 => "ext4",
            0x5846_5342 => "xfs",
            0x9123_683E => "btrfs",
            0x794C_7630 => "overlayfs",
            _ => "another file system",
        }
    } else {
        "unknown"
    };
    let parent = path.parent().unwrap_or(path);
    format!("{kind}, {}", parent.display())
}

criterion_group! {
    name = benches;
    config = paired::config(SAMPLES);
    targets = local
}
criterion_main!(benches);
