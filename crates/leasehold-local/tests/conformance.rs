//! The shared contract suite and thread contention on the local backend.

mod common;

use common::{temp_dir, FileUrl};
use leasehold_core::{conformance, Client, Config};
use leasehold_local::LocalBackend;

fn client(dir: &tempfile::TempDir) -> Client {
    let config = Config::parse(&dir.file_url()).expect("file URL");
    Client::new(LocalBackend::open(&config).expect("open the local backend"))
}

#[test]
fn conformance_suite() {
    let dir = temp_dir("local-conformance");
    conformance::run(&|| client(&dir));
}

#[test]
fn restore_and_force_release() {
    let dir = temp_dir("local-restore");
    conformance::run_restore(&|| client(&dir));
    conformance::run_force_release(&|| client(&dir));
}

#[test]
fn records() {
    let dir = temp_dir("local-records");
    conformance::run_records(&|| client(&dir));
    conformance::run_once(&|| client(&dir));
}

#[test]
fn shared_locks() {
    let dir = temp_dir("local-shared");
    conformance::run_shared(&|| client(&dir));
    conformance::run_promote(&|| client(&dir));
}

#[test]
fn semaphores() {
    let dir = temp_dir("local-semaphore");
    conformance::run_semaphore(&|| client(&dir));
    conformance::run_semaphore_size(&|| client(&dir));
    let started = std::time::Instant::now();
    conformance::semaphore_limit(&client(&dir), 3, 8, 50);
    eprintln!(
        "semaphore of 3, 8 threads x 50 cycles took {:?}",
        started.elapsed()
    );
}

#[test]
fn mutual_exclusion_16_threads_500_cycles() {
    let dir = temp_dir("local-exclusion");
    let started = std::time::Instant::now();
    conformance::mutual_exclusion(&client(&dir), 16, 500);
    eprintln!("16 threads x 500 cycles took {:?}", started.elapsed());
}
