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

mod checkup;
pub use checkup::doctor;

/// The backend URL used when none is given: local files in a per-user directory that no tmp
/// cleaner ages — `/run/lock/leasehold-<uid>` when `/run/lock` exists and is writable, else
/// `$XDG_RUNTIME_DIR/leasehold`, else `<temp dir>/leasehold-<uid>`.
///
/// Why: a held key's record deleted under it lets a second process take the key. systemd-tmpfiles
/// ages `/tmp` (10 days) and `/var/tmp` (30 days), so the old default `/tmp/leasehold` could lose
/// the records of long-running holders; `/run/lock` is the tmpfs meant for lock files, is not aged,
/// and empties only at reboot, when every lease is over anyway. The uid keeps users apart (another
/// user's or a group-writable directory is refused). See [`leasehold_local::default_dir`] for the
/// details and the limits (tmpfs space: 4 KiB per key held at once).
pub fn default_url() -> String {
    format!("file://{}", leasehold_local::default_dir().display())
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
/// | `mysql://…` (`?lock=named`, the default; `mariadb://` is the same) | MySQL/MariaDB `GET_LOCK` on a session the lease owns |
/// | `mysql://…?lock=table[&table=name]` | an InnoDB table with a unique key |
/// | `etcd://[user[:password]@]h1:2379,h2:2379,…`, `etcds://…` | an etcd cluster (leases on etcd leases, fences from its revisions) |
///
/// Every URL accepts `prefix`, `connect_timeout_ms`, `io_timeout_ms` and `pool_size`.
pub fn connect(url: &str) -> Result<Client> {
    connect_config(&Config::parse(url)?)
}

/// [`connect`] for an already parsed configuration.
pub fn connect_config(config: &Config) -> Result<Client> {
    refuse_unbuilt(config)?;
    let client = match &config.backend {
        BackendConfig::Local { .. } => Client::new(leasehold_local::LocalBackend::open(config)?),
        BackendConfig::Redis { .. }
        | BackendConfig::RedisUnix { .. }
        | BackendConfig::RedisCluster { .. }
        | BackendConfig::RedisSentinel { .. } => {
            Client::new(leasehold_redis::RedisBackend::connect(config)?)
        }
        BackendConfig::Redlock { .. } => {
            Client::new(leasehold_redis::RedlockBackend::connect(config)?)
        }
        BackendConfig::Postgres(_) => {
            Client::new(leasehold_postgres::PostgresBackend::connect(config)?)
        }
        BackendConfig::Mysql(_) => Client::new(leasehold_mysql::MysqlBackend::connect(config)?),
        BackendConfig::Etcd(_) => Client::new(leasehold_etcd::EtcdBackend::connect(config)?),
        _ => {
            return Err(Error::InvalidArgument(format!(
                "backend {} is not available in this build",
                config.describe()
            )))
        }
    };
    Ok(client
        .with_prefix_label(&config.prefix)
        .with_lock_delay(config.lock_delay))
}

/// Options the URL parser knows but this build's backends do not carry out yet: refused rather than
/// ignored, so no one gets plain text where they asked for TLS, or fewer acknowledgements than asked.
fn refuse_unbuilt(config: &Config) -> Result<()> {
    // `replicas` is carried out by every Redis topology but Redlock (whose nodes are independent
    // masters, so a majority of them is its redundancy). TLS (`tls_*`, `redlocks://`) is carried
    // out on every Redis scheme.
    let unbuilt =
        if config.redis.replicas > 0 && matches!(config.backend, BackendConfig::Redlock { .. }) {
            Some("`replicas` with Redlock")
        } else {
            None
        };
    match unbuilt {
        Some(what) => Err(Error::InvalidArgument(format!(
            "{what} is not available in this build ({})",
            config.describe()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_urls_connect_through_the_facade() {
        let cluster = leasehold_testkit::EtcdCluster::start_with(1);
        let client = connect(&cluster.url_with("prefix=facade:&lock_delay_ms=10")).unwrap();
        assert_eq!(client.backend_name(), "etcd");
        let lease = client
            .try_acquire("facade", std::time::Duration::from_secs(5))
            .unwrap();
        assert!(lease.fence() > leasehold_etcd::fence::BASE);
        lease.release().unwrap();
    }

    #[test]
    fn tls_parameters_and_redlocks_are_no_longer_refused() {
        for url in [
            "rediss://h?tls_ca_file=/ca.pem&tls_cert_file=/c.pem&tls_key_file=/k.pem",
            "rediss://h?tls_insecure=true",
            "rediss+cluster://a,b?tls_ca_file=/ca.pem",
            "rediss+sentinel://s1,s2/m?tls_ca_file=/ca.pem",
            "redlocks://a,b,c",
            "redlocks://a,b,c?tls_ca_file=/ca.pem&tls_insecure=true",
        ] {
            let config = Config::parse(url).unwrap();
            assert!(refuse_unbuilt(&config).is_ok(), "{url}");
        }
        let config = Config::parse("redlock://a,b,c?replicas=1").unwrap();
        assert_eq!(
            refuse_unbuilt(&config).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
}
