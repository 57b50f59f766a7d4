//! Redlock's fence: one number per key that strictly increases across acquisitions, although
//! every node keeps a counter of its own.
//!
//! Design. Each node's acquire script INCRs that node's counter for the key when it grants the key
//! (the single-node script, unchanged). The client takes the **highest** value among the nodes that
//! granted it (at least a quorum), and before handing out the lease makes sure a quorum of nodes
//! has a counter at least that high: nodes that granted with a lower value get the highest written
//! back by a "raise" script that only ever raises a counter (`RAISE_FENCE` in `scripts.rs`).
//!
//! Why it increases: the previous lease's fence `F` sits (at least) in the counters of a quorum;
//! the next acquisition's quorum shares at least one node with it, whose INCR gives more than `F`,
//! and the next fence is the maximum, so it exceeds `F`. A node that granted the key back to the
//! same token (a retry after a failed round whose release did not reach it) returns its counter
//! unchanged; that value was made after the previous lease's write-back, so the argument holds.
//!
//! Cost: when the granting nodes agree (the steady state: every acquisition raises every live
//! node by one), nothing extra, so an acquire is one parallel round trip. When they disagree
//! (after a node was down or restarted empty, or lost a round), one more parallel round trip, to
//! the lagging nodes only.
//!
//! Assumptions: the guarantee holds as long as a majority of nodes keeps its data. A node that
//! restarts must come back with its data (AOF with `fsync always`), or stay away longer than the
//! largest TTL in use (Redis's own advice for Redlock): a node restarted empty gives low counters,
//! which is harmless while the other nodes of every quorum remember, but if a majority restart
//! empty, fences start again from 1. Counters are never deleted (one small key per lock key per
//! node), and a node's counter may run ahead of the fences handed out (a refused round still
//! INCRs the nodes it reached); only the order matters.

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

#[cfg(test)]
mod tests {
    use super::*;

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
