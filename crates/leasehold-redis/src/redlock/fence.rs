//! Redlock's fence: one number per acquisition of a key, above every fence handed out before the
//! acquisition began and never handed out twice, although every node keeps a counter of its own.
//!
//! Design. Each node's acquire script draws the key's next value on that node when it grants the
//! key: a hybrid logical clock, `max(stored + 1, server µs rounded down to 10 ms)` (`next_fence`
//! in `scripts.rs`, with `FENCE_GRANULE_MICROS`). Every draw leaves the counter above all earlier
//! values, so a node draws each value at most once, for one token. A lease's fence is a value that
//! a quorum of nodes drew for its token. The client takes the **highest** value `F` among the
//! nodes that granted it (at least a quorum); when fewer than a quorum drew `F` itself, it asks
//! the granting nodes that drew less to draw again, `max(stored + 1, F)` ("claim" scripts:
//! `REDLOCK_CLAIM_FENCE` and its share and permit forms in `scripts.rs`). A node that answers `F`
//! drew it for us; one that answers more had already drawn `F` for someone else. When too few
//! answer `F`, the client asks its nodes again for the new highest value among them, aimed a
//! little higher (see [`plan`] and [`lift`]). Each pass raises the target, and the passes end
//! within the operation's deadline.
//!
//! Why no two acquisitions share a fence, even while they hold at once (permits of a semaphore,
//! readers of a shared lock), as long as no node loses its counter: each needs a quorum of nodes
//! that drew its value for it; two quorums share a node, and that node drew the value once. (A
//! write-back that only raised lagging counters to `F` fell short here: a node that had already
//! drawn `F` for another holder counted for both, and two permits granted by the same nodes in
//! different orders — node 1: A=5, B=6; node 2: B=5, A=6 — both took 6.) A node draws only for a
//! token that holds the key there (the claim scripts check it), so a fence is never drawn for a
//! lease that is gone from that node.
//!
//! Why it increases, while a majority keeps its data (whatever the clocks do): the previous
//! lease's fence `F` was drawn on a quorum before it was handed out; the next acquisition's quorum
//! shares at least one node with it, which draws more than `F`, and the next fence is at least
//! the highest value its nodes drew, so it exceeds `F`. A node that granted the key back to the
//! same token (a retry after a failed round whose release did not reach it) answers the value it
//! last drew for that token, without drawing (and resets the key's expiry to the new TTL, so it
//! cannot lapse before the validity the client computes): for a lock, the counter, which nobody
//! else draws from on a node while the token holds the lock there; for a share, the share's own
//! record. That value was drawn for this token, after the previous lease's fence, so both
//! arguments hold. A permit's counter is drawn from by every holder of the semaphore, so a
//! permit granted back to its token draws afresh.
//!
//! Why it increases when a majority (or every node) lost its data — restarted without
//! persistence, or a counter expired after its retention: no value runs ahead of the clocks of
//! the nodes. A grant draws the node's rounded clock or `stored + 1`, which runs ahead of the clock
//! only by the draws within one microsecond, which a Redis script cannot fit; a claim draws
//! `stored + 1` or the highest value of its round, lifted by less than the round trip since that
//! value was drawn (see [`lift`]). So a node with no counter gives its clock, which is past `F`
//! once more than 10 ms (the granule) plus the clock difference between the nodes separate the two
//! acquisitions, provided no node's clock stepped back by more than that since. A real restart
//! takes far longer than 10 ms; an expired counter means at least the retention (24 h) without
//! acquisitions.
//!
//! Why the granule: the nodes read their clocks a few microseconds apart, so plain microseconds
//! would make every round disagree and pay the claim's round trip. Rounded to 10 ms, the nodes of
//! a round agree unless a 10 ms boundary falls between their readings (or their clocks differ by
//! that much): on a hot key `stored + 1` wins and they agree as counters did before; on a fresh key
//! they agree on the rounded clock.
//!
//! Cost: when the granting nodes agree (the steady state of a lock), nothing extra, so an acquire
//! is one parallel round trip. When they disagree (after a node was down or restarted empty, or
//! lost a round, or a granule boundary fell inside the round, or leases held at once drew in
//! different orders), one more parallel round trip to the lagging nodes, and another for each time
//! other holders' draws overtook the target.
//!
//! Counters expire after the fence retention (24 h after the key's last acquisition on that
//! node), so a key locked once leaves nothing behind for longer than that. A node's counter may
//! run ahead of the fences handed out (a refused round, or a claim nobody waited for, still draws
//! on the nodes it reached); only the order matters.

