//! The Redis schemes: one server (`redis://`, `rediss://`, `redis+unix://`), a Cluster's seeds, a
//! Sentinel group, and Redlock's independent masters (the multi-host forms are parsed here by hand).

use super::params::{decode, invalid, parse_userinfo, read_password_file, split_host_port, Query};
use super::BackendConfig;
use crate::error::Result;
use crate::secret::Secret;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub const DEFAULT_REDIS_PORT: u16 = 6379;

pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// The most replicas an acquire may wait for (`replicas=N`).
pub const MAX_REPLICAS: u32 = 64;

/// Parameters every Redis URL accepts (single, Unix socket, Cluster, Sentinel, Redlock).
pub const REDIS_PARAMS: &[&str] = &[
    "replicas",
    "replicas_timeout_ms",
    "password_file",
    "allow_eviction",
];

/// TLS parameters of the Redis TLS schemes (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`,
/// `redlocks://`).
pub const REDIS_TLS_PARAMS: &[&str] = &[
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_insecure",
];

/// Parameters only Sentinel URLs accept: how to log in to the Sentinels themselves.
pub const SENTINEL_PARAMS: &[&str] = &[
    "sentinel_user",
    "sentinel_password",
    "sentinel_password_file",
];

/// What every Redis scheme accepts besides its hosts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RedisOptions {
    /// `replicas=N`: an acquire or extend counts only once N replicas acknowledged it (`WAIT`).
    pub replicas: u32,
    /// `replicas_timeout_ms`: how long `WAIT` may take (default: the I/O timeout).
    pub replicas_timeout: Duration,
    /// TLS settings, present exactly for the TLS schemes.
    pub tls: Option<TlsOptions>,
    /// `allow_eviction=true`: accept a server whose `maxmemory-policy` may evict keys under its
    /// memory limit (refused at connect otherwise: an evicted lock key is a second holder).
    pub allow_eviction: bool,
}

/// TLS settings of a Redis TLS scheme.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TlsOptions {
    /// `tls_ca_file`: PEM certificates to trust instead of the system store.
    pub ca_file: Option<PathBuf>,
    /// `tls_cert_file` and `tls_key_file`: a client certificate, for servers that ask for one.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// `tls_insecure=true`: no verification at all (logged as such on every connection).
    pub insecure: bool,
}

/// One Redis server and how to log in to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisServer {
    pub host: String,
    pub port: u16,
    pub db: i64,
    pub username: Option<String>,
    pub password: Option<Secret>,
}

impl fmt::Display for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The schemes, and for Redis the topology and whether it is the TLS twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scheme {
    File,
    Redis { topology: Topology, tls: bool },
    Postgres,
    Mysql,
    Etcd { tls: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Topology {
    Single,
    Unix,
    Cluster,
    Sentinel,
    Redlock,
}

impl Scheme {
    pub(super) const NAMES: &'static [&'static str] = &[
        "file",
        "redis",
        "rediss",
        "redis+unix",
        "redis+cluster",
        "rediss+cluster",
        "redis+sentinel",
        "rediss+sentinel",
        "redlock",
        "redlocks",
        "postgres",
        "postgresql",
        "mysql",
        "mariadb",
        "etcd",
        "etcds",
        "valkey",
        "valkeys",
        "valkey+unix",
        "valkey+cluster",
        "valkeys+cluster",
        "valkey+sentinel",
        "valkeys+sentinel",
    ];

    pub(super) fn of(name: &str) -> Option<Scheme> {
        let redis = |topology, tls| Some(Scheme::Redis { topology, tls });
        // Valkey speaks Redis's protocol and runs its scripts unchanged: its schemes are aliases.
        let name = match name.strip_prefix("valkey") {
            Some(rest) => return Scheme::of(&format!("redis{rest}")),
            None => name,
        };
        match name {
            "file" => Some(Scheme::File),
            "postgres" | "postgresql" => Some(Scheme::Postgres),
            "mysql" | "mariadb" => Some(Scheme::Mysql),
            "etcd" => Some(Scheme::Etcd { tls: false }),
            "etcds" => Some(Scheme::Etcd { tls: true }),
            "redis" => redis(Topology::Single, false),
            "rediss" => redis(Topology::Single, true),
            "redis+unix" => redis(Topology::Unix, false),
            "redis+cluster" => redis(Topology::Cluster, false),
            "rediss+cluster" => redis(Topology::Cluster, true),
            "redis+sentinel" => redis(Topology::Sentinel, false),
            "rediss+sentinel" => redis(Topology::Sentinel, true),
            "redlock" => redis(Topology::Redlock, false),
            "redlocks" => redis(Topology::Redlock, true),
            _ => None,
        }
    }
}

pub(super) fn redis_options(
    query: &Query,
    tls: bool,
    io_timeout: Duration,
) -> Result<RedisOptions> {
    let replicas = match query.get("replicas") {
        None => 0,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= MAX_REPLICAS)
            .ok_or_else(|| {
                invalid(format!(
                    "`replicas` must be a whole number from 0 to {MAX_REPLICAS}, got `{}`",
                    text.escape_debug()
                ))
            })?,
    };
    if replicas == 0 && query.get("replicas_timeout_ms").is_some() {
        return Err(invalid(
            "`replicas_timeout_ms` only applies with `replicas` of 1 or more",
        ));
    }
    let replicas_timeout = query.millis("replicas_timeout_ms", io_timeout)?;
    let allow_eviction = match query.get("allow_eviction") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(invalid(format!(
                "`allow_eviction` must be `true` or `false`, got `{}`",
                other.escape_debug()
            )))
        }
    };
    let tls = tls.then(|| tls_options(query)).transpose()?;
    Ok(RedisOptions {
        replicas,
        replicas_timeout,
        tls,
        allow_eviction,
    })
}

