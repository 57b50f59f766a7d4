//! One URL chooses the backend (CONTRACT.md §2). This module parses it into a typed [`Config`]; backends
//! never see the raw string except PostgreSQL's connection part, which its driver parses.

use crate::error::{Error, Result};
use crate::secret::{redact, Secret};
use percent_encoding::percent_decode_str;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

pub const DEFAULT_PREFIX: &str = "leasehold:";
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_millis(1000);
pub const DEFAULT_POOL_SIZE: u32 = 16;
pub const DEFAULT_TABLE: &str = "leasehold_locks";
/// Timeouts above this are almost certainly a unit mistake (seconds given as milliseconds twice over).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
pub const MAX_POOL_SIZE: u32 = 1024;
pub const DEFAULT_REDIS_PORT: u16 = 6379;

/// Parameters every backend accepts.
pub const COMMON_PARAMS: &[&str] = &["prefix", "connect_timeout_ms", "io_timeout_ms", "pool_size"];
/// Parameters only PostgreSQL URLs accept: Leasehold's own, then the `postgres` crate's.
pub const POSTGRES_PARAMS: &[&str] = &[
    "lock",
    "table",
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendConfig {
    /// `file:///absolute/dir`
    Local { dir: PathBuf },
    /// `redis://` or `rediss://` (TLS)
    Redis { server: RedisServer, tls: bool },
    /// `redlock://h1,h2,h3[,…]`: N ≥ 3 independent masters sharing credentials and db.
    Redlock { servers: Vec<RedisServer> },
    /// `postgres://` / `postgresql://`
    Postgres(PostgresConfig),
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostgresLockMode {
    /// Session advisory locks (the default).
    Advisory,
    /// A table with the key as primary key.
    Table,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    pub mode: PostgresLockMode,
    /// Table name for table mode, validated (`name` or `schema.name`, identifiers only).
    pub table: String,
    /// The connection URL with Leasehold's own parameters removed, for the `postgres` crate.
    pub connection: Secret,
    /// Secrets that appear in the connection URL, for masking driver errors.
    pub secrets: Vec<Secret>,
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
            BackendConfig::Redis { server, .. } => server
                .password
                .iter()
                .map(|p| p.expose().to_owned())
                .collect(),
            BackendConfig::Redlock { servers } => servers
                .iter()
                .filter_map(|s| s.password.as_ref())
                .map(|p| p.expose().to_owned())
                .collect(),
            BackendConfig::Postgres(pg) => {
                pg.secrets.iter().map(|s| s.expose().to_owned()).collect()
            }
        }
    }

    /// `scheme://host…` without credentials, for logs and error messages.
    pub fn describe(&self) -> String {
        match &self.backend {
            BackendConfig::Local { dir } => format!("file://{}", dir.display()),
            BackendConfig::Redis { server, tls } => {
                format!(
                    "{}://{server}/{}",
                    if *tls { "rediss" } else { "redis" },
                    server.db
                )
            }
            BackendConfig::Redlock { servers } => {
                let hosts: Vec<String> = servers.iter().map(|s| s.to_string()).collect();
                format!("redlock://{}", hosts.join(","))
            }
            BackendConfig::Postgres(pg) => format!(
                "postgres ({})",
                match pg.mode {
                    PostgresLockMode::Advisory => "advisory".to_owned(),
                    PostgresLockMode::Table => format!("table {}", pg.table),
                }
            ),
        }
    }
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

/// Everything between `://` and the last `@` before the path, and its `:`-separated pieces: whatever
/// could be a password, even in a URL too broken to parse.
fn secret_parts(url: &str) -> Vec<&str> {
    let Some((_, rest)) = url.split_once("://") else {
        return vec![];
    };
    let Some(at) = rest.rfind('@') else {
        return vec![];
    };
    let userinfo = &rest[..at];
    let mut parts = vec![userinfo];
    if let Some((_, pw)) = userinfo.split_once(':') {
        parts.push(pw);
    }
    // Longest first, so a piece never leaves part of a longer secret showing.
    parts.sort_by_key(|p| std::cmp::Reverse(p.len()));
    parts
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

fn decode(text: &str, what: &str) -> Result<String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| invalid(format!("the URL's {what} is not valid UTF-8 once decoded")))
}

