//! The contract every backend keeps (leasehold-core's conformance suites), in both modes, against a
//! real MariaDB server that authenticates with a password.

use leasehold_core::{conformance, Client, Config};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::MariaDbServer;

/// A 5 s I/O timeout: on a loaded 2-core machine a first `CREATE TABLE` among many at once took over
/// 1 s; bounds are proven in tests/hang.rs.
fn client(query: &str) -> Client {
    let url = MariaDbServer::shared().url_with(&format!("{query}&io_timeout_ms=5000"));
    let config = Config::parse(&url).expect("test URL");
    Client::new(MysqlBackend::connect(&config).expect("connect to the test MariaDB"))
}

#[test]
fn named_conformance() {
    conformance::run(&|| client("lock=named"));
}

#[test]
fn table_conformance() {
    conformance::run(&|| client("lock=table&table=conformance_locks"));
}

#[test]
fn named_records() {
    conformance::run_records(&|| client("lock=named"));
    conformance::run_once(&|| client("lock=named"));
}

#[test]
fn table_records() {
    conformance::run_records(&|| client("lock=table&table=records_locks"));
    conformance::run_once(&|| client("lock=table&table=records_locks"));
}

#[test]
fn named_mutual_exclusion() {
    conformance::mutual_exclusion(&client("lock=named"), 8, 40);
}

#[test]
fn table_mutual_exclusion() {
    conformance::mutual_exclusion(&client("lock=table&table=exclusion_locks"), 8, 40);
}

#[test]
fn named_restore_is_refused() {
    conformance::run_restore_refused(&|| client("lock=named"), "lock=table");
}

#[test]
fn table_restore() {
    conformance::run_restore(&|| client("lock=table&table=restore_locks"));
}

#[test]
fn named_force_release() {
    conformance::run_force_release(&|| client("lock=named"));
}

#[test]
fn table_force_release() {
    conformance::run_force_release(&|| client("lock=table&table=force_locks"));
}

#[test]
fn table_shared() {
    conformance::run_shared(&|| client("lock=table&table=shared_locks"));
}

#[test]
fn named_semaphore() {
    conformance::run_semaphore(&|| client("lock=named"));
    conformance::run_semaphore_size(&|| client("lock=named"));
}

#[test]
fn table_semaphore() {
    conformance::run_semaphore(&|| client("lock=table&table=semaphore_locks"));
    conformance::run_semaphore_size(&|| client("lock=table&table=semaphore_locks"));
}

#[test]
fn named_semaphore_limit() {
    conformance::semaphore_limit(&client("lock=named"), 3, 8, 50);
}

#[test]
fn table_semaphore_limit() {
    conformance::semaphore_limit(&client("lock=table&table=sem_limit_locks"), 3, 8, 50);
}

#[test]
fn named_refuses_shared_locks() {
    let c = client("lock=named");
    let e = c
        .try_acquire_shared(b"named-shared", std::time::Duration::from_secs(5))
        .unwrap_err();
    assert_eq!(e.kind(), leasehold_core::ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("lock=table"), "{e}");
}