/// `tls_ca_file`, `tls_cert_file`, `tls_key_file` and `tls_insecure`, as every TLS scheme but
/// PostgreSQL's and MySQL's takes them.
pub(super) fn tls_options(query: &Query) -> Result<TlsOptions> {
    let path = |name: &str| query.get(name).map(PathBuf::from);
    let insecure = match query.get("tls_insecure") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(invalid(format!(
                "`tls_insecure` must be `true` or `false`, got `{}`",
                other.escape_debug()
            )))
        }
    };
    let options = TlsOptions {
        ca_file: path("tls_ca_file"),
        cert_file: path("tls_cert_file"),
        key_file: path("tls_key_file"),
        insecure,
    };
    if options.cert_file.is_some() != options.key_file.is_some() {
        return Err(invalid(
            "a client certificate needs both `tls_cert_file` and `tls_key_file`",
        ));
    }
    Ok(options)
}

impl BackendConfig {
    /// Puts a password read from `password_file` on every server of a Redis configuration.
    pub(super) fn set_password(&mut self, password: Secret) -> Result<()> {
        let servers: Vec<&mut RedisServer> = match self {
            BackendConfig::Redis { server, .. } | BackendConfig::RedisUnix { server, .. } => {
                vec![server]
            }
            BackendConfig::Redlock { servers } => servers.iter_mut().collect(),
            BackendConfig::RedisCluster { seeds } => seeds.iter_mut().collect(),
            BackendConfig::RedisSentinel { master, .. } => vec![master],
            _ => vec![],
        };
        for server in servers {
            if server.password.is_some() {
                return Err(invalid(
                    "the URL gives a password and a password_file: give one of them",
                ));
            }
            server.password = Some(password.clone());
        }
        Ok(())
    }
}

pub(super) fn parse_redis(
    topology: Topology,
    tls: bool,
    before_query: &str,
    query: &Query,
) -> Result<BackendConfig> {
    Ok(match topology {
        Topology::Single => {
            let (servers, db) = parse_redis_authority(before_query)?;
            if servers.len() != 1 {
                return Err(invalid(
                    "a redis:// URL names exactly one host; use redlock://h1,h2,h3 for several",
                ));
            }
            let mut server = servers
                .into_iter()
                .next()
                .ok_or_else(|| invalid("no host"))?;
            server.db = db;
            BackendConfig::Redis { server, tls }
        }
        Topology::Unix => parse_redis_unix(before_query, query)?,
        Topology::Cluster => {
            let (seeds, db) = parse_redis_authority(before_query)?;
            if db != 0 {
                return Err(invalid("a Redis Cluster has only database 0"));
            }
            check_distinct(&seeds, "redis+cluster")?;
            BackendConfig::RedisCluster { seeds }
        }
        Topology::Sentinel => parse_sentinel(before_query, query)?,
        Topology::Redlock => {
            let (mut servers, db) = parse_redis_authority(before_query)?;
            if servers.len() < 3 {
                return Err(invalid(format!(
                    "redlock needs at least 3 independent Redis masters, the URL names {}",
                    servers.len()
                )));
            }
            for s in &mut servers {
                s.db = db;
            }
            check_distinct(&servers, "redlock")?;
            BackendConfig::Redlock { servers }
        }
    })
}

fn check_distinct(servers: &[RedisServer], scheme: &str) -> Result<()> {
    for (i, s) in servers.iter().enumerate() {
        if servers[..i]
            .iter()
            .any(|o| o.host == s.host && o.port == s.port)
        {
            return Err(invalid(format!("{scheme} URL names {s} twice")));
        }
    }
    Ok(())
}