struct Query<'a> {
    /// (name, decoded value, raw pair)
    pairs: Vec<(String, String, &'a str)>,
}

impl<'a> Query<'a> {
    fn parse(query: &'a str, accepted: &[&str]) -> Result<Self> {
        let mut pairs: Vec<(String, String, &str)> = Vec::new();
        for raw in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = raw.split_once('=').unwrap_or((raw, ""));
            let name = decode(name, "parameter name")?;
            if !accepted.contains(&name.as_str()) {
                return Err(invalid(format!(
                    "unknown URL parameter `{}`; accepted: {}",
                    name.escape_debug(),
                    accepted.join(", ")
                )));
            }
            if pairs.iter().any(|(n, _, _)| *n == name) {
                return Err(invalid(format!("URL parameter `{name}` is given twice")));
            }
            let value = decode(value, "parameter value")?;
            pairs.push((name, value, raw));
        }
        Ok(Query { pairs })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, v, _)| v.as_str())
    }

    fn millis(&self, name: &str, default: Duration) -> Result<Duration> {
        let Some(text) = self.get(name) else {
            return Ok(default);
        };
        let ms: u64 = text.parse().map_err(|_| {
            invalid(format!(
                "`{name}` must be a whole number of milliseconds, got `{}`",
                text.escape_debug()
            ))
        })?;
        let d = Duration::from_millis(ms);
        if ms == 0 || d > MAX_TIMEOUT {
            return Err(invalid(format!(
                "`{name}` must be between 1 and {} ms, got {ms}",
                MAX_TIMEOUT.as_millis()
            )));
        }
        Ok(d)
    }
}

fn parse(url: &str) -> Result<Config> {
    if url.trim().is_empty() {
        return Err(invalid("the backend URL is empty"));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid(
            "not a backend URL (expected file://, redis://, rediss://, redlock://, postgres:// or postgresql://)",
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let is_pg = matches!(scheme.as_str(), "postgres" | "postgresql");
    let accepted: Vec<&str> = if is_pg {
        COMMON_PARAMS
            .iter()
            .chain(POSTGRES_PARAMS)
            .copied()
            .collect()
    } else {
        COMMON_PARAMS.to_vec()
    };
    if !matches!(
        scheme.as_str(),
        "file" | "redis" | "rediss" | "redlock" | "postgres" | "postgresql"
    ) {
        return Err(invalid(format!(
            "unknown URL scheme `{}`; expected file, redis, rediss, redlock, postgres or postgresql",
            scheme.escape_debug()
        )));
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

    let backend = match scheme.as_str() {
        "file" => parse_file(before_query)?,
        "redis" | "rediss" => {
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
            BackendConfig::Redis {
                server,
                tls: scheme == "rediss",
            }
        }
        "redlock" => {
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
            for (i, s) in servers.iter().enumerate() {
                if servers[..i]
                    .iter()
                    .any(|o| o.host == s.host && o.port == s.port)
                {
                    return Err(invalid(format!("redlock URL names {s} twice")));
                }
            }
            BackendConfig::Redlock { servers }
        }
        _ => BackendConfig::Postgres(parse_postgres(&scheme, before_query, &query)?),
    };
    Ok(Config {
        backend,
        prefix,
        connect_timeout,
        io_timeout,
        pool_size,
    })
}

fn parse_file(rest: &str) -> Result<BackendConfig> {
    // rest is "host/path"; only an empty host or localhost makes sense for files on this machine.
    let slash = rest.find('/').unwrap_or(rest.len());
    let (host, path) = rest.split_at(slash);
    if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
        return Err(invalid(
            "a file:// URL must name a local directory: file:///absolute/dir",
        ));
    }
    let path = decode(path, "path")?;
    if !path.starts_with('/') || path.len() < 2 {
        return Err(invalid(
            "a file:// URL needs an absolute directory: file:///absolute/dir",
        ));
    }
    if path.contains('\0') {
        return Err(invalid("the directory in a file:// URL contains NUL"));
    }
    Ok(BackendConfig::Local {
        dir: PathBuf::from(path),
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
    let (username, password) = match userinfo {
        None => (None, None),
        Some(info) => {
            let (user, pw) = match info.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (info, None),
            };
            let user = decode(user, "user name")?;
            let pw = pw.map(|p| decode(p, "password")).transpose()?;
            (
                (!user.is_empty()).then_some(user),
                pw.filter(|p| !p.is_empty()).map(Secret::new),
            )
        }
    };
    let db = match path.trim_start_matches('/') {
        "" => 0,
        text => text
            .parse::<i64>()
            .ok()
            .filter(|db| *db >= 0)
            .ok_or_else(|| invalid("the Redis database in the URL path must be a number ≥ 0"))?,
    };
    let mut servers = Vec::new();
    for host in hosts.split(',') {
        let (host, port) = split_host_port(host)?;
        servers.push(RedisServer {
            host,
            port: port.unwrap_or(DEFAULT_REDIS_PORT),
            db,
            username: username.clone(),
            password: password.clone(),
        });
    }
    Ok((servers, db))
}

fn split_host_port(text: &str) -> Result<(String, Option<u16>)> {
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| invalid("an IPv6 host in the URL lacks its closing `]`"))?;
        match after {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| invalid("unexpected text after an IPv6 host in the URL"))?,
                ),
            ),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(invalid("the URL names no host"));
    }
    let host = decode(host, "host")?;
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "/?#@".contains(c))
    {
        return Err(invalid(
            "the URL's host name has characters a host cannot have",
        ));
    }
    let port = match port {
        None => None,
        // Never echo the port text: in a mangled URL it may be a piece of the password.
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| invalid("the URL has an invalid port (expected 1 to 65535)"))?,
        ),
    };
    Ok((host, port))
}