/// What the client must do with the values its nodes drew for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FencePlan {
    /// A quorum drew this value for us: it is our fence, and nobody else's.
    Ready(u64),
    /// Ask `lagging` (node indexes) to draw at least `fence` for us; at least `needed` of them
    /// must draw exactly that.
    Claim {
        fence: u64,
        lagging: Vec<usize>,
        needed: usize,
    },
    /// Fewer than a quorum of nodes still hold the key for us: no value can be ours.
    Short,
}

/// `drawn`: (node index, the value that node last drew for us), for every node that granted the
/// key and still counts. `lift`: how far above the highest value to aim (see [`lift`]).
pub(crate) fn plan(drawn: &[(usize, u64)], quorum: usize, lift: u64) -> FencePlan {
    if drawn.len() < quorum {
        return FencePlan::Short;
    }
    let highest = drawn.iter().map(|&(_, f)| f).max().unwrap_or(0);
    if drawn.iter().filter(|&&(_, f)| f == highest).count() >= quorum {
        return FencePlan::Ready(highest);
    }
    let fence = highest.saturating_add(lift);
    let settled = drawn.iter().filter(|&&(_, f)| f == fence).count();
    FencePlan::Claim {
        fence,
        lagging: drawn
            .iter()
            .filter(|&&(_, f)| f < fence)
            .map(|&(i, _)| i)
            .collect(),
        needed: quorum - settled,
    }
}

/// How far above the highest value drawn for it an acquisition aims in its claim pass number
/// `pass` (from 0), given `roll` (a random number).
///
/// The first pass aims at the highest value itself: that costs nothing in the common cases (a node
/// restarted empty, a granule boundary inside the round). A later pass means that other holders'
/// draws overtook our claim, and two acquisitions that drew in opposite orders on two nodes would
/// otherwise overtake each other in step for as long as they try (A holds 7 on node 0 and 8 on
/// node 1 while B holds 8 and 7; each claims 8 where the other just drew it, draws 9 there, and so
/// on). Aiming a random distance higher breaks the step: on every node, the higher aim lands on a
/// counter below it unless a still higher one landed first, so the highest aim of a pass always
/// wins, and the others aim above it next time (with k acquisitions drawing at once, about k
/// passes for the last). The distance stays under 16 (µs, in the clock the counters follow), less
/// than the round trip between two passes takes, so lifting never carries a fence ahead of the
/// nodes' clocks (see the module docs).
pub(crate) fn lift(pass: u32, roll: u64) -> u64 {
    if pass == 0 {
        return 0;
    }
    roll % 16
}

