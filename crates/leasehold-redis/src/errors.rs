//! Turning driver errors into Leasehold's error kinds, with every password masked.

use leasehold_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Server error codes that mean "this server cannot serve us now", not "Leasehold has a bug".
const UNAVAILABLE_CODES: &[&str] = &[
    "NOAUTH",
    "WRONGPASS",
    "OOM",
    "BUSY",
    "LOADING",
    "MISCONF",
    "MASTERDOWN",
    "READONLY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "NOPERM",
];

/// Whether the connection that produced `err` must not be used again: anything but a well-formed
/// error reply may have left a half-read response on the socket.
pub(crate) fn breaks_connection(err: &RedisError) -> bool {
    !matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

/// Whether the server closed the connection under us (restart, idle timeout, proxy): a pooled
/// connection that fails this way is stale, and every other connection made before it probably is
/// too.
pub(crate) fn is_dropped(err: &RedisError) -> bool {
    err.is_connection_dropped() || err.is_connection_refusal()
}

/// Whether a connect failed for a reason that trying again will not change: a wrong or missing
/// password, or a TLS handshake that refused the certificate (rustls reports those as invalid data).
pub(crate) fn is_permanent_connect(err: &RedisError) -> bool {
    if err.kind() == ErrorKind::AuthenticationFailed
        || err
            .code()
            .is_some_and(|c| c == "WRONGPASS" || c == "NOAUTH")
    {
        return true;
    }
    // redis-rs keeps an I/O error behind an `Arc`, which is what `source` hands out.
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let Some(inner) = std::error::Error::source(err) else {
        return false;
    };
    let inner: &(dyn std::error::Error + 'static) = match inner.downcast_ref::<Shared>() {
        Some(shared) => shared.as_ref(),
        None => inner,
    };
    inner
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::InvalidData)
}

fn is_unavailable(err: &RedisError) -> bool {
    if err.is_io_error() || err.is_timeout() || is_dropped(err) {
        return true;
    }
    match err.kind() {
        ErrorKind::AuthenticationFailed => true,
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::NoPerm,
        ) => true,
        _ => err.code().is_some_and(|c| UNAVAILABLE_CODES.contains(&c)),
    }
}

/// `what` names the operation (`acquire`, `release`, …) and `server` the node, for the message.
pub(crate) fn from_redis(err: &RedisError, what: &str, server: &str, secrets: &[String]) -> Error {
    if is_unavailable(err) {
        Error::unavailable(format!("redis {server}: {what} failed: {err}"), secrets)
    } else {
        Error::Internal(leasehold_core::secret::redact(
            &format!("redis {server}: {what} got an unexpected answer: {err}"),
            secrets,
        ))
    }
}

/// A pool checkout that ran out of time: the server is down, hung, or every connection is busy.
pub(crate) fn from_pool(
    err: &leasehold_core::pool::PoolError<RedisError>,
    server: &str,
    secrets: &[String],
) -> Error {
    Error::unavailable(format!("redis {server}: no connection: {err}"), secrets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::ErrorKind as Kind;

    #[test]
    fn refused_certificates_and_passwords_are_permanent_refusals_are_not() {
        let tls = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "TLS with h:1: the server's certificate has expired",
        ));
        assert!(is_permanent_connect(&tls));
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "bad password"));
        assert!(is_permanent_connect(&auth));
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(!is_permanent_connect(&refused));
    }

    #[test]
    fn kinds_map_onto_the_contract_and_hide_secrets() {
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset while talking to hunter2",
        ));
        let err = from_redis(&io, "release", "h:1", &["hunter2".to_owned()]);
        assert_eq!(err.kind(), Kind::Unavailable);
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(breaks_connection(&io) && is_dropped(&io));

        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "bad password"));
        assert_eq!(
            from_redis(&auth, "connect", "h:1", &[]).kind(),
            Kind::Unavailable
        );

        let loading = RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "x"));
        assert_eq!(
            from_redis(&loading, "acquire", "h:1", &[]).kind(),
            Kind::Unavailable
        );
        assert!(
            !breaks_connection(&loading),
            "an error reply leaves the connection in step"
        );

        let bug = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "WRONGTYPE",
        ));
        assert_eq!(
            from_redis(&bug, "acquire", "h:1", &[]).kind(),
            Kind::Internal
        );
        let shape = RedisError::from((ErrorKind::UnexpectedReturnType, "not an array"));
        assert_eq!(
            from_redis(&shape, "acquire", "h:1", &[]).kind(),
            Kind::Internal
        );
    }
}