fn parse_postgres(scheme: &str, before_query: &str, query: &Query) -> Result<PostgresConfig> {
    let mode = match query.get("lock") {
        None | Some("advisory") => PostgresLockMode::Advisory,
        Some("table") => PostgresLockMode::Table,
        Some(other) => {
            return Err(invalid(format!(
                "`lock` must be `advisory` or `table`, got `{}`",
                other.escape_debug()
            )))
        }
    };
    let table = match (mode, query.get("table")) {
        (PostgresLockMode::Advisory, Some(_)) => {
            return Err(invalid("`table` only applies with `lock=table`"))
        }
        (_, Some(name)) => {
            validate_table_name(name)?;
            name.to_owned()
        }
        (_, None) => DEFAULT_TABLE.to_owned(),
    };
    let mut secrets = Vec::new();
    let authority = before_query.split('/').next().unwrap_or("");
    if let Some(at) = authority.rfind('@') {
        if let Some((_, pw)) = authority[..at].split_once(':') {
            if !pw.is_empty() {
                secrets.push(Secret::new(decode(pw, "password")?));
                secrets.push(Secret::new(pw));
            }
        }
    }
    if let Some(pw) = query.get("password") {
        secrets.push(Secret::new(pw));
    }
    let own: Vec<&str> = COMMON_PARAMS
        .iter()
        .chain(["lock", "table"].iter())
        .copied()
        .collect();
    let passed: Vec<&str> = query
        .pairs
        .iter()
        .filter(|(n, _, _)| !own.contains(&n.as_str()))
        .map(|(_, _, raw)| *raw)
        .collect();
    let mut connection = format!("{scheme}://{before_query}");
    if !passed.is_empty() {
        connection.push('?');
        connection.push_str(&passed.join("&"));
    }
    Ok(PostgresConfig {
        mode,
        table,
        connection: Secret::new(connection),
        secrets,
    })
}