/// `[[user]:password@]/path/to/redis.sock` with `?db=N`.
fn parse_redis_unix(rest: &str, query: &Query) -> Result<BackendConfig> {
    let (userinfo, path) = match rest.find("@/") {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (username, password) = parse_userinfo(userinfo)?;
    let path = decode(path, "socket path")?;
    if !path.starts_with('/') || path.len() < 2 || path.contains('\0') {
        return Err(invalid(
            "a redis+unix:// URL needs the socket's absolute path: redis+unix:///run/redis/redis.sock",
        ));
    }
    let db = match query.get("db") {
        None => 0,
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|db| *db >= 0)
            .ok_or_else(|| invalid("`db` must be a Redis database number ≥ 0"))?,
    };
    Ok(BackendConfig::RedisUnix {
        path: PathBuf::from(path),
        server: RedisServer {
            host: String::new(),
            port: 0,
            db,
            username,
            password,
        },
    })
}

/// `[[user]:password@]s1[:port],s2…/service[/db]`: the userinfo is the master's; the Sentinels log
/// in with `sentinel_user` and `sentinel_password` (or `sentinel_password_file`).
fn parse_sentinel(rest: &str, query: &Query) -> Result<BackendConfig> {
    let at = rest.rfind('@');
    let slash = match at {
        Some(at) => rest[at..].find('/').map(|s| at + s),
        None => rest.find('/'),
    };
    let Some(slash) = slash else {
        return Err(invalid(
            "a redis+sentinel:// URL names the service: redis+sentinel://s1,s2,s3/mymaster",
        ));
    };
    let (authority, path) = rest.split_at(slash);
    let mut parts = path[1..].splitn(2, '/');
    let service = decode(parts.next().unwrap_or(""), "service name")?;
    if service.is_empty()
        || service.len() > 255
        || service.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(invalid(
            "a redis+sentinel:// URL names the service: redis+sentinel://s1,s2,s3/mymaster",
        ));
    }
    let db = match parts.next().unwrap_or("") {
        "" => 0,
        text => text
            .parse::<i64>()
            .ok()
            .filter(|db| *db >= 0)
            .ok_or_else(|| {
                invalid("the Redis database after the service name must be a number ≥ 0")
            })?,
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let (username, password) = parse_userinfo(userinfo)?;
    let sentinel_user = query.get("sentinel_user").map(str::to_owned);
    let sentinel_password = match (
        query.get("sentinel_password"),
        query.get("sentinel_password_file"),
    ) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "give `sentinel_password` or `sentinel_password_file`, not both",
            ))
        }
        (Some(pw), None) => Some(Secret::new(pw)),
        (None, Some(path)) => Some(read_password_file(path)?),
        (None, None) => None,
    };
    let sentinels = servers(
        hosts,
        DEFAULT_SENTINEL_PORT,
        0,
        sentinel_user,
        sentinel_password,
    )?;
    check_distinct(&sentinels, "redis+sentinel")?;
    Ok(BackendConfig::RedisSentinel {
        sentinels,
        service,
        master: RedisServer {
            host: String::new(),
            port: 0,
            db,
            username,
            password,
        },
    })
}

/// `[[user]:password@]host[:port][,host[:port]…][/db]`
fn parse_redis_authority(rest: &str) -> Result<(Vec<RedisServer>, i64)> {
    let (authority, path) = match rest.find('/') {
        // A '/' inside the userinfo would split wrongly; the last '@' always ends the userinfo.
        Some(slash) if rest[..slash].contains('@') || !rest[slash..].contains('@') => {
            rest.split_at(slash)
        }
        Some(_) => {
            let at = rest.rfind('@').unwrap_or(0);
            let slash = rest[at..].find('/').map_or(rest.len(), |s| at + s);
            rest.split_at(slash)
        }
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let (username, password) = parse_userinfo(userinfo)?;
    let db = match path.trim_start_matches('/') {
        "" => 0,
        text => text
            .parse::<i64>()
            .ok()
            .filter(|db| *db >= 0)
            .ok_or_else(|| invalid("the Redis database in the URL path must be a number ≥ 0"))?,
    };
    Ok((
        servers(hosts, DEFAULT_REDIS_PORT, db, username, password)?,
        db,
    ))
}

/// `host[:port][,host[:port]…]`, each server logging in with the same credentials.
fn servers(
    hosts: &str,
    default_port: u16,
    db: i64,
    username: Option<String>,
    password: Option<Secret>,
) -> Result<Vec<RedisServer>> {
    hosts
        .split(',')
        .map(|host| {
            let (host, port) = split_host_port(host)?;
            Ok(RedisServer {
                host,
                port: port.unwrap_or(default_port),
                db,
                username: username.clone(),
                password: password.clone(),
            })
        })
        .collect()
}
