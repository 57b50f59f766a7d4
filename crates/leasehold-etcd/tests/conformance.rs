//! The contract every backend keeps (leasehold-core's conformance suites), against a real
//! three-member etcd cluster started by the test kit.

use leasehold_core::{conformance, Client, Config};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::EtcdCluster;
use std::time::Duration;

/// How much later than a short TTL another client may take the key over: the test cluster's
/// minimum etcd lease is 2 s (1.5 election timeouts of 1 s, rounded up to whole seconds), and etcd
/// looks for expired leases every 500 ms, then revokes them through Raft. The suite waits 350 ms
/// past a 100 ms TTL; this is what it adds, with room for a loaded machine.
const EXPIRY_LAG: Duration = Duration::from_millis(3000);

/// A 5 s I/O timeout: on a loaded 2-core machine a Raft round can take over a second.
fn client(query: &str) -> Client {
    let url = EtcdCluster::shared().url_with(&format!("io_timeout_ms=5000&{query}"));
    let config = Config::parse(&url).expect("test URL");
    Client::new(EtcdBackend::connect(&config).expect("connect to the test cluster"))
}

#[test]
fn exclusive_conformance() {
    conformance::allow_expiry_lag(EXPIRY_LAG);
    conformance::run(&|| client("prefix=conformance:"));
}

#[test]
fn mutual_exclusion() {
    conformance::mutual_exclusion(&client("prefix=exclusion:"), 8, 30);
}

#[test]
fn restore() {
    conformance::allow_expiry_lag(EXPIRY_LAG);
    conformance::run_restore(&|| client("prefix=restore:"));
}

#[test]
fn force_release() {
    conformance::run_force_release(&|| client("prefix=force:"));
}

#[test]
fn records_and_once() {
    conformance::allow_expiry_lag(EXPIRY_LAG);
    conformance::run_records(&|| client("prefix=records:"));
    conformance::run_once(&|| client("prefix=once:"));
}

#[test]
fn shared() {
    conformance::allow_expiry_lag(EXPIRY_LAG);
    conformance::run_shared(&|| client("prefix=shared:"));
}

#[test]
fn promote_and_demote() {
    conformance::allow_expiry_lag(EXPIRY_LAG);
    conformance::run_promote(&|| client("prefix=promote:"));
}

#[test]
fn semaphores() {
    conformance::allow_expiry_lag(EXPIRY_LAG);
    conformance::run_semaphore(&|| client("prefix=semaphore:"));
    conformance::run_semaphore_size(&|| client("prefix=semaphore-size:"));
    conformance::semaphore_limit(&client("prefix=semaphore-limit:"), 3, 6, 10);
}
