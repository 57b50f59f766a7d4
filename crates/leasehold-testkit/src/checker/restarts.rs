//! Leases relied on across a crash and restart of the server with its data: not a violation nor
//! an allowance (the other checks judge them as any lease), but the evidence that a run put a
//! durability claim to the test. A run where no holder relied on a lease granted before a crash
//! after the server was back proves nothing about the crash.

use crate::history::{Belief, Op, OpKind, Outcome, Restart};
use std::collections::BTreeSet;

/// How many leases were granted before some crash and still believed valid (`remaining() > 0`) by
/// their holder once the server answered again.
pub(super) fn held_across(ops: &[Op], beliefs: &[Belief], restarts: &[Restart]) -> usize {
    let mut held = BTreeSet::new();
    for b in beliefs {
        if b.until <= b.at || held.contains(&b.lease) {
            continue;
        }
        let Some(acquire) = ops.get(b.lease) else {
            continue;
        };
        let granted = match (acquire.kind, acquire.outcome, acquire.complete) {
            (OpKind::Acquire, Outcome::Ok, Some(at)) => at,
            _ => continue,
        };
        if restarts
            .iter()
            .any(|r| granted < r.crashed && b.at >= r.back)
        {
            held.insert(b.lease);
        }
    }
    held.len()
}

#[cfg(test)]
mod tests {
    use crate::history::{Op, Outcome, Snapshot};
    use crate::{check, CheckConfig};
    use std::time::Duration;

    fn acquire(worker: usize, key: &str, invoke: u64, complete: u64) -> Op {
        let s = Duration::from_secs(1);
        Op::acquire(worker, key, s, Duration::ZERO, s).at(invoke, Some(complete), Outcome::Ok)
    }

    #[test]
    fn counts_a_lease_granted_before_the_crash_and_believed_after_the_restart() {
        let history = Snapshot::of(vec![acquire(0, "a", 0, 10), acquire(1, "b", 200, 210)])
            .with_restart(100, 150)
            // Lease 0 is relied on after the restart; lease 1 was granted after it.
            .with_beliefs(&[(0, 20, 900), (0, 160, 900), (1, 220, 900)]);
        let r = check(&history, &CheckConfig::default());
        assert_eq!(r.held_across_restarts, 1);
        assert!(r.is_clean(), "{r}");
    }

    #[test]
    fn a_lease_believed_over_before_the_server_is_back_is_not_counted() {
        let history = Snapshot::of(vec![acquire(0, "a", 0, 10)])
            .with_restart(100, 150)
            // Believed only during the outage, and at 0 left after it.
            .with_beliefs(&[(0, 120, 900), (0, 160, 160)]);
        let r = check(&history, &CheckConfig::default());
        assert_eq!(r.held_across_restarts, 0);
    }
}
