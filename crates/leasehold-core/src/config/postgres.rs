//! `postgres://` and `postgresql://`: Leasehold's own parameters (lock mode, table, TLS files, password
//! file) taken out, the rest handed to the driver as its connection string.

use super::params::{decode, invalid, read_password_file, Query};
use super::COMMON_PARAMS;
use crate::error::Result;
use crate::secret::Secret;
use std::path::PathBuf;

pub const DEFAULT_TABLE: &str = "leasehold_locks";

/// Parameters only PostgreSQL URLs accept: Leasehold's own, then the `postgres` crate's.
pub const POSTGRES_PARAMS: &[&str] = &[
    "lock",
    "table",
    "pooler",
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "password_file",
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostgresLockMode {
    /// Session advisory locks (the default).
    Advisory,
    /// A table with the key as primary key.
    Table,
}

/// `pooler=`: what sits between the client and the server, as far as it matters to Leasehold.
/// A client cannot ask a pooler its mode, only infer it, so the URL may say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostgresPooler {
    /// A direct connection (or a proxy that keeps one server session per client connection).
    None,
    /// A pooler in session pooling: one server session per client connection while it lasts.
    Session,
    /// A pooler in transaction (or statement) pooling: between transactions the server session
    /// goes to other clients, so nothing may be left on it.
    Transaction,
}

impl PostgresPooler {
    /// The URL's spelling.
    pub fn name(self) -> &'static str {
        match self {
            PostgresPooler::None => "none",
            PostgresPooler::Session => "session",
            PostgresPooler::Transaction => "transaction",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    pub mode: PostgresLockMode,
    /// `pooler=`; `None` when the URL does not say: the backend detects what it can at connect
    /// and takes `none` otherwise.
    pub pooler: Option<PostgresPooler>,
    /// Table name for table mode, validated (`name` or `schema.name`, identifiers only).
    pub table: String,
    /// The connection URL with Leasehold's own parameters removed, for the `postgres` crate.
    pub connection: Secret,
    /// Secrets that appear in the connection URL, for masking driver errors.
    pub secrets: Vec<Secret>,
    /// The password read from `password_file`, if given (it is not in `connection`).
    pub password: Option<Secret>,
    /// `sslmode` (libpq's default: `prefer`). Not in `connection`: the backend applies it.
    pub ssl_mode: PostgresSslMode,
    /// `sslrootcert`: PEM file of the CA(s) that sign the server's certificate.
    pub ssl_root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`: PEM files of the client certificate and its key (mutual TLS).
    pub ssl_cert: Option<PathBuf>,
    pub ssl_key: Option<PathBuf>,
}

/// `sslmode`, with libpq's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostgresSslMode {
    /// Plain text only.
    Disable,
    /// TLS if the server offers it, plain text otherwise; the certificate is not checked.
    Prefer,
    /// TLS or nothing; the certificate is checked against `sslrootcert` only when one is given.
    Require,
    /// TLS, the certificate signed by `sslrootcert`'s CA; the host name is not checked.
    VerifyCa,
    /// TLS, the certificate signed by `sslrootcert`'s CA and valid for the host name.
    VerifyFull,
}

pub(super) fn parse_postgres(
    scheme: &str,
    before_query: &str,
    query: &Query,
) -> Result<PostgresConfig> {
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
    let pooler = match query.get("pooler") {
        None => None,
        Some("none") => Some(PostgresPooler::None),
        Some("session") => Some(PostgresPooler::Session),
        Some("transaction") => Some(PostgresPooler::Transaction),
        Some(other) => {
            return Err(invalid(format!(
                "`pooler` must be `none`, `session` or `transaction`, got `{}`",
                other.escape_debug()
            )))
        }
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
    let ssl_mode = match query.get("sslmode") {
        None | Some("prefer") => PostgresSslMode::Prefer,
        Some("disable") => PostgresSslMode::Disable,
        Some("require") => PostgresSslMode::Require,
        Some("verify-ca") => PostgresSslMode::VerifyCa,
        Some("verify-full") => PostgresSslMode::VerifyFull,
        Some(other) => {
            return Err(invalid(format!(
                "`sslmode` must be disable, prefer, require, verify-ca or verify-full, got `{}`",
                other.escape_debug()
            )))
        }
    };
    let path = |name: &str| query.get(name).filter(|p| !p.is_empty()).map(PathBuf::from);
    let (ssl_root_cert, ssl_cert, ssl_key) = (path("sslrootcert"), path("sslcert"), path("sslkey"));
    if matches!(
        ssl_mode,
        PostgresSslMode::VerifyCa | PostgresSslMode::VerifyFull
    ) && ssl_root_cert.is_none()
    {
        return Err(invalid(
            "`sslmode=verify-ca` and `verify-full` need `sslrootcert=` (a PEM file of the CA)",
        ));
    }
    if ssl_cert.is_some() != ssl_key.is_some() {
        return Err(invalid("give both `sslcert` and `sslkey`, or neither"));
    }
    if ssl_mode == PostgresSslMode::Disable && (ssl_root_cert.is_some() || ssl_cert.is_some()) {
        return Err(invalid(
            "`sslmode=disable` with TLS files: drop them, or choose another sslmode",
        ));
    }
    let password = match query.get("password_file") {
        None => None,
        Some(file) => {
            if !secrets.is_empty() {
                return Err(invalid(
                    "the URL gives a password and a password_file: give one of them",
                ));
            }
            let password = read_password_file(file)?;
            secrets.push(password.clone());
            Some(password)
        }
    };
    let own: Vec<&str> = COMMON_PARAMS
        .iter()
        .chain(
            [
                "lock",
                "table",
                "pooler",
                "sslmode",
                "sslrootcert",
                "sslcert",
                "sslkey",
                "password_file",
            ]
            .iter(),
        )
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
        pooler,
        table,
        connection: Secret::new(connection),
        secrets,
        password,
        ssl_mode,
        ssl_root_cert,
        ssl_cert,
        ssl_key,
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
