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
fn advisory_mutual_exclusion() {
    conformance::mutual_exclusion(&client("lock=advisory"), 8, 40);
}

#[test]
fn table_mutual_exclusion() {
    conformance::mutual_exclusion(&client("lock=table&table=exclusion_locks"), 8, 40);
}
