//! The pace of the gradual sweeps: the one of leftover lock records (on the way of a release) and
//! the one of expired once-records (on the way of a put) share it, so that neither makes a call pay
//! for a large directory.

use std::time::Duration;

/// How often (at most) one sweep looks at its directory.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How many directory entries one look takes.
pub(crate) const SWEEP_BATCH: usize = 64;
/// How long one look may spend.
pub(crate) const SWEEP_BUDGET: Duration = Duration::from_millis(2);
