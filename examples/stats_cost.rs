//! What counting costs: lock cycles with and without the per-client counters, in the same
//! run, on the local backend and on a redis-server this program starts. Rounds alternate between the
//! two clients so drift in machine load hits both alike; the figure is the median of the rounds.
//!
//! ```sh
//! cargo run --release --example stats_cost
//! ```

use leasehold::Client;
use leasehold_testkit::{RedisServer, TempDir};
use std::time::{Duration, Instant};

const ROUNDS: usize = 15;

fn round(client: &Client, key: &str, cycles: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..cycles {
        let lease = client
            .try_acquire(key, Duration::from_secs(10))
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
    let counted = leasehold::connect(url).expect("connect");
    let bare = leasehold::connect(url).expect("connect").without_stats();
    round(&counted, "warm-up", cycles / 4);
    round(&bare, "warm-up", cycles / 4);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        with.push(round(&counted, "stats-cost:a", cycles));
        without.push(round(&bare, "stats-cost:b", cycles));
    }
    let (w, wo) = (median(with), median(without));
    println!(
        "{name:<6} with stats {:>9.2} µs/cycle   without {:>9.2} µs/cycle   ratio {:.4}  ({:+.2} %)",
        w.as_secs_f64() * 1e6,
        wo.as_secs_f64() * 1e6,
        w.as_secs_f64() / wo.as_secs_f64(),
        (w.as_secs_f64() / wo.as_secs_f64() - 1.0) * 100.0
    );
}

fn main() {
    let dir = TempDir::new("stats-cost");
    compare("local", &dir.file_url(), 4_000);
    let redis = RedisServer::start();
    compare("redis", &redis.url(), 1_000);
}
