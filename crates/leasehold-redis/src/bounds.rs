//! The bounds of a Redis backend's calls (one server, Sentinel or Cluster): a plain call's, a
//! write's (plus the replicas' `WAIT`) and a whole waiting acquire's. The exclusive calls
//! (`single.rs`), the shared locks and semaphores (`kinds.rs`) and the records (`records.rs`) are
//! bounded alike, from one value.

use crate::connection::ConnectSettings;
use leasehold_core::Deadline;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    connect: Duration,
    io: Duration,
    /// `replicas=N`: how much longer than a plain call an acquire or extend may take (the `WAIT`).
    pub(crate) replicas_allowance: Duration,
}

impl Bounds {
    pub fn new(settings: &ConnectSettings, replicas_allowance: Duration) -> Bounds {
        Bounds {
            connect: settings.connect_timeout,
            io: settings.io_timeout,
            replicas_allowance,
        }
    }

    /// The bound of one call that is not a wait: connect + I/O timeout.
    pub fn call(&self) -> Deadline {
        Deadline::for_call(self.connect, self.io)
    }

    /// The bound of one acquire attempt, extend or record write: a call's, plus the `WAIT` for
    /// replicas.
    pub fn write(&self) -> Deadline {
        Deadline::for_call(
            self.connect,
            self.io.saturating_add(self.replicas_allowance),
        )
    }

    /// The bound of a whole waiting acquire that ends at `end`: every attempt, checkout and block
    /// draws on it, so the call returns within wait + connect + I/O (+ the replicas' `WAIT`).
    pub fn acquire_until(&self, end: Instant) -> Deadline {
        let io = self.io.saturating_add(self.replicas_allowance);
        Deadline::for_acquire_until(end, self.connect, io)
    }
}
