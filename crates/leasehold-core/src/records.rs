//! Small records kept beside the locks, written under a lease and fenced: what `once` remembers of
//! a key's action (started by fence F, or done with its result). A backend that can keep them
//! returns a [`RecordStore`] from [`crate::LockBackend::records`].

use crate::deadline::Deadline;
use crate::error::Result;
use crate::key::Key;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The largest record value: a result is meant to say what happened (an id, a status, a short
/// output), not to carry data.
pub const MAX_RECORD: usize = 64 * 1024;

/// The longest a record is kept: a week past its last write, like the longest TTL.
pub const MAX_KEEP: Duration = crate::MAX_TTL;

/// One record: the fence of the lease that wrote it last, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub fence: u64,
    pub value: Vec<u8>,
}

/// Records by key, in a namespace of their own (a record's key never collides with a lock's).
/// Every call is bounded by the backend's connect + I/O timeouts.
pub trait RecordStore: Send + Sync {
    /// The record of `key`, unless there is none or it was kept past its `keep`.
    fn get(&self, key: &Key) -> Result<Option<Record>>;

    /// Writes `value` as the record of `key`, kept for `keep` from now, **iff** no record written
    /// with a higher fence is there (an equal fence is the same holder writing again). `Ok(false)`:
    /// refused, a newer holder wrote since. Atomic: a reader sees the old record or the new one.
    /// `value` is at most [`MAX_RECORD`] bytes and `keep` at most [`MAX_KEEP`] (checked by the
    /// caller).
    fn put(&self, key: &Key, fence: u64, value: &[u8], keep: Duration) -> Result<bool>;
}

/// How often (at most) an SQL backend deletes expired record rows, per table, server and process.
pub const SQL_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// How often a process sweeps expired records out of one table: an SQL backend deletes a bounded
/// batch of them now and then, on the way of a put, so that the table holds what is kept and not
/// every record ever written. One throttle per backend crate, keyed by the table and its server.
pub struct SweepThrottle {
    every: Duration,
    next: Mutex<Vec<(String, Instant)>>,
}

impl SweepThrottle {
    pub const fn new(every: Duration) -> Self {
        SweepThrottle {
            every,
            next: Mutex::new(Vec::new()),
        }
    }

    /// Whether `table` of `server` is due for a sweep ([`SweepThrottle::due`]) that `deadline`
    /// leaves an I/O timeout for; a put with less left skips it rather than risk its own bound.
    pub fn due_by(&self, server: &str, table: &str, deadline: Deadline, io: Duration) -> bool {
        deadline.remaining() >= io && self.due(&format!("{server} {table}"))
    }

    /// Whether `table` (named with its server) is due for a sweep, and if so, not again for a
    /// while. `false` while another thread holds the throttle, or held it when this process was
    /// forked: a sweep skipped is left to the next put.
    pub fn due(&self, table: &str) -> bool {
        let Ok(mut next) = self.next.try_lock() else {
            return false;
        };
        let now = Instant::now();
        let later = now.checked_add(self.every).unwrap_or(now);
        match next.iter_mut().find(|(t, _)| t == table) {
            Some((_, at)) if now < *at => false,
            Some((_, at)) => {
                *at = later;
                true
            }
            None => {
                next.push((table.to_owned(), later));
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_due_once_per_period() {
        let throttle = SweepThrottle::new(Duration::from_secs(60));
        assert!(throttle.due("db t1"));
        assert!(!throttle.due("db t1"));
        assert!(throttle.due("db t2"));
        let quick = SweepThrottle::new(Duration::ZERO);
        assert!(quick.due("t") && quick.due("t"));
    }
}
