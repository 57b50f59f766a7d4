//! `mysql://` and `mariadb://` (the same backend): host, credentials, database, lock mode, table and
//! TLS, parsed here so the backend hands its driver typed options and never a URL with a password.

use super::params::{decode, invalid, parse_userinfo, read_password_file, split_host_port, Query};
use super::postgres::validate_table_name;
use crate::error::Result;
use crate::secret::Secret;
use std::path::PathBuf;

pub const DEFAULT_MYSQL_PORT: u16 = 3306;

/// The table of table mode, and the fence table of named mode is `<this>_fences`.
pub const DEFAULT_MYSQL_TABLE: &str = "leasehold_locks";

/// Parameters only MySQL/MariaDB URLs accept.
pub const MYSQL_PARAMS: &[&str] = &[
    "lock",
    "table",
    "ssl-mode",
    "ssl-ca",
    "ssl-cert",
    "ssl-key",
    "password_file",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MysqlLockMode {
    /// `GET_LOCK` on a session the lease owns (the default).
    Named,
    /// An InnoDB table with a unique key.
    Table,
}

/// `ssl-mode`, with the MySQL client's meanings. `PREFERRED` (a silent fall-back to plain text) is
/// not offered: a connection is either plain text or TLS that must succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MysqlSslMode {
    /// Plain text (the default when no `ssl-*` parameter is given).
    Disabled,
    /// TLS or nothing; the certificate is checked only when `ssl-ca` is given (then as `VERIFY_CA`).
    Required,
    /// TLS, the certificate signed by `ssl-ca`'s CA; the host name is not checked.
    VerifyCa,
    /// TLS, the certificate signed by `ssl-ca`'s CA and valid for the host name.
    VerifyIdentity,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MysqlConfig {
    pub mode: MysqlLockMode,
    /// Table mode's table (validated; the backend quotes it). Named mode keeps its fences in
    /// `<table>_fences`.
    pub table: String,
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    /// From the URL or `password_file`.
    pub password: Option<Secret>,
    /// The database (schema) the tables live in; `None` uses the account's default.
    pub database: Option<String>,
    pub ssl_mode: MysqlSslMode,
    /// `ssl-ca`: PEM file of the CA(s) that sign the server's certificate.
    pub ssl_ca: Option<PathBuf>,
    /// `ssl-cert` and `ssl-key`: PEM files of the client certificate and its key.
    pub ssl_cert: Option<PathBuf>,
    pub ssl_key: Option<PathBuf>,
}

impl MysqlConfig {
    /// Every secret this configuration holds (and the forms a driver may echo).
    pub fn secrets(&self) -> Vec<String> {
        self.password
            .iter()
            .map(|p| p.expose().to_owned())
            .collect()
    }
}

pub(super) fn parse_mysql(before_query: &str, query: &Query) -> Result<MysqlConfig> {
    let mode = match query.get("lock") {
        None | Some("named") => MysqlLockMode::Named,
        Some("table") => MysqlLockMode::Table,
        Some(other) => {
            return Err(invalid(format!(
                "`lock` must be `named` or `table`, got `{}`",
                other.escape_debug()
            )))
        }
    };
    let table = match query.get("table") {
        Some(name) => {
            validate_table_name(name)?;
            // `_fences`, `_shares` and `_permits` are appended: keep within MySQL's 64.
            if name.rsplit('.').next().unwrap_or(name).len() > 56 {
                return Err(invalid(
                    "a MySQL table name may have at most 56 characters (Leasehold appends `_permits`)",
                ));
            }
            name.to_owned()
        }
        None => DEFAULT_MYSQL_TABLE.to_owned(),
    };
    let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let (user, mut password) = parse_userinfo(userinfo)?;
    let (host, port) = split_host_port(hostport)?;
    if host.contains(',') {
        return Err(invalid("a MySQL URL names one host"));
    }
    let database = match path.trim_end_matches('/') {
        "" => None,
        db => {
            let db = decode(db, "database name")?;
            if db.contains('/')
                || db.contains('`')
                || db.len() > 64
                || db.chars().any(char::is_control)
            {
                return Err(invalid(
                    "the URL's database name must be one name of at most 64 characters",
                ));
            }
            Some(db)
        }
    };
    if let Some(file) = query.get("password_file") {
        if password.is_some() {
            return Err(invalid(
                "the URL gives a password and a password_file: give one of them",
            ));
        }
        password = Some(read_password_file(file)?);
    }
    let path = |name: &str| query.get(name).filter(|p| !p.is_empty()).map(PathBuf::from);
    let (ssl_ca, ssl_cert, ssl_key) = (path("ssl-ca"), path("ssl-cert"), path("ssl-key"));
    let any_tls_file = ssl_ca.is_some() || ssl_cert.is_some();
    let ssl_mode = match query
        .get("ssl-mode")
        .map(str::to_ascii_uppercase)
        .as_deref()
    {
        None if any_tls_file => MysqlSslMode::Required,
        None | Some("DISABLED") => MysqlSslMode::Disabled,
        Some("REQUIRED") => MysqlSslMode::Required,
        Some("VERIFY_CA") => MysqlSslMode::VerifyCa,
        Some("VERIFY_IDENTITY") => MysqlSslMode::VerifyIdentity,
        Some(_) => {
            return Err(invalid(format!(
                "`ssl-mode` must be DISABLED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY, got `{}` \
                 (PREFERRED is not offered: it falls back to plain text silently)",
                query.get("ssl-mode").unwrap_or("").escape_debug()
            )))
        }
    };
    // REQUIRED with a CA checks it, as the MySQL client does.
    let ssl_mode = match ssl_mode {
        MysqlSslMode::Required if ssl_ca.is_some() => MysqlSslMode::VerifyCa,
        other => other,
    };
    if matches!(
        ssl_mode,
        MysqlSslMode::VerifyCa | MysqlSslMode::VerifyIdentity
    ) && ssl_ca.is_none()
    {
        return Err(invalid(
            "`ssl-mode=VERIFY_CA` and `VERIFY_IDENTITY` need `ssl-ca=` (a PEM file of the CA)",
        ));
    }
    if ssl_cert.is_some() != ssl_key.is_some() {
        return Err(invalid("give both `ssl-cert` and `ssl-key`, or neither"));
    }
    if ssl_mode == MysqlSslMode::Disabled && any_tls_file {
        return Err(invalid(
            "`ssl-mode=DISABLED` with TLS files: drop them, or choose another ssl-mode",
        ));
    }
    Ok(MysqlConfig {
        mode,
        table,
        host,
        port: port.unwrap_or(DEFAULT_MYSQL_PORT),
        user,
        password,
        database,
        ssl_mode,
        ssl_ca,
        ssl_cert,
        ssl_key,
    })
}
