//! What a shared lock and a semaphore permit cost beside the plain lock: uncontended
//! acquire + release cycles of each kind on every backend, in the same run, rounds interleaved so
//! drift in machine load hits all three alike; the figure is the median of the rounds. Servers are
//! started by this program on free loopback ports.
//!
//! ```sh
//! cargo run --release --example kinds_cost
//! ```

use leasehold::Client;
use leasehold_testkit::{PostgresServer, RedisServer, TempDir};
use std::time::{Duration, Instant};

const ROUNDS: usize = 11;
const TTL: Duration = Duration::from_secs(10);

#[derive(Clone, Copy)]
enum Kind {
    Plain,
    Shared,
    Permit,
}

fn round(client: &Client, kind: Kind, key: &str, cycles: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..cycles {
        let lease = match kind {
            Kind::Plain => client.try_acquire(key, TTL),
            Kind::Shared => client.try_acquire_shared(key, TTL),
            Kind::Permit => client.try_acquire_permit(key, 5, TTL),
        }
        .expect("acquire");
        lease.release().expect("release");
    }
    start.elapsed() / cycles as u32
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn compare(name: &str, url: &str, cycles: usize) {
    let client = leasehold::connect(url).unwrap_or_else(|e| panic!("connect {name}: {e}"));
    let kinds = [Kind::Plain, Kind::Shared, Kind::Permit];
    let keys = ["kinds-cost:plain", "kinds-cost:shared", "kinds-cost:permit"];
    for (kind, key) in kinds.iter().zip(keys) {
        round(&client, *kind, key, cycles / 4);
    }
    let mut samples = vec![Vec::new(); 3];
    for _ in 0..ROUNDS {
        for (i, (kind, key)) in kinds.iter().zip(keys).enumerate() {
            samples[i].push(round(&client, *kind, key, cycles));
        }
    }
    let [plain, shared, permit]: [Duration; 3] = samples
        .into_iter()
        .map(median)
        .collect::<Vec<_>>()
        .try_into()
        .expect("three kinds");
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:<20} plain {:>7.1} µs   shared {:>7.1} µs ({:.2}×)   permit of 5 {:>7.1} µs ({:.2}×)",
        us(plain),
        us(shared),
        us(shared) / us(plain),
        us(permit),
        us(permit) / us(plain)
    );
}

fn main() {
    let dir = TempDir::new("kinds-cost");
    compare("local", &dir.file_url(), 2000);
    let redis = RedisServer::start();
    compare("redis", &redis.url(), 1000);
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    compare(
        "redlock (3)",
        &format!("redlock://{}", hosts.join(",")),
        300,
    );
    let pg = PostgresServer::start();
    compare("postgres advisory", &pg.url(), 500);
    compare("postgres table", &pg.url_with("lock=table"), 300);
}
