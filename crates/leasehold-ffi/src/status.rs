//! The status every fallible call returns, with values fixed forever (`docs/semantics.md` §1).

use leasehold::ErrorKind;

/// The outcome of a call. The numeric values never change; new values may be added in later
/// versions, so treat an unknown value like `LEASEHOLD_INTERNAL`. When a call returns anything
/// but `LEASEHOLD_OK`, `leasehold_last_error()` on the same thread says why, and no output
/// pointer was written.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum leasehold_status {
    /// Success. Outputs were written.
    LEASEHOLD_OK = 0,
    /// The key is held by someone else (for `leasehold_acquire`: for the whole wait).
    LEASEHOLD_NOT_ACQUIRED = 1,
    /// The lease is not ours any more: it expired, someone else took the key, or its connection is
    /// gone. The current holder keeps the lock.
    LEASEHOLD_LOST = 2,
    /// The backend did not answer, or answered with an error, within the URL's timeouts. A lease
    /// stays held after a failed release or extend with this status; the call may be retried.
    LEASEHOLD_UNAVAILABLE = 3,
    /// The caller passed something the contract rejects: a NULL pointer, an empty or too long key,
    /// a TTL or wait out of range, a bad URL, a lease released twice or owned by another process.
    LEASEHOLD_INVALID_ARGUMENT = 4,
    /// A bug in Leasehold, such as a caught panic. The process keeps running.
    LEASEHOLD_INTERNAL = 5,
    /// A wait ended early, nothing acquired: `leasehold_client_interrupt` was called, or SIGTERM or
    /// SIGINT arrived during it (the signal is delivered to the process's handler as the call
    /// returns).
    LEASEHOLD_INTERRUPTED = 6,
    /// A fence older than the one the protected store holds: the write was refused.
    LEASEHOLD_STALE_FENCE = 7,
    /// An earlier attempt of a `once` action started and never finished: check the business
    /// result before running it again (see `leasehold_once_read`).
    LEASEHOLD_INCOMPLETE_ATTEMPT = 8,
}

impl From<ErrorKind> for leasehold_status {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::NotAcquired => leasehold_status::LEASEHOLD_NOT_ACQUIRED,
            ErrorKind::Lost => leasehold_status::LEASEHOLD_LOST,
            ErrorKind::Unavailable => leasehold_status::LEASEHOLD_UNAVAILABLE,
            ErrorKind::InvalidArgument => leasehold_status::LEASEHOLD_INVALID_ARGUMENT,
            ErrorKind::Interrupted => leasehold_status::LEASEHOLD_INTERRUPTED,
            ErrorKind::StaleFence => leasehold_status::LEASEHOLD_STALE_FENCE,
            ErrorKind::IncompleteAttempt => leasehold_status::LEASEHOLD_INCOMPLETE_ATTEMPT,
            // A kind added to core later is still an error; never report it as success.
            _ => leasehold_status::LEASEHOLD_INTERNAL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_the_core_codes() {
        for kind in ErrorKind::ALL {
            assert_eq!(leasehold_status::from(kind) as u32, kind.code(), "{kind}");
        }
        assert_eq!(leasehold_status::LEASEHOLD_OK as u32, 0);
    }
}
