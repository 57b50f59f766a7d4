//! One URL chooses the backend (the README's URL table). This module parses it into a typed [`Config`]; backends
//! never see the raw string except PostgreSQL's connection part, which its driver parses.
//!
//! The scheme picks the parser: `file.rs`, `redis.rs` (every Redis scheme, Redlock's and Cluster's
//! multi-host form included), `postgres.rs`, `mysql.rs`, `etcd.rs`; `params.rs` holds what they
//! share (query parameters, user info, hosts and ports, password files).

mod etcd;
mod file;
mod mysql;
mod params;
mod postgres;
mod redis;

pub use etcd::{EtcdConfig, EtcdEndpoint, DEFAULT_ETCD_PORT, ETCD_PARAMS};
pub use file::FILE_PARAMS;
pub use mysql::{
    MysqlConfig, MysqlLockMode, MysqlSslMode, DEFAULT_MYSQL_PORT, DEFAULT_MYSQL_TABLE, MYSQL_PARAMS,
};
pub use postgres::{
    validate_table_name, PostgresConfig, PostgresLockMode, PostgresPooler, PostgresSslMode,
    DEFAULT_TABLE, POSTGRES_PARAMS,
};
pub use redis::{
    RedisOptions, RedisServer, TlsOptions, DEFAULT_REDIS_PORT, DEFAULT_SENTINEL_PORT, MAX_REPLICAS,
    REDIS_PARAMS, REDIS_TLS_PARAMS, SENTINEL_PARAMS,
};

use crate::error::{Error, Result};
use crate::secret::redact;
use etcd::parse_etcd;
use file::parse_file;
use mysql::parse_mysql;
use params::{invalid, read_password_file, secret_parts, Query};
use postgres::parse_postgres;
use redis::{parse_redis, redis_options, Scheme, Topology};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

pub const DEFAULT_PREFIX: &str = "leasehold:";

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);

pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_millis(1000);

pub const DEFAULT_POOL_SIZE: u32 = 16;

/// Timeouts above this are almost certainly a unit mistake (seconds given as milliseconds twice over).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

pub const MAX_POOL_SIZE: u32 = 1024;

/// Parameters every backend accepts.
pub const COMMON_PARAMS: &[&str] = &[
    "prefix",
    "connect_timeout_ms",
    "io_timeout_ms",
    "pool_size",
    "lock_delay_ms",
];

/// A parsed backend URL. `Debug` and `Display` never show a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub backend: BackendConfig,
    /// Namespace put in front of every key (default `leasehold:`).
    pub prefix: String,
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    pub pool_size: u32,
    /// `lock_delay_ms`: how long a key whose lease *expired* (was not released) stays unavailable
    /// after its expiry (default 0). See [`crate::Client::with_lock_delay`].
    pub lock_delay: Duration,
    /// Options of the Redis schemes (defaults elsewhere).
    pub redis: RedisOptions,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendConfig {
    /// `file:///absolute/dir[?single_host=true]`. `single_host`: the user vouches that no other host
    /// writes the directory, so it is accepted on a file system not known to be local.
    Local { dir: PathBuf, single_host: bool },
    /// `redis://` or `rediss://` (TLS)
    Redis { server: RedisServer, tls: bool },
    /// `redlock://h1,h2,h3[,…]` (`redlocks://` over TLS): N ≥ 3 independent masters sharing
    /// credentials and db.
    Redlock { servers: Vec<RedisServer> },
    /// `redis+cluster://seed1,seed2…` (`rediss+cluster://` over TLS): the seeds of a Redis Cluster;
    /// slots are discovered. Every seed carries the credentials.
    RedisCluster { seeds: Vec<RedisServer> },
    /// `redis+sentinel://s1,s2…/service[/db]` (`rediss+sentinel://`): the master of `service` as the
    /// Sentinels name it. `master` holds the master's credentials and db (its host is resolved
    /// later); each Sentinel carries the `sentinel_user`/`sentinel_password` credentials.
    RedisSentinel {
        sentinels: Vec<RedisServer>,
        service: String,
        master: RedisServer,
    },
    /// `redis+unix:///path/to/redis.sock[?db=N]`: one server over a Unix socket. `server.host` is
    /// unused (empty).
    RedisUnix { path: PathBuf, server: RedisServer },
    /// `postgres://` / `postgresql://`
    Postgres(PostgresConfig),
    /// `mysql://` / `mariadb://`
    Mysql(MysqlConfig),
    /// `etcd://h1,h2,…` (`etcds://` over TLS): the members of one etcd cluster.
    Etcd(EtcdConfig),
}

