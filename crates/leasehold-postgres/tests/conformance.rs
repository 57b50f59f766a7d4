//! The contract every backend keeps (leasehold-core's conformance suite), in both modes.

use leasehold_core::{conformance, Client, Config};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::PostgresServer;

fn client(query: &str) -> Client {
    let url = PostgresServer::shared().url_with(query);
    let config = Config::parse(&url).expect("test URL");
    Client::new(PostgresBackend::connect(&config).expect("connect to the test PostgreSQL"))
}

#[test]
fn advisory_conformance() {
    conformance::run(&|| client("lock=advisory"));
}

#[test]
fn table_conformance() {
    conformance::run(&|| client("lock=table&table=conformance_locks"));
}

#[test]
fn advisory_records() {
    conformance::run_records(&|| client("lock=advisory"));
    conformance::run_once(&|| client("lock=advisory"));
}

#[test]
fn table_records() {
    conformance::run_records(&|| client("lock=table&table=records_locks"));
    conformance::run_once(&|| client("lock=table&table=records_locks"));
}

#[test]
fn advisory_mutual_exclusion() {
    conformance::mutual_exclusion(&client("lock=advisory"), 8, 40);
}

#[test]
fn table_mutual_exclusion() {
    conformance::mutual_exclusion(&client("lock=table&table=exclusion_locks"), 8, 40);
}

#[test]
fn advisory_restore_is_refused() {
    conformance::run_restore_refused(&|| client("lock=advisory"), "lock=table");
}

#[test]
fn table_restore() {
    conformance::run_restore(&|| client("lock=table&table=restore_locks"));
}

#[test]
fn advisory_force_release() {
    conformance::run_force_release(&|| client("lock=advisory"));
}

#[test]
fn table_force_release() {
    conformance::run_force_release(&|| client("lock=table&table=force_locks"));
}

#[test]
fn advisory_shared() {
    conformance::run_shared(&|| client("lock=advisory"));
    conformance::run_promote(&|| client("lock=advisory"));
}

#[test]
fn table_shared() {
    conformance::run_shared(&|| client("lock=table&table=shared_locks"));
    conformance::run_promote(&|| client("lock=table&table=shared_locks"));
}

#[test]
fn advisory_semaphore() {
    conformance::run_semaphore(&|| client("lock=advisory"));
    conformance::run_semaphore_size(&|| client("lock=advisory"));
}

#[test]
fn table_semaphore() {
    conformance::run_semaphore(&|| client("lock=table&table=semaphore_locks"));
    conformance::run_semaphore_size(&|| client("lock=table&table=semaphore_locks"));
}

#[test]
fn advisory_semaphore_limit() {
    conformance::semaphore_limit(&client("lock=advisory"), 3, 8, 50);
}

#[test]
fn table_semaphore_limit() {
    conformance::semaphore_limit(&client("lock=table&table=sem_limit_locks"), 3, 8, 50);
}
