//! Exclusion among intervals of one key: which pairs of leases held it together when their modes
//! forbid it (exclusive beside anything, shared beside exclusive, more permits than a semaphore has).

use crate::history::{Mode, OpId};
use std::time::Duration;

/// One lease's interval on a key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub start: Duration,
    pub end: Duration,
    pub lease: OpId,
    pub mode: Mode,
}

/// A pair that broke exclusion: the earlier-starting lease, the later one, and the shared time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Clash {
    pub first: OpId,
    pub second: OpId,
    /// The modes they clashed in (a promoted or demoted lease's piece, not its acquire's).
    pub modes: (Mode, Mode),
    pub from: Duration,
    pub to: Duration,
}

/// Every clash among `spans` (empty spans ignored), each pair of leases once. `slack` is how much
/// two spans may overlap without it counting.
pub(crate) fn clashes(mut spans: Vec<Span>, slack: Duration) -> Vec<Clash> {
    spans.retain(|s| s.end > s.start);
    spans.sort_by_key(|s| (s.start, s.lease));
    let mut out: Vec<Clash> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (j, b) in spans.iter().enumerate() {
        let live: Vec<&Span> = spans[..j]
            .iter()
            .filter(|a| a.end > b.start + slack && a.lease != b.lease)
            .collect();
        let mut report = |a: &Span| {
            let pair = (a.lease.min(b.lease), a.lease.max(b.lease));
            if seen.insert(pair) {
                out.push(Clash {
                    first: a.lease,
                    second: b.lease,
                    modes: (a.mode, b.mode),
                    from: b.start,
                    to: a.end.min(b.end),
                });
            }
        };
        for a in &live {
            if !a.mode.coexists_with(b.mode) {
                report(a);
            }
        }
        // Permits: more leases at `b.start` than the semaphore has (each lease counted once).
        if let Mode::Permit(_) = b.mode {
            let mut holders: Vec<&Span> = live
                .iter()
                .copied()
                .filter(|a| matches!(a.mode, Mode::Permit(_)))
                .collect();
            holders.sort_by_key(|a| a.lease);
            holders.dedup_by_key(|a| a.lease);
            if holders.len() + 1 > b.mode.capacity() {
                if let Some(a) = holders.iter().max_by_key(|a| a.start) {
                    report(a);
                }
            }
        }
    }
    out
}
