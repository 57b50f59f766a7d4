//! One acquire, checked once where it enters the library and then carried unchanged: the Rust
//! methods of [`crate::Client`] build it from their arguments, the C ABI from its own (before a
//! fork() child reconnects, so a bad argument is reported as such), and the client hands its parts
//! to the backend as they are. No layer below checks the key, the TTL, the wait or the permits
//! again, and the lease's kind is chosen here, once.

use crate::error::Result;
use crate::key::Key;
use crate::kind::{LeaseKind, Permits};
use crate::ttl::{check_wait, Ttl};
use std::time::Duration;

/// What to take (key and kind), for how long, and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    key: Key,
    kind: LeaseKind,
    ttl: Ttl,
    wait: Duration,
}

impl Request {
    /// A single attempt at `key` as `kind` for `ttl`: the key is 1 to 1024 bytes, the TTL 1 ms to 7
    /// days (sub-milliseconds round up).
    pub fn new(key: impl AsRef<[u8]>, kind: LeaseKind, ttl: Duration) -> Result<Request> {
        Ok(Request {
            key: Key::new(key)?,
            kind,
            ttl: Ttl::new(ttl)?,
            wait: Duration::ZERO,
        })
    }

    /// A single attempt at `key` as `kind` for `ttl`, from parts already checked (a backend's own
    /// requests, or a client's with the TTL it holds the key for).
    pub fn from_parts(key: Key, kind: LeaseKind, ttl: Ttl) -> Request {
        Request {
            key,
            kind,
            ttl,
            wait: Duration::ZERO,
        }
    }

    /// This request for `ttl` instead (the client's TTL with its lock-delay, which the backend
    /// holds the key for), keeping its key, kind and wait.
    pub(crate) fn held_for(&self, ttl: Ttl) -> Request {
        Request {
            ttl,
            ..self.clone()
        }
    }

    /// A single attempt at the key alone (a lock).
    pub fn exclusive(key: impl AsRef<[u8]>, ttl: Duration) -> Result<Request> {
        Request::new(key, LeaseKind::Exclusive, ttl)
    }

    /// A single attempt at a share of the key (a read lock).
    pub fn shared(key: impl AsRef<[u8]>, ttl: Duration) -> Result<Request> {
        Request::new(key, LeaseKind::Shared, ttl)
    }

    /// A single attempt at one of `permits` (1 to 65535) permits of the semaphore `key`.
    pub fn permit(key: impl AsRef<[u8]>, permits: u32, ttl: Duration) -> Result<Request> {
        // Permits first: a bad size is the error to report, whatever the key.
        let kind = LeaseKind::Permit(Permits::new(permits)?);
        Request::new(key, kind, ttl)
    }

    /// This request, waiting up to `wait` (at most 7 days) instead of trying once; a zero wait is
    /// one attempt.
    pub fn waiting(mut self, wait: Duration) -> Result<Request> {
        self.wait = check_wait(wait)?;
        Ok(self)
    }

    pub fn key(&self) -> &Key {
        &self.key
    }

    pub fn kind(&self) -> LeaseKind {
        self.kind
    }

    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// Zero for a single attempt.
    pub fn wait(&self) -> Duration {
        self.wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn each_part_is_checked_when_built() {
        let ttl = Duration::from_secs(1);
        let invalid = |r: Result<Request>| r.unwrap_err().kind() == ErrorKind::InvalidArgument;
        assert!(invalid(Request::exclusive("", ttl)));
        assert!(invalid(Request::exclusive([0u8; 1025], ttl)));
        assert!(invalid(Request::shared("k", Duration::ZERO)));
        assert!(invalid(Request::exclusive(
            "k",
            Duration::from_secs(8 * 86_400)
        )));
        assert!(invalid(Request::permit("k", 0, ttl)));
        assert!(invalid(Request::permit("k", 65_536, ttl)));
        let far = Duration::from_secs(8 * 86_400);
        assert!(invalid(Request::exclusive("k", ttl).unwrap().waiting(far)));

        let r = Request::permit("k", 3, Duration::from_micros(1500))
            .and_then(|r| r.waiting(Duration::from_millis(20)))
            .unwrap();
        assert_eq!(r.key().as_bytes(), b"k");
        assert_eq!(r.kind(), LeaseKind::Permit(Permits::new(3).unwrap()));
        assert_eq!(r.ttl().as_millis(), 2, "sub-milliseconds round up");
        assert_eq!(r.wait(), Duration::from_millis(20));
    }
}
