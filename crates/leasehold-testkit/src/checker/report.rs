//! What the checker found: the violations, the costs the library cannot avoid, and what the
//! history held.

use std::fmt;
use std::time::Duration;

/// How many times one kind of finding occurred, with a few examples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Finding {
    pub count: usize,
    pub examples: Vec<String>,
}

impl Finding {
    pub(crate) fn add(&mut self, max: usize, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < max {
            self.examples.push(example());
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// (A) Windows derived from the history (acquire invoke + TTL − drift) that overlap.
    pub overlaps: Finding,
    /// (B) Leases whose holders believed them valid (`remaining() > 0`) at once.
    pub believed_overlaps: Finding,
    /// (C) Fences not above an earlier exclusive grant's, or repeated.
    pub fence_order: Finding,
    /// (D) Writes accepted with a fence below one accepted before.
    pub stale_writes: Finding,
    /// (E) Calls that took longer than their bound (or still ran past it), beyond the machine's
    /// stalls while they ran.
    pub bound_overruns: Finding,
    /// Not a violation: calls past their bound by no more than the machine stalled meanwhile (a
    /// probe thread was kept off the CPU that long, see `stall.rs`).
    pub stalled_overruns: Finding,
    /// The longest stall of the machine the probe saw.
    pub longest_stall: Duration,
    /// Refusals with no possible holder at all: a liveness failure, not an exclusion one.
    pub stranded: Finding,
    /// A cost, not a violation: refusals explained only by an acquire whose outcome its caller never
    /// learned (a late-delivered request holds the key under a token nobody has, until its TTL).
    pub late_grants: Finding,
    /// A cost, not a violation: acquires a quorum granted too late to be valid (the round outlasted
    /// the TTL), refused as they must be; they may block others until their TTL.
    pub no_validity: Finding,
    pub acquired: usize,
    pub restored: usize,
    /// Promotes granted and demotes done.
    pub promoted: usize,
    pub demoted: usize,
    pub not_acquired: usize,
    pub unknown: usize,
    pub failed: usize,
    pub lost: usize,
    pub writes_accepted: usize,
    pub writes_rejected: usize,
    pub pending: usize,
    pub beliefs: usize,
    /// Leases granted before a crash and restart of the server with its data and relied on by
    /// their holder after it (not a violation: the evidence that a durability run tested something).
    pub held_across_restarts: usize,
    /// The longest call relative to its bound (took − bound, negative as zero).
    pub worst_overrun: Duration,
    /// The least headroom a call left under its bound: how much of the scheduling slack a run used.
    pub least_headroom: Option<Duration>,
    pub slowest_call: Duration,
}

impl Report {
    /// The five violation counts (A)–(E), in the order of [`Report::summary_line`].
    pub fn violations(&self) -> [usize; 5] {
        [
            self.overlaps.count,
            self.believed_overlaps.count,
            self.fence_order.count,
            self.stale_writes.count,
            self.bound_overruns.count,
        ]
    }

    pub fn violation_count(&self) -> usize {
        self.violations().iter().sum()
    }

    /// No violation (stranded refusals and costs are reported apart).
    pub fn is_clean(&self) -> bool {
        self.violation_count() == 0
    }

    /// `violations: N (overlaps A, believed-overlaps B, fence-order C, stale-writes D, past-bound E)`.
    pub fn summary_line(&self) -> String {
        let [a, b, c, d, e] = self.violations();
        format!(
            "violations: {} (overlaps {a}, believed-overlaps {b}, fence-order {c}, stale-writes {d}, past-bound {e})",
            self.violation_count()
        )
    }

    /// The counted kinds that are not violations.
    pub fn other_line(&self) -> String {
        format!(
            "stranded: {}, late-grant costs: {}, no-validity refusals: {}, past bound only by the \
             machine's stalls: {} (longest stall {:?})",
            self.stranded.count,
            self.late_grants.count,
            self.no_validity.count,
            self.stalled_overruns.count,
            self.longest_stall
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary_line())?;
        writeln!(f, "{}", self.other_line())?;
        write!(
            f,
            "acquired={} restored={} promoted={} demoted={} not_acquired={} unknown={} failed={} lost={} \
             writes_accepted={} writes_rejected={} pending={} beliefs={} held_across_restarts={} \
             slowest_call={:?} least_headroom={:?}",
            self.acquired,
            self.restored,
            self.promoted,
            self.demoted,
            self.not_acquired,
            self.unknown,
            self.failed,
            self.lost,
            self.writes_accepted,
            self.writes_rejected,
            self.pending,
            self.beliefs,
            self.held_across_restarts,
            self.slowest_call,
            self.least_headroom.unwrap_or_default()
        )?;
        for (name, finding) in [
            ("overlap", &self.overlaps),
            ("believed overlap", &self.believed_overlaps),
            ("fence order", &self.fence_order),
            ("stale write", &self.stale_writes),
            ("past bound", &self.bound_overruns),
            ("past bound, machine stalled", &self.stalled_overruns),
            ("stranded", &self.stranded),
            ("late grant", &self.late_grants),
            ("no validity", &self.no_validity),
        ] {
            for e in &finding.examples {
                write!(f, "\n  {name}: {e}")?;
            }
        }
        Ok(())
    }
}
