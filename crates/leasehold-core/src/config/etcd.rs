//! `etcd://` and `etcds://` (TLS): the members of one etcd cluster, spoken to through their HTTP/JSON
//! gateway, with etcd's own user/password authentication.

use super::params::{invalid, parse_userinfo, read_password_file, split_host_port, Query};
use super::redis::{tls_options, TlsOptions};
use crate::error::Result;
use crate::secret::Secret;
use std::fmt;

pub const DEFAULT_ETCD_PORT: u16 = 2379;

/// Parameters only etcd URLs accept.
pub const ETCD_PARAMS: &[&str] = &["password_file"];

/// The most members one URL may name: a cluster has 3, 5 or 7; more is a mistake.
const MAX_MEMBERS: usize = 64;

/// One member's client listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdEndpoint {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for EtcdEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// The members to talk to, in the URL's order (any one of them serves every call).
    pub endpoints: Vec<EtcdEndpoint>,
    /// etcd's user/password authentication (who the client is; TLS client certificates secure the
    /// transport).
    pub user: Option<String>,
    /// From the URL or `password_file`.
    pub password: Option<Secret>,
    /// `etcds://`: TLS, with these files (`None` for plain text).
    pub tls: Option<TlsOptions>,
}

impl EtcdConfig {
    /// Every secret this configuration holds.
    pub fn secrets(&self) -> Vec<String> {
        self.password
            .iter()
            .map(|p| p.expose().to_owned())
            .collect()
    }

    /// `h1:p1,h2:p2,…`
    pub fn hosts(&self) -> String {
        self.endpoints
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

pub(super) fn parse_etcd(tls: bool, before_query: &str, query: &Query) -> Result<EtcdConfig> {
    let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
    if !path.is_empty() {
        return Err(invalid(
            "an etcd URL has no path: etcd://[user[:password]@]host1:2379,host2:2379,…[?prefix=…]",
        ));
    }
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let (user, mut password) = parse_userinfo(userinfo)?;
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        let (host, port) = split_host_port(host)?;
        endpoints.push(EtcdEndpoint {
            host,
            port: port.unwrap_or(DEFAULT_ETCD_PORT),
        });
    }
    if endpoints.len() > MAX_MEMBERS {
        return Err(invalid(format!(
            "an etcd URL names at most {MAX_MEMBERS} members"
        )));
    }
    if let Some(file) = query.get("password_file") {
        if password.is_some() {
            return Err(invalid(
                "the URL gives a password and a password_file: give one of them",
            ));
        }
        password = Some(read_password_file(file)?);
    }
    if password.is_some() && user.is_none() {
        return Err(invalid(
            "etcd authenticates a user: give `user:password@` (or `user@` and password_file)",
        ));
    }
    let tls = tls.then(|| tls_options(query)).transpose()?;
    Ok(EtcdConfig {
        endpoints,
        user,
        password,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{BackendConfig, Config, EtcdConfig};
    use std::time::Duration;

    fn etcd(url: &str) -> (Config, EtcdConfig) {
        let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let BackendConfig::Etcd(etcd) = config.backend.clone() else {
            panic!("{url}: not etcd");
        };
        (config, etcd)
    }

    fn err(url: &str) -> String {
        Config::parse(url).unwrap_err().to_string()
    }

    #[test]
    fn members_credentials_and_common_parameters() {
        let (config, e) = etcd(
            "etcd://app:s3cret@10.0.0.1:2381,[::1],node3?prefix=p:&connect_timeout_ms=200\
             &io_timeout_ms=300&pool_size=4&lock_delay_ms=50",
        );
        let hosts: Vec<String> = e.endpoints.iter().map(ToString::to_string).collect();
        assert_eq!(hosts, ["10.0.0.1:2381", "[::1]:2379", "node3:2379"]);
        assert_eq!(e.user.as_deref(), Some("app"));
        assert_eq!(e.password.as_ref().unwrap().expose(), "s3cret");
        assert!(e.tls.is_none());
        assert_eq!(config.prefix, "p:");
        assert_eq!(config.connect_timeout, Duration::from_millis(200));
        assert_eq!(config.io_timeout, Duration::from_millis(300));
        assert_eq!(config.pool_size, 4);
        assert_eq!(config.lock_delay, Duration::from_millis(50));
        assert_eq!(config.secrets(), ["s3cret"]);
        let shown = format!("{config} {config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.starts_with("etcd://10.0.0.1:2381,[::1]:2379,node3:2379"));
    }

    #[test]
    fn tls_twin_takes_the_tls_files() {
        let (config, e) =
            etcd("etcds://a,b,c?tls_ca_file=/ca.pem&tls_cert_file=/c.pem&tls_key_file=/k.pem");
        let tls = e.tls.unwrap();
        assert_eq!(tls.ca_file.unwrap().to_str(), Some("/ca.pem"));
        assert_eq!(tls.key_file.unwrap().to_str(), Some("/k.pem"));
        assert!(!tls.insecure);
        assert!(config.to_string().starts_with("etcds://"));
        assert!(etcd("etcds://a?tls_insecure=true").1.tls.unwrap().insecure);
        assert!(err("etcd://a?tls_ca_file=/ca.pem").contains("unknown URL parameter"));
        assert!(err("etcds://a?tls_cert_file=/c.pem").contains("tls_key_file"));
    }

    #[test]
    fn password_file_and_refusals() {
        let dir = std::env::temp_dir().join(format!("lh-etcd-pw-{}", std::process::id()));
        std::fs::write(&dir, "from-file\n").unwrap();
        let url = format!("etcd://app@h?password_file={}", dir.display());
        assert_eq!(etcd(&url).1.password.unwrap().expose(), "from-file");
        let both = format!("etcd://app:x@h?password_file={}", dir.display());
        assert!(err(&both).contains("give one of them"));
        std::fs::remove_file(&dir).unwrap();
        assert!(err("etcd://:pw-only@h").contains("user"));
        assert!(!err("etcd://:pw-only@h").contains("pw-only"));
        assert!(err("etcd://h/path").contains("no path"));
        assert!(err("etcd://h:0").contains("invalid port"));
        assert!(err("etcd://h?lock=table").contains("accepted: prefix"));
        assert!(err("etcd://").contains("no host"));
        assert!(!err("etcd://u:hunter2@h:99999").contains("hunter2"));
    }
}
