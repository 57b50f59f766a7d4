//! `leasehold doctor`: connects as a client would and judges the deployment ([`doctor`]).

use leasehold_core::doctor::{Diagnosis, Promise, Report, Verdict};
use leasehold_core::secret::redact;
use leasehold_core::{BackendConfig, Config, Error, Result};

/// Connects to the backend `url` names as [`crate::connect`] does and judges each promise the
/// README makes there (see [`leasehold_core::doctor`]). Reports, never refuses: a deployment that
/// `connect` refuses is judged, with the refusal as the reason. `InvalidArgument` only for a URL
/// that does not parse; `Unavailable` when the backend cannot be reached.
pub fn doctor(url: &str) -> Result<Report> {
    let config = Config::parse(url)?;
    let diagnosis = match crate::connect_config(&for_doctor(&config)) {
        Ok(client) => {
            let mut d = client.backend().diagnose()?;
            common(&mut d, &config);
            Ok((client.backend_name().to_owned(), d))
        }
        // What connect refuses is a verdict here, not an error.
        Err(Error::InvalidArgument(why)) => {
            let mut d = Diagnosis::new();
            d.judge(
                Promise::Exclusion,
                Verdict::DoesNotHold,
                format!("connect refuses this deployment: {why}"),
            );
            Ok((backend_of(&config).to_owned(), d))
        }
        Err(other) => Err(other),
    };
    let (backend, d) = diagnosis.map_err(|e| e.redacted(&config.secrets()))?;
    Ok(Report {
        url: hide_passwords(url, &config),
        diagnosis: d.complete(&backend),
        backend,
    })
}

/// The configuration the doctor connects with: the user's, with every refusal that has a URL
/// switch turned off, so that what it would refuse is read and judged instead.
/// (The Redis backend's diagnosis reads `maxmemory-policy` itself, on every node.)
fn for_doctor(config: &Config) -> Config {
    let mut config = config.clone();
    config.redis.allow_eviction = true;
    config
}

/// What every backend shares: the client's own deadlines, and TLS as configured.
fn common(d: &mut Diagnosis, config: &Config) {
    let ms = |t: std::time::Duration| t.as_millis();
    d.fact("connect_timeout_ms", ms(config.connect_timeout));
    d.fact("io_timeout_ms", ms(config.io_timeout));
    if let Some(tls) = &config.redis.tls {
        d.fact(
            "tls",
            if tls.insecure {
                "on, not verified (tls_insecure=true)"
            } else {
                "on, verified"
            },
        );
    } else if !matches!(
        config.backend,
        BackendConfig::Local { .. } | BackendConfig::Postgres(_) | BackendConfig::Mysql(_)
    ) {
        d.fact("tls", "off");
    }
    if config.redis.replicas > 0 {
        d.fact("replicas", config.redis.replicas);
    }
    if !d.has(Promise::BoundedCalls) {
        d.judge(
            Promise::BoundedCalls,
            Verdict::Holds,
            format!(
                "every call has a client-side deadline (connect_timeout_ms={}, \
                 io_timeout_ms={}), whatever the server does",
                ms(config.connect_timeout),
                ms(config.io_timeout)
            ),
        );
    }
}

/// The backend's name when there is no client to ask (connect refused).
fn backend_of(config: &Config) -> &'static str {
    use leasehold_core::config::{MysqlLockMode, PostgresLockMode};
    use leasehold_core::BackendConfig as B;
    match &config.backend {
        B::Local { .. } => "local",
        B::Redlock { .. } => "redlock",
        B::Postgres(pg) if pg.mode == PostgresLockMode::Table => "postgres-table",
        B::Postgres(_) => "postgres-advisory",
        B::Mysql(my) if my.mode == MysqlLockMode::Table => "mysql-table",
        B::Mysql(_) => "mysql-named",
        B::RedisCluster { .. } => "redis-cluster",
        B::RedisSentinel { .. } => "redis-sentinel",
        _ => "redis",
    }
}

/// `url` with its password (the user info after `:`) and every secret the configuration holds
/// (a `sentinel_password`, say) replaced by `***`.
fn hide_passwords(url: &str, config: &Config) -> String {
    let mut out = url.to_owned();
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some(at) = rest.rfind('@') {
            if let Some((user, _)) = rest[..at].split_once(':') {
                out = format!("{scheme}://{user}:***{}", &rest[at..]);
            }
        }
    }
    redact(&out, &config.secrets())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        for (url, shown) in [
            ("redis://:s3cr%40t@h:6379/0", "redis://:***@h:6379/0"),
            (
                "postgres://app:hunter2@db/app?lock=table",
                "postgres://app:***@db/app?lock=table",
            ),
            (
                "redis+sentinel://s1,s2/m?sentinel_password=topsecret",
                "redis+sentinel://s1,s2/m?sentinel_password=***",
            ),
            ("file:///tmp/x", "file:///tmp/x"),
        ] {
            let config = Config::parse(url).unwrap();
            assert_eq!(hide_passwords(url, &config), shown);
        }
    }
}
