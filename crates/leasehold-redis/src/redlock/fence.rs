//! Redlock's fence: one number per key that strictly increases across acquisitions, although
//! every node keeps a counter of its own.
//!
//! Design. Each node's acquire script draws the key's next fence on that node when it grants the
//! key: a hybrid logical clock, `max(stored + 1, server µs rounded down to 10 ms)` (`next_fence`
//! in `scripts.rs`, with `FENCE_GRANULE_MICROS`). The client takes the **highest** value among the
//! nodes that granted it (at least a quorum), and before handing out the lease makes sure a quorum
//! of nodes has a counter at least that high: nodes that granted with a lower value get the
//! highest written back by a "raise" script that only ever raises a counter (`RAISE_FENCE` in
//! `scripts.rs`).
//!
//! Why it increases, while a majority keeps its data (whatever the clocks do): the previous
//! lease's fence `F` sits (at least) in the counters of a quorum; the next acquisition's quorum
//! shares at least one node with it, whose `stored + 1` is more than `F`, and the next fence is the
//! maximum, so it exceeds `F`. A node that granted the key back to the same token (a retry after a
//! failed round whose release did not reach it) returns its counter unchanged (and resets the key's
//! expiry to the new TTL, so it cannot lapse before the validity the client computes); that value
//! was made after the previous lease's write-back, so the argument holds.
//!
//! Why it increases when a majority (or every node) lost its data — restarted without
//! persistence, or a counter expired after its retention: every fence is at most the clock of the
//! node that made it (`stored + 1` runs ahead of the clock only by the acquisitions within one
//! microsecond, which a Redis script cannot fit), so a node with no counter gives its clock, which
//! is past `F` once more than 10 ms (the granule) plus the clock difference between the nodes
//! separate the two acquisitions, and provided no node's clock stepped back by more than that
//! since. A real restart takes far longer than 10 ms; an expired counter means at least the
//! retention (24 h) without acquisitions.
//!
//! Why the granule: the nodes read their clocks a few microseconds apart, so plain microseconds
//! would make every round disagree and pay the write-back round trip. Rounded to 10 ms, the nodes of
//! a round agree unless a 10 ms boundary falls between their readings (or their clocks differ by
//! that much): on a hot key `stored + 1` wins and they agree as counters did before; on a fresh key
//! they agree on the rounded clock.
//!
//! Cost: when the granting nodes agree (the steady state), nothing extra, so an acquire is one
//! parallel round trip. When they disagree (after a node was down or restarted empty, or lost a
//! round, or a granule boundary fell inside the round), one more parallel round trip, to the
//! lagging nodes only.
//!
//! Counters expire after the fence retention (24 h after the key's last acquisition on that
//! node), so a key locked once leaves nothing behind for longer than that. A node's counter may
//! run ahead of the fences handed out (a refused round still draws on the nodes it reached); only
//! the order matters.

/// What the client must do with the fences the granting nodes returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FencePlan {
    /// A quorum already holds this fence: hand it out.
    Ready(u64),
    /// Raise the counters of `lagging` (node indexes) to `fence`; at least `needed` must succeed.
    Raise {
        fence: u64,
        lagging: Vec<usize>,
        needed: usize,
    },
}

/// `granted`: (node index, the fence that node returned), for every node that granted the key.
pub(crate) fn plan(granted: &[(usize, u64)], quorum: usize) -> FencePlan {
    let fence = granted.iter().map(|&(_, f)| f).max().unwrap_or(0);
    let settled = granted.iter().filter(|&&(_, f)| f == fence).count();
    if settled >= quorum {
        return FencePlan::Ready(fence);
    }
    FencePlan::Raise {
        fence,
        lagging: granted
            .iter()
            .filter(|&&(_, f)| f < fence)
            .map(|&(i, _)| i)
            .collect(),
        needed: quorum.saturating_sub(settled),
    }
}

/// The fence a restore reports, from what the nodes still holding the token returned (`held`:
/// node index, that node's fence for the lease), once a quorum of them agrees on one value.
///
/// That value is the fence the acquire handed out: the acquire left it (exactly) on at least a
/// quorum of nodes — the granting nodes that drew it and those it raised — and no two values can
/// each stand on a quorum. A node that granted after the acquire had decided may hold a higher
/// value; a restore that took the highest one it heard would report a fence that only that node
/// backs, which a later acquisition (on a quorum without it) could match or undercut. `None` until
/// a quorum agrees; a restore that does not hear one (a node down) reports the highest fence
/// heard and raises a quorum's counters to it first, like an acquire (see [`plan`]).
pub(crate) fn agreed(held: &[(usize, u64)], quorum: usize) -> Option<u64> {
    held.iter()
        .map(|&(_, f)| f)
        .find(|&f| held.iter().filter(|&&(_, g)| g == f).count() >= quorum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_reports_the_value_a_quorum_holds() {
        // The acquire decided on 7 from nodes 0 and 1 and raised node 2; node 3 granted late at 8.
        assert_eq!(agreed(&[(3, 8), (0, 7)], 3), None);
        assert_eq!(agreed(&[(3, 8), (0, 7), (2, 7)], 3), None);
        assert_eq!(agreed(&[(3, 8), (0, 7), (2, 7), (1, 7)], 3), Some(7));
        assert_eq!(agreed(&[(0, 5), (1, 5)], 2), Some(5));
        assert_eq!(agreed(&[], 2), None);
    }

    #[test]
    fn agreeing_quorum_needs_no_write_back() {
        assert_eq!(plan(&[(0, 7), (1, 7), (2, 7)], 2), FencePlan::Ready(7));
        assert_eq!(
            plan(&[(0, 7), (2, 7), (4, 3)], 3),
            FencePlan::Raise {
                fence: 7,
                lagging: vec![4],
                needed: 1
            }
        );
        assert_eq!(plan(&[(0, 7), (2, 7), (4, 3)], 2), FencePlan::Ready(7));
    }

    #[test]
    fn lagging_nodes_are_raised_to_the_maximum() {
        // A node restarted empty answers 1; the others remember 41.
        assert_eq!(
            plan(&[(0, 1), (1, 41), (2, 40)], 2),
            FencePlan::Raise {
                fence: 41,
                lagging: vec![0, 2],
                needed: 1
            }
        );
    }
}