impl Config {
    /// Parses a backend URL. Errors name what is wrong, never echo a password.
    pub fn parse(url: &str) -> Result<Config> {
        parse(url).map_err(|e| match e {
            Error::InvalidArgument(msg) => Error::InvalidArgument(redact(&msg, &secret_parts(url))),
            other => other,
        })
    }

    /// Every secret this configuration holds, for masking error messages.
    pub fn secrets(&self) -> Vec<String> {
        match &self.backend {
            BackendConfig::Local { .. } => vec![],
            BackendConfig::Redis { server, .. } | BackendConfig::RedisUnix { server, .. } => {
                passwords([server])
            }
            BackendConfig::Redlock { servers } => passwords(servers),
            BackendConfig::RedisCluster { seeds } => passwords(seeds),
            BackendConfig::RedisSentinel {
                sentinels, master, ..
            } => passwords(sentinels.iter().chain([master])),
            BackendConfig::Postgres(pg) => {
                pg.secrets.iter().map(|s| s.expose().to_owned()).collect()
            }
            BackendConfig::Mysql(my) => my.secrets(),
            BackendConfig::Etcd(etcd) => etcd.secrets(),
        }
    }

    /// `scheme://host…` without credentials, for logs and error messages.
    pub fn describe(&self) -> String {
        match &self.backend {
            BackendConfig::Local { dir, single_host } => format!(
                "file://{}{}",
                dir.display(),
                if *single_host {
                    "?single_host=true"
                } else {
                    ""
                }
            ),
            BackendConfig::Redis { server, tls } => {
                format!(
                    "{}://{server}/{}",
                    if *tls { "rediss" } else { "redis" },
                    server.db
                )
            }
            BackendConfig::Redlock { servers } => {
                format!(
                    "{}://{}",
                    self.tls_scheme("redlock", "redlocks"),
                    hosts(servers)
                )
            }
            BackendConfig::RedisCluster { seeds } => format!(
                "{}://{}",
                self.tls_scheme("redis+cluster", "rediss+cluster"),
                hosts(seeds)
            ),
            BackendConfig::RedisSentinel {
                sentinels,
                service,
                master,
            } => format!(
                "{}://{}/{service}/{}",
                self.tls_scheme("redis+sentinel", "rediss+sentinel"),
                hosts(sentinels),
                master.db
            ),
            BackendConfig::RedisUnix { path, server } => {
                format!("redis+unix://{}?db={}", path.display(), server.db)
            }
            BackendConfig::Postgres(pg) => format!(
                "postgres ({})",
                match pg.mode {
                    PostgresLockMode::Advisory => "advisory".to_owned(),
                    PostgresLockMode::Table => format!("table {}", pg.table),
                }
            ),
            BackendConfig::Mysql(my) => format!(
                "mysql://{}:{}/{} ({})",
                bracketed(&my.host),
                my.port,
                my.database.as_deref().unwrap_or(""),
                match my.mode {
                    MysqlLockMode::Named => "named".to_owned(),
                    MysqlLockMode::Table => format!("table {}", my.table),
                }
            ),
            BackendConfig::Etcd(etcd) => format!(
                "{}://{}",
                if etcd.tls.is_some() { "etcds" } else { "etcd" },
                etcd.hosts()
            ),
        }
    }
}

