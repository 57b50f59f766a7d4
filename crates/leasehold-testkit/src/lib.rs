//! Real servers for tests: each test binary starts its own `redis-server` (and PostgreSQL) on a free
//! loopback port in a temporary directory, never the shared default ports, so runs cannot disturb each
//! other. A missing server binary is a test failure, not a skip: CI must really run these tests.

mod port;
mod postgres;
mod redis;
mod tempdir;

pub use port::free_port;
pub use postgres::PostgresServer;
pub use redis::RedisServer;
pub use tempdir::TempDir;

use std::time::{Duration, Instant};

/// Polls `ready` every 10 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    ready()
}

/// A key unique to this call, so tests sharing a server never contend by accident.
pub fn unique_key(label: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{label}:{}:{nanos}:{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
