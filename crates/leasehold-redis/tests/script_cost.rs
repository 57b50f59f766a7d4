//! Numbers, not assertions: the server time of each script, from `INFO commandstats`
//! (`usec_per_call` of EVALSHA), on the uncontended path and with a waiter queued. Run with
//! `cargo test -p leasehold-redis --release --test script_cost -- --ignored --nocapture`.

mod common;

use leasehold_testkit::{unique_key, RedisServer};
use std::time::{Duration, Instant};

/// Server µs per EVALSHA since the last `CONFIG RESETSTAT`, and how many calls.
fn evalsha_cost(server: &RedisServer) -> (f64, u64) {
    let info = server.command(&[b"INFO", b"commandstats"]);
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .unwrap_or("");
    let field = |name: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("usec_per_call="), field("calls=") as u64)
}

fn reset(server: &RedisServer) {
    server.command(&[b"CONFIG", b"RESETSTAT"]);
}

#[test]
#[ignore = "benchmark: prints numbers"]
fn report_script_server_time() {
    let server = RedisServer::start();
    let client = common::client(&server.url());
    let ttl = Duration::from_secs(30);
    let n = 5000;

    // Warm up (scripts compiled, connection made).
    let key = unique_key("cost");
    for _ in 0..200 {
        client.try_acquire(&key, ttl).unwrap().release().unwrap();
    }

    // Uncontended acquire alone: fresh keys, released outside the measurement.
    let keys: Vec<String> = (0..n).map(|i| format!("{key}:{i}")).collect();
    reset(&server);
    let mut leases = Vec::with_capacity(n);
    for k in &keys {
        leases.push(client.try_acquire(k, ttl).unwrap());
    }
    let (acquire, calls) = evalsha_cost(&server);
    println!("acquire, uncontended (fresh key): {acquire:.2} µs/call ({calls} calls)");
    reset(&server);
    for lease in leases {
        lease.release().unwrap();
    }
    let (release, calls) = evalsha_cost(&server);
    println!("release, nobody waiting: {release:.2} µs/call ({calls} calls)");

    // The same key over and over (its fence counter exists).
    reset(&server);
    let mut leases = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let lease = client.try_acquire(&key, ttl).unwrap();
        leases.push(lease.fence());
        lease.release().unwrap();
    }
    let elapsed = started.elapsed();
    let (cycle, calls) = evalsha_cost(&server);
    println!(
        "acquire+release on one key: {cycle:.2} µs/call ({calls} calls); client cycle {:?}",
        elapsed / n as u32
    );

    // A try that finds the key held (the contended refusal).
    let held = client.try_acquire(&key, ttl).unwrap();
    reset(&server);
    for _ in 0..n {
        assert!(client.try_acquire(&key, ttl).is_err());
    }
    let (refused, calls) = evalsha_cost(&server);
    println!("try_acquire refused (held): {refused:.2} µs/call ({calls} calls)");
    held.release().unwrap();
}