impl Config {
    fn tls_scheme<'a>(&self, plain: &'a str, tls: &'a str) -> &'a str {
        if self.redis.tls.is_some() {
            tls
        } else {
            plain
        }
    }
}

fn passwords<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) -> Vec<String> {
    servers
        .into_iter()
        .filter_map(|s| s.password.as_ref())
        .map(|p| p.expose().to_owned())
        .collect()
}

/// An IPv6 literal in brackets, as a URL writes it.
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

fn hosts(servers: &[RedisServer]) -> String {
    servers
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl FromStr for Config {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Config::parse(s)
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

fn parse(url: &str) -> Result<Config> {
    if url.trim().is_empty() {
        return Err(invalid("the backend URL is empty"));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid(
            "not a backend URL (expected file://, redis://, rediss://, redlock://, postgres://, postgresql://, mysql://, mariadb://, etcd:// or etcds://)",
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let Some(kind) = Scheme::of(&scheme) else {
        return Err(invalid(format!(
            "unknown URL scheme `{}`; expected {}",
            scheme.escape_debug(),
            Scheme::NAMES.join(", ")
        )));
    };
    let mut accepted: Vec<&str> = COMMON_PARAMS.to_vec();
    match kind {
        Scheme::Postgres => accepted.extend(POSTGRES_PARAMS),
        Scheme::File => accepted.extend(FILE_PARAMS),
        Scheme::Mysql => accepted.extend(MYSQL_PARAMS),
        Scheme::Etcd { tls } => {
            accepted.extend(ETCD_PARAMS);
            if tls {
                accepted.extend(REDIS_TLS_PARAMS);
            }
        }
        Scheme::Redis { tls, topology } => {
            accepted.extend(REDIS_PARAMS);
            if tls {
                accepted.extend(REDIS_TLS_PARAMS);
            }
            if topology == Topology::Sentinel {
                accepted.extend(SENTINEL_PARAMS);
            }
            if topology == Topology::Unix {
                accepted.push("db");
            }
        }
    }
    let query = Query::parse(query, &accepted)?;

    let pool_size = match query.get("pool_size") {
        None => DEFAULT_POOL_SIZE,
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=MAX_POOL_SIZE).contains(&n) => n,
            _ => {
                return Err(invalid(format!(
                    "`pool_size` must be a whole number from 1 to {MAX_POOL_SIZE}, got `{}`",
                    text.escape_debug()
                )))
            }
        },
    };
    let prefix = query.get("prefix").unwrap_or(DEFAULT_PREFIX).to_owned();
    let connect_timeout = query.millis("connect_timeout_ms", DEFAULT_CONNECT_TIMEOUT)?;
    let io_timeout = query.millis("io_timeout_ms", DEFAULT_IO_TIMEOUT)?;
    let lock_delay = match query.get("lock_delay_ms") {
        None | Some("0") => Duration::ZERO,
        Some(_) => query.millis("lock_delay_ms", Duration::ZERO)?,
    };

    let redis = match kind {
        Scheme::Redis { tls, .. } => redis_options(&query, tls, io_timeout)?,
        _ => RedisOptions::default(),
    };
    let password_file = query
        .get("password_file")
        .map(read_password_file)
        .transpose()?;
    let backend = match kind {
        Scheme::File => parse_file(before_query, &query)?,
        Scheme::Postgres => BackendConfig::Postgres(parse_postgres(&scheme, before_query, &query)?),
        Scheme::Mysql => BackendConfig::Mysql(parse_mysql(before_query, &query)?),
        Scheme::Etcd { tls } => BackendConfig::Etcd(parse_etcd(tls, before_query, &query)?),
        Scheme::Redis { topology, tls } => {
            let mut backend = parse_redis(topology, tls, before_query, &query)?;
            if let Some(password) = password_file {
                backend.set_password(password)?;
            }
            backend
        }
    };
    Ok(Config {
        backend,
        prefix,
        connect_timeout,
        io_timeout,
        pool_size,
        lock_delay,
        redis,
    })
}

#[cfg(test)]
mod tests;