/// `name` or `schema.name`, each an SQL identifier of at most 63 bytes. The backend still quotes it.
pub fn validate_table_name(name: &str) -> Result<()> {
    let ok_ident = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() <= 2 && parts.iter().all(|p| ok_ident(p)) {
        Ok(())
    } else {
        Err(invalid(format!(
            "table name `{}` is not an identifier (letters, digits and _, optionally schema.table)",
            name.escape_debug()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(url: &str) -> String {
        let e = Config::parse(url).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{url}");
        e.to_string()
    }

    #[test]
    fn file_urls() {
        let c = Config::parse("file:///tmp/locks").unwrap();
        assert_eq!(
            c.backend,
            BackendConfig::Local {
                dir: "/tmp/locks".into()
            }
        );
        assert_eq!(c.prefix, DEFAULT_PREFIX);
        assert_eq!(c.pool_size, DEFAULT_POOL_SIZE);
        let c = Config::parse("file://localhost/tmp/a%20b?prefix=x:").unwrap();
        assert_eq!(
            c.backend,
            BackendConfig::Local {
                dir: "/tmp/a b".into()
            }
        );
        assert_eq!(c.prefix, "x:");
        err("file://relative/dir");
        err("file:///");
    }

    #[test]
    fn redis_urls() {
        let c = Config::parse(
            "redis://user:p%40ss@example.com:6380/3?prefix=app:&connect_timeout_ms=250&io_timeout_ms=500&pool_size=4",
        )
        .unwrap();
        let BackendConfig::Redis { server, tls } = &c.backend else {
            panic!()
        };
        assert!(!tls);
        assert_eq!(server.host, "example.com");
        assert_eq!(server.port, 6380);
        assert_eq!(server.db, 3);
        assert_eq!(server.username.as_deref(), Some("user"));
        assert_eq!(server.password.as_ref().unwrap().expose(), "p@ss");
        assert_eq!(c.connect_timeout, Duration::from_millis(250));
        assert_eq!(c.io_timeout, Duration::from_millis(500));
        assert_eq!(c.pool_size, 4);
        assert!(!format!("{c:?} {c}").contains("p@ss"));

        let c = Config::parse("rediss://:secret@[::1]").unwrap();
        let BackendConfig::Redis { server, tls } = &c.backend else {
            panic!()
        };
        assert!(tls);
        assert_eq!((server.host.as_str(), server.port), ("::1", 6379));
        assert_eq!(server.username, None);
    }

    #[test]
    fn redlock_urls() {
        let c = Config::parse("redlock://:pw@a:1,b:2,c/2").unwrap();
        let BackendConfig::Redlock { servers } = &c.backend else {
            panic!()
        };
        assert_eq!(servers.len(), 3);
        assert!(servers.iter().all(|s| s.db == 2 && s.password.is_some()));
        assert_eq!(servers[2].port, DEFAULT_REDIS_PORT);
        err("redlock://a,b");
        err("redlock://a,a,b");
    }

    #[test]
    fn postgres_urls() {
        let c = Config::parse(
            "postgres://u:pw@localhost:5432/db?lock=table&table=my_locks&sslmode=disable&prefix=p:",
        )
        .unwrap();
        let BackendConfig::Postgres(pg) = &c.backend else {
            panic!()
        };
        assert_eq!(pg.mode, PostgresLockMode::Table);
        assert_eq!(pg.table, "my_locks");
        assert_eq!(
            pg.connection.expose(),
            "postgres://u:pw@localhost:5432/db?sslmode=disable"
        );
        assert_eq!(c.prefix, "p:");
        let c = Config::parse("postgresql://localhost/db").unwrap();
        let BackendConfig::Postgres(pg) = &c.backend else {
            panic!()
        };
        assert_eq!(pg.mode, PostgresLockMode::Advisory);
        assert_eq!(pg.table, DEFAULT_TABLE);
        err("postgres://h/db?lock=advisory&table=t");
        err("postgres://h/db?lock=table&table=x;drop");
        err("postgres://h/db?lock=rows");
    }

    #[test]
    fn bad_urls_are_clear_and_never_leak_passwords() {
        assert!(err("").contains("empty"));
        assert!(err("not a url").contains("not a backend URL"));
        assert!(err("mysql://h/db").contains("unknown URL scheme"));
        let e = err("redis://h?bogus=1");
        assert!(e.contains("`bogus`") && e.contains("prefix, connect_timeout_ms"));
        err("redis://h:0");
        err("redis://h:99999");
        err("redis://h/x");
        err("redis://h?pool_size=0");
        err("redis://h?io_timeout_ms=-1");
        err("redis://h?prefix=a&prefix=b");
        for url in [
            "redis://user:Sup3rS3cret@h:notaport",
            "redis://:Sup3rS3cret/x@h:bad",
            "redlock://:Sup3rS3cret@a,b",
            "postgres://u:Sup3rS3cret@h/db?wat=1",
            "redis://:Sup3rS3cret@h?pool_size=Sup3rS3cret",
        ] {
            let e = err(url);
            assert!(!e.contains("Sup3rS3cret"), "{url} -> {e}");
        }
    }
}
