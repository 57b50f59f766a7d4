//! `ssl-mode`, `ssl-ca`, `ssl-cert` and `ssl-key` as the driver's rustls options, with the MySQL
//! client's meanings: `REQUIRED` encrypts without checking (unless `ssl-ca` is given, which the
//! parser turns into `VERIFY_CA`), `VERIFY_CA` checks the chain, `VERIFY_IDENTITY` also the host
//! name. Files are checked here, so a missing one is an `InvalidArgument` at connect time rather
//! than a failure on every session.

use leasehold_core::config::{MysqlConfig, MysqlSslMode};
use leasehold_core::{Error, Result};
use mysql::{ClientIdentity, SslOpts};
use std::path::Path;

pub(crate) fn ssl_opts(config: &MysqlConfig) -> Result<Option<SslOpts>> {
    let readable = |path: &Path, what: &str| -> Result<()> {
        std::fs::metadata(path)
            .map(|_| ())
            .map_err(|e| Error::invalid(format!("{what} {}: {}", path.display(), e.kind())))
    };
    let mut opts = SslOpts::default();
    match config.ssl_mode {
        MysqlSslMode::Disabled => return Ok(None),
        MysqlSslMode::Required => {
            opts = opts
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true);
        }
        MysqlSslMode::VerifyCa => opts = opts.with_danger_skip_domain_validation(true),
        MysqlSslMode::VerifyIdentity => {}
        _ => return Err(Error::invalid("this ssl-mode is not supported")),
    }
    if let Some(ca) = &config.ssl_ca {
        readable(ca, "ssl-ca")?;
        opts = opts.with_root_cert_path(Some(ca.clone()));
    }
    if let (Some(cert), Some(key)) = (&config.ssl_cert, &config.ssl_key) {
        readable(cert, "ssl-cert")?;
        readable(key, "ssl-key")?;
        opts = opts.with_client_identity(Some(ClientIdentity::new(cert.clone(), key.clone())));
    }
    Ok(Some(opts))
}
