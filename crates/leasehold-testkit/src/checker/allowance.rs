//! Every allowance the checker grants, in one place, each with its reason. None of them may be
//! widened to make a run pass: a run that needs more has found something.

use std::time::Duration;

/// The drift allowance the client subtracts from a TTL (1 % + 2 ms, as `Lease::remaining()` does):
/// a window derived from the history must not promise more than the client itself does.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Added to the contract's bound of every call (connect + io timeouts, plus the wait of an acquire):
/// the machine running the tests has 2 cores shared by the workers, the proxies' thread pairs and
/// the servers, so a thread can wait a few scheduler quanta (and a latency fault can hold a reply)
/// before it sees its own timeout fire.
pub const SCHEDULING_SLACK: Duration = Duration::from_millis(400);

// Beyond it, a call's bound is not charged with the machine's own stalls while it ran, as a probe
// thread measured them (`stall.rs`): measured per call, not granted, and such calls are still
// reported apart.

/// How long after its caller gave up a request may still reach the server and take (or extend) a
/// lease, whose TTL starts only then: the proxy delays a chunk past the I/O timeout (up to
/// [`crate::generator`]'s longest latency) or drips a 250-byte script call at up to 5 ms a byte
/// (over 1 s). Seen in a 10-minute Redis soak: a refusal 1.74 s after an unknown acquire.
pub const LATE_DELIVERY: Duration = Duration::from_millis(2500);

/// The longest the fault generator stops a server (SIGSTOP): a request sent meanwhile runs when the
/// server wakes, and the lease it takes starts only then. The generator draws no longer pause.
pub const SERVER_STALL: Duration = Duration::from_millis(1500);

/// How long past its TTL (counted from its call's completion) a lease may still hold its key on the
/// server, for the stranded-refusal check: the two delays above can add up.
pub const STRANDED_SLACK: Duration =
    Duration::from_millis(LATE_DELIVERY.as_millis() as u64 + SERVER_STALL.as_millis() as u64);

/// What holders believed needs no allowance: `until` is recorded as an underestimate (the clock is
/// read before `remaining()`), the other lease's belief starts after its grant completed, and the
/// server cannot free a key before the TTL the holder counted from its own first send.
pub const BELIEF_SLACK: Duration = Duration::ZERO;
