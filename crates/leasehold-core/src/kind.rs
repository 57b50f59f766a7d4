//! What a lease holds: a key alone, a share of it, or one permit of a semaphore.

use crate::error::{Error, Result};
use std::fmt;

/// The most permits a semaphore may have (a documented limit of the C ABI and every backend).
pub const MAX_PERMITS: u32 = 65_535;

/// How a lease holds its key.
///
/// - `Exclusive`: the only holder (a lock).
/// - `Shared`: one of any number of shared holders (a read lock); no exclusive holder meanwhile. A
///   waiting exclusive request goes first: shared requests that arrive after it queue behind it, so
///   a stream of readers cannot starve a writer.
/// - `Permit`: one of at most `permits` holders of a semaphore. Semaphore keys are a namespace of
///   their own: a semaphore and a lock with the same key are unrelated.
///
/// Every grant of any kind gets a fence larger than every earlier grant on that key (semaphores
/// count their own fences).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseKind {
    Exclusive,
    Shared,
    Permit(Permits),
}

impl LeaseKind {
    /// `exclusive`, `shared` or `permit`: for metrics labels and messages.
    pub fn name(self) -> &'static str {
        match self {
            LeaseKind::Exclusive => "exclusive",
            LeaseKind::Shared => "shared",
            LeaseKind::Permit(_) => "permit",
        }
    }
}

impl fmt::Display for LeaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseKind::Permit(p) => write!(f, "permit of {}", p.get()),
            other => f.write_str(other.name()),
        }
    }
}

/// A semaphore's size: 1 to [`MAX_PERMITS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permits(u32);

impl Permits {
    pub fn new(permits: u32) -> Result<Permits> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::invalid(format!(
                "permits must be 1 to {MAX_PERMITS}, got {permits}"
            )));
        }
        Ok(Permits(permits))
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_bounded() {
        assert!(Permits::new(0).is_err());
        assert!(Permits::new(MAX_PERMITS + 1).is_err());
        assert_eq!(Permits::new(MAX_PERMITS).unwrap().get(), MAX_PERMITS);
        assert_eq!(
            LeaseKind::Permit(Permits::new(3).unwrap()).to_string(),
            "permit of 3"
        );
    }
}
