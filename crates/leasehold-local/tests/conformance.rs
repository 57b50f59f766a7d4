//! The shared contract suite and thread contention on the local backend.

use leasehold_core::{conformance, Client, Config};
use leasehold_local::LocalBackend;
use leasehold_testkit::TempDir;

fn client(dir: &TempDir) -> Client {
    let config = Config::parse(&dir.file_url()).expect("file URL");
    Client::new(LocalBackend::open(&config).expect("open the local backend"))
}

#[test]
fn conformance_suite() {
    let dir = TempDir::new("local-conformance");
    conformance::run(&|| client(&dir));
}

#[test]
fn mutual_exclusion_16_threads_500_cycles() {
    let dir = TempDir::new("local-exclusion");
    let started = std::time::Instant::now();
    conformance::mutual_exclusion(&client(&dir), 16, 500);
    eprintln!("16 threads x 500 cycles took {:?}", started.elapsed());
}
