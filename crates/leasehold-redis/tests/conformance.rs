//! The whole contract (leasehold_core::conformance) against a real redis-server, and against
//! Redlock over 3 of them: locks, restore and force-release, shared locks and
//! semaphores.

mod common;

use leasehold_core::{conformance, Client, Config};
use leasehold_redis::RedlockBackend;
use leasehold_testkit::RedisServer;
use std::time::Instant;

#[test]
fn conformance_suite() {
    let server = RedisServer::start();
    let url = server.url();
    conformance::run(&|| common::client(&url));
}

#[test]
fn records() {
    let server = RedisServer::start();
    let url = server.url();
    conformance::run_records(&|| common::client(&url));
    conformance::run_once(&|| common::client(&url));
}

#[test]
fn sixteen_threads_lose_no_increment() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let start = Instant::now();
    conformance::mutual_exclusion(&client, 16, 500);
    eprintln!("16 threads x 500 cycles: {:?}", start.elapsed());
}

#[test]
fn restore_and_force_release() {
    let server = RedisServer::start();
    let url = server.url();
    conformance::run_restore(&|| common::client(&url));
    conformance::run_force_release(&|| common::client(&url));
}

#[test]
fn shared_locks() {
    let server = RedisServer::start();
    let url = server.url();
    conformance::run_shared(&|| common::client(&url));
    conformance::run_promote(&|| common::client(&url));
}

#[test]
fn semaphores() {
    let server = RedisServer::start();
    let url = server.url();
    conformance::run_semaphore(&|| common::client(&url));
    conformance::run_semaphore_size(&|| common::client(&url));
    let start = Instant::now();
    conformance::semaphore_limit(&common::client(&url), 3, 8, 50);
    eprintln!(
        "redis: semaphore of 3, 8 threads x 50 cycles: {:?}",
        start.elapsed()
    );
}

fn redlock_url(nodes: &[RedisServer]) -> String {
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    format!("redlock://{}", hosts.join(","))
}

fn redlock_client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(RedlockBackend::connect(&config).unwrap_or_else(|e| panic!("{url}: {e}")))
}

#[test]
fn redlock_restore_and_force_release() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = redlock_url(&nodes);
    conformance::run_restore(&|| redlock_client(&url));
    conformance::run_force_release(&|| redlock_client(&url));
}

#[test]
fn redlock_shared_locks() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = redlock_url(&nodes);
    conformance::run_shared(&|| redlock_client(&url));
    conformance::run_promote(&|| redlock_client(&url));
}

#[test]
fn redlock_semaphores() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = redlock_url(&nodes);
    conformance::run_semaphore(&|| redlock_client(&url));
    conformance::run_semaphore_size(&|| redlock_client(&url));
    let start = Instant::now();
    conformance::semaphore_limit(&redlock_client(&url), 3, 8, 50);
    eprintln!(
        "redlock(3): semaphore of 3, 8 threads x 50 cycles: {:?}",
        start.elapsed()
    );
}
