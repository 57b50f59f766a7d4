//! Leasehold: distributed locks as leases, for PHP and C workers, with a Rust core.
//!
//! ```no_run
//! use std::time::Duration;
//! let client = leasehold::connect("file:///tmp/leasehold")?;
//! let lease = client.acquire("report:2026-11-29", Duration::from_secs(30), Duration::from_secs(5))?;
//! println!("fence {}", lease.fence()); // hand it to the store you protect
//! lease.release()?;
//! # Ok::<(), leasehold::Error>(())
//! ```
//!
//! One URL chooses the backend (see [`connect`]); every backend keeps the same contract:
//! atomic acquire with a TTL, a random owner token, compare-and-delete release, owner-only extend, and a
//! fence that strictly increases per key.

pub use leasehold_core::*;

/// The backend URL used when none is given: local files under the system temp directory.
pub fn default_url() -> String {
    format!(
        "file://{}",
        std::env::temp_dir().join("leasehold").display()
    )
}

/// Connects to the backend a URL names and returns a client to share across threads:
///
/// | URL | backend |
/// |---|---|
/// | `file:///absolute/dir` | local files (processes on one host) |
/// | `redis://[[user]:password@]host[:port][/db]`, `rediss://…` | one Redis server |
/// | `redlock://[[user]:password@]h1[:port],h2[:port],h3[:port][/db]` | a majority of N ≥ 3 Redis masters |
/// | `postgres://…[?lock=advisory]` | PostgreSQL session advisory locks |
/// | `postgres://…?lock=table[&table=name]` | a PostgreSQL table with a unique key |
///
/// Every URL accepts `prefix`, `connect_timeout_ms`, `io_timeout_ms` and `pool_size`.
pub fn connect(url: &str) -> Result<Client> {
    connect_config(&Config::parse(url)?)
}

/// [`connect`] for an already parsed configuration.
pub fn connect_config(config: &Config) -> Result<Client> {
    let client = match &config.backend {
        BackendConfig::Local { .. } => Client::new(leasehold_local::LocalBackend::open(config)?),
        BackendConfig::Redis { .. } => Client::new(leasehold_redis::RedisBackend::connect(config)?),
        BackendConfig::Redlock { .. } => {
            Client::new(leasehold_redis::RedlockBackend::connect(config)?)
        }
        BackendConfig::Postgres(_) => {
            Client::new(leasehold_postgres::PostgresBackend::connect(config)?)
        }
        _ => {
            return Err(Error::InvalidArgument(format!(
                "backend {} is not available in this build",
                config.describe()
            )))
        }
    };
    Ok(client.with_prefix_label(&config.prefix))
}
