//! The one error type of Leasehold. Its kinds are exactly those of the public contract (`docs/semantics.md` §1),
//! and each maps one-to-one onto a C status and a PHP exception.

use std::fmt;

/// A Leasehold error. Messages never contain a password or other secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is held by someone else (and, for `acquire`, stayed held for the whole wait).
    #[error("not acquired: {0}")]
    NotAcquired(String),
    /// The lease is not ours any more: expired, taken over, or its connection is gone.
    #[error("lease lost: {0}")]
    Lost(String),
    /// The backend could not be reached or answered with an error, within the configured timeouts.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The caller passed something the contract rejects.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A bug in Leasehold (for example a caught panic).
    #[error("internal error: {0}")]
    Internal(String),
    /// A wait ended early: the client was interrupted ([`crate::Client::interrupt`]) or the
    /// process got SIGTERM or SIGINT while it waited. Nothing was acquired.
    #[error("interrupted: {0}")]
    Interrupted(String),
    /// A fence older than the one the protected store already accepted: the write must not
    /// happen (the caller's lease was lost, and a newer holder wrote since).
    #[error("stale fence: {0}")]
    StaleFence(String),
    /// An earlier attempt of a `once` action started and never finished (its worker died, or its
    /// action failed): it is not run again blindly. Check the business result, then recover.
    #[error("incomplete attempt: {0}")]
    IncompleteAttempt(String),
}

/// The kind of an [`Error`], with the C status values that are fixed forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    NotAcquired,
    Lost,
    Unavailable,
    InvalidArgument,
    Internal,
    Interrupted,
    StaleFence,
    IncompleteAttempt,
}

impl ErrorKind {
    /// The C status value of this kind (`LEASEHOLD_NOT_ACQUIRED = 1` … `LEASEHOLD_INTERNAL = 5`).
    pub const fn code(self) -> u32 {
        match self {
            ErrorKind::NotAcquired => 1,
            ErrorKind::Lost => 2,
            ErrorKind::Unavailable => 3,
            ErrorKind::InvalidArgument => 4,
            ErrorKind::Internal => 5,
            ErrorKind::Interrupted => 6,
            ErrorKind::StaleFence => 7,
            ErrorKind::IncompleteAttempt => 8,
        }
    }

    /// A short lowercase name, stable enough for metrics labels and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotAcquired => "not_acquired",
            ErrorKind::Lost => "lost",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::Internal => "internal",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::StaleFence => "stale_fence",
            ErrorKind::IncompleteAttempt => "incomplete_attempt",
        }
    }

    /// Every kind, in code order.
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::NotAcquired,
        ErrorKind::Lost,
        ErrorKind::Unavailable,
        ErrorKind::InvalidArgument,
        ErrorKind::Internal,
        ErrorKind::Interrupted,
        ErrorKind::StaleFence,
        ErrorKind::IncompleteAttempt,
    ];
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotAcquired(_) => ErrorKind::NotAcquired,
            Error::Lost(_) => ErrorKind::Lost,
            Error::Unavailable(_) => ErrorKind::Unavailable,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Internal(_) => ErrorKind::Internal,
            Error::Interrupted(_) => ErrorKind::Interrupted,
            Error::StaleFence(_) => ErrorKind::StaleFence,
            Error::IncompleteAttempt(_) => ErrorKind::IncompleteAttempt,
        }
    }

    /// The message without the kind's prefix.
    pub fn message(&self) -> &str {
        match self {
            Error::NotAcquired(m)
            | Error::Lost(m)
            | Error::Unavailable(m)
            | Error::InvalidArgument(m)
            | Error::Internal(m)
            | Error::Interrupted(m)
            | Error::StaleFence(m)
            | Error::IncompleteAttempt(m) => m,
        }
    }

    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// An `InvalidArgument` that refuses a deployment: the server is configured so that a promise
    /// cannot hold (an evicting Redis, say). Its message opens with [`DEPLOYMENT_REFUSED`], the one
    /// mark that lets a caller (the CLI's exit status 78) tell it from a bad argument while the C
    /// status and the PHP exception stay those of `InvalidArgument`.
    pub fn refused_deployment(msg: impl fmt::Display) -> Self {
        Error::InvalidArgument(format!("{DEPLOYMENT_REFUSED}{msg}"))
    }

    /// Whether this error refuses a deployment (see [`Error::refused_deployment`]).
    pub fn is_refused_deployment(&self) -> bool {
        matches!(self, Error::InvalidArgument(m) if m.starts_with(DEPLOYMENT_REFUSED))
    }

    /// The same error with every given secret masked in its message: a second line of defence for
    /// layers that pass on errors built elsewhere (driver texts may echo a connection string).
    pub fn redacted<S: AsRef<str>>(self, secrets: &[S]) -> Self {
        // Always through `redact`: it also masks the percent-encoded form of each secret.
        let message = crate::secret::redact(self.message(), secrets);
        match self {
            Error::NotAcquired(_) => Error::NotAcquired(message),
            Error::Lost(_) => Error::Lost(message),
            Error::Unavailable(_) => Error::Unavailable(message),
            Error::InvalidArgument(_) => Error::InvalidArgument(message),
            Error::Internal(_) => Error::Internal(message),
            Error::Interrupted(_) => Error::Interrupted(message),
            Error::StaleFence(_) => Error::StaleFence(message),
            Error::IncompleteAttempt(_) => Error::IncompleteAttempt(message),
        }
    }

    /// An `Unavailable` error whose text has every given secret masked. Backends build their I/O errors
    /// through this, because driver messages may echo a connection string.
    pub fn unavailable<S: AsRef<str>>(msg: impl fmt::Display, secrets: &[S]) -> Self {
        Error::Unavailable(crate::secret::redact(&msg.to_string(), secrets))
    }
}

/// How the message of [`Error::refused_deployment`] opens.
pub const DEPLOYMENT_REFUSED: &str = "deployment refused: ";

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_keeps_the_kind_and_masks_plain_and_encoded_secrets() {
        let e = Error::Lost("session of p@ss ended (url had p%40ss)".into()).redacted(&["p@ss"]);
        assert_eq!(e, Error::Lost("session of *** ended (url had ***)".into()));
        let plain = Error::NotAcquired("held".into());
        assert_eq!(plain.clone().redacted(&["x9"]), plain);
    }

    #[test]
    fn a_refused_deployment_is_an_invalid_argument_with_a_mark() {
        let e = Error::refused_deployment("maxmemory-policy=allkeys-lru");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.is_refused_deployment());
        assert!(e.clone().redacted(&["x9"]).is_refused_deployment());
        assert!(!Error::invalid("bad TTL").is_refused_deployment());
        assert!(!Error::Unavailable(e.message().into()).is_refused_deployment());
    }
}