/// The fence a restore reports, from what the nodes still holding the token returned (`held`:
/// node index, that node's fence for the lease), once a quorum of them agrees on one value.
///
/// That value is the fence the acquire handed out: a quorum of nodes drew it for the token (as
/// they granted, or when it claimed it), and no two values can each stand on a quorum. A node that granted after the acquire had decided may hold a higher
/// value; a restore that took the highest one it heard would report a fence that only that node
/// backs, which a later acquisition (on a quorum without it) could match or undercut. `None` until
/// a quorum agrees; a restore that does not hear one (a node down) reports the highest fence
/// heard, once it has claimed it from a quorum like an acquire (see [`plan`]).
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
    fn agreeing_quorum_needs_no_claim() {
        assert_eq!(plan(&[(0, 7), (1, 7), (2, 7)], 2, 0), FencePlan::Ready(7));
        assert_eq!(
            plan(&[(0, 7), (2, 7), (4, 3)], 3, 0),
            FencePlan::Claim {
                fence: 7,
                lagging: vec![4],
                needed: 1
            }
        );
        assert_eq!(plan(&[(0, 7), (2, 7), (4, 3)], 2, 0), FencePlan::Ready(7));
        // Whatever the lift: a value a quorum drew for us is ours.
        assert_eq!(plan(&[(0, 7), (2, 7), (4, 3)], 2, 50), FencePlan::Ready(7));
    }

    #[test]
    fn lagging_nodes_are_asked_for_the_maximum() {
        // A node restarted empty answers 1; the others remember 41.
        assert_eq!(
            plan(&[(0, 1), (1, 41), (2, 40)], 2, 0),
            FencePlan::Claim {
                fence: 41,
                lagging: vec![0, 2],
                needed: 1
            }
        );
    }

    /// Permits A and B granted by nodes 0 and 1 of 3 in opposite orders, as node counters would
    /// draw: a value is handed out only where a quorum drew it for one of them.
    #[test]
    fn a_value_counts_only_where_it_was_drawn() {
        // The nodes' counters, and the values each drew for each permit.
        let mut counter = [4u64, 4];
        let mut draw = |node: usize, want: u64| {
            counter[node] = (counter[node] + 1).max(want);
            counter[node]
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        a.push((0, draw(0, 0)));
        b.push((0, draw(0, 0)));
        b.push((1, draw(1, 0)));
        a.push((1, draw(1, 0)));
        assert_eq!(
            (a.clone(), b.clone()),
            (vec![(0, 5), (1, 6)], vec![(0, 6), (1, 5)])
        );
        // Both take 6; raising node 0 to 6 for A would count B's 6 for A too.
        let FencePlan::Claim { fence, lagging, .. } = plan(&a, 2, 0) else {
            panic!("A holds 6 on one node only")
        };
        assert_eq!((fence, lagging.as_slice()), (6, &[0][..]));
        // A's claim of 6 on node 0, where B drew 6, draws 7: A does not get 6 there.
        a[0].1 = draw(0, 6);
        assert_eq!(a, vec![(0, 7), (1, 6)]);
        // B's claim of 6 on node 1 draws 7 as well; A and B would go on overtaking each other
        // in step, so the next pass aims a random distance higher: B aims 9, A 7.
        b[1].1 = draw(1, 6);
        let FencePlan::Claim { fence, lagging, .. } = plan(&b, 2, 2) else {
            panic!("B holds 7 on one node only")
        };
        assert_eq!((fence, lagging.as_slice()), (9, &[0, 1][..]));
        let FencePlan::Claim { fence, lagging, .. } = plan(&a, 2, 0) else {
            panic!("A holds 7 on one node only")
        };
        assert_eq!((fence, lagging.as_slice()), (7, &[1][..]));
        // Node 1: B's 9 lands first, A's claim of 7 draws 10. Node 0: B's 9.
        b[1].1 = draw(1, 9);
        a[1].1 = draw(1, 7);
        b[0].1 = draw(0, 9);
        assert_eq!(plan(&b, 2, 0), FencePlan::Ready(9));
        assert_eq!(
            plan(&a, 2, 0),
            FencePlan::Claim {
                fence: 10,
                lagging: vec![0],
                needed: 1
            }
        );
        a[0].1 = draw(0, 10);
        assert_eq!(plan(&a, 2, 0), FencePlan::Ready(10));
    }

    #[test]
    fn a_lifted_aim_is_claimed_from_every_node() {
        // Nodes 1 and 2 had drawn past our first aim (9) for others.
        assert_eq!(
            plan(&[(0, 9), (1, 10), (2, 13), (3, 9)], 3, 5),
            FencePlan::Claim {
                fence: 18,
                lagging: vec![0, 1, 2, 3],
                needed: 3
            }
        );
        assert_eq!(
            lift(0, 12345),
            0,
            "the first pass aims at the highest value"
        );
        for pass in 1..40 {
            let most = (0..2000u64).map(|roll| lift(pass, roll * 7919)).max();
            assert_eq!(most, Some(15), "pass {pass}");
        }
    }

    #[test]
    fn too_few_nodes_left_is_short() {
        // A node that no longer holds the key for us is dropped, which may leave too few.
        assert_eq!(plan(&[(0, 9), (2, 13)], 3, 0), FencePlan::Short);
        assert_eq!(plan(&[], 1, 0), FencePlan::Short);
    }
}
