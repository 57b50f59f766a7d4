//! The whole contract (leasehold_core::conformance) against a real redis-server.

mod common;

use leasehold_core::conformance;
use leasehold_testkit::RedisServer;
use std::time::Instant;

#[test]
fn conformance_suite() {
    let server = RedisServer::start();
    let url = server.url();
    conformance::run(&|| common::client(&url));
}

#[test]
fn sixteen_threads_lose_no_increment() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let start = Instant::now();
    conformance::mutual_exclusion(&client, 16, 500);
    eprintln!("16 threads x 500 cycles: {:?}", start.elapsed());
}
