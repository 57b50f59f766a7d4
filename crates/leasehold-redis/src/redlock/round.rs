//! One acquire round over every node, and the give-backs and quorum decisions around it.

use super::fanout::{Replies, Timing};
use super::fence::{lift, plan, FencePlan};
use super::kinds::{self, NodeOp};
use super::node::{self, Answer, Queueing, RedlockKeys};
use super::tally::{Taint, Tally};
use super::{late_call, RedlockBackend, ANSWER_SLACK};
use crate::node::Node;
use leasehold_core::wait::{held_elsewhere, other_size as other_size_error};
use leasehold_core::{Deadline, Error, Key, RawLease, Result, Token, Ttl};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How one acquire round ended.
pub(super) enum Round {
    Granted(RawLease),
    /// Refused for now (other owners, or the validity ran out): worth another round. With how many
    /// waiters are ahead of us, when the nodes said, and (permits) the slot to ask for next.
    Refused(Option<u64>, String, Option<u32>),
    /// Too few nodes answered for any quorum.
    Down(Error),
    /// A quorum of nodes refused a permit for another size than their holders' (an
    /// `InvalidArgument`): no round of this acquire can succeed while they hold.
    Invalid(Error),
}

/// The longest a round waits for nodes it just stamped to grant, before it runs once more: a new
/// deployment's (no wait) or a node whose forgotten leases are long over (the drift allowance).
const STAMPED_RETRY: Duration = Duration::from_millis(20);

impl RedlockBackend {
    /// One acquire round on every node with `token`, asking each for what `op` says. Nodes that
    /// answer without a stamp are stamped (see `gate.rs`); when that lets them grant at once, and
    /// the round was refused, it runs once more.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn round(
        &self,
        key: &Key,
        keys: &Arc<RedlockKeys>,
        op: &NodeOp,
        token: Token,
        ttl: Ttl,
        queueing: Queueing,
        bound: Deadline,
        tainted: &Taint,
    ) -> Round {
        let first = self.round_once(key, keys, op, token, ttl, queueing, bound, tainted);
        // Also after a granted round: a node left unstamped would be missing when a later failure
        // leaves too few answers to stamp it. Rare (a node new or restarted empty), and it costs
        // two more calls per node once. Marks include nodes that answered after an earlier round
        // was decided.
        let unstamped = self
            .unstamped
            .iter()
            .fold(false, |any, u| u.swap(false, Ordering::AcqRel) | any);
        if !unstamped {
            return first;
        }
        let hold = self.stamp(self.calls_by(bound));
        match (first, hold) {
            (Round::Refused(..), Some(hold)) if hold <= STAMPED_RETRY && !bound.is_past() => {
                std::thread::sleep(hold);
                self.round_once(key, keys, op, token, ttl, queueing, bound, tainted)
            }
            (first, _) => first,
        }
    }

    /// [`RedlockBackend::round`]'s one run. A node that answers without a stamp, even after the
    /// round was decided, is marked in `self.unstamped`.
    #[allow(clippy::too_many_arguments)]
    fn round_once(
        &self,
        key: &Key,
        keys: &Arc<RedlockKeys>,
        op: &NodeOp,
        token: Token,
        ttl: Ttl,
        queueing: Queueing,
        bound: Deadline,
        tainted: &Taint,
    ) -> Round {
        let start = Instant::now();
        let calls = self.calls_by(bound);
        let n = self.fanout.len();
        // Which nodes granted, as the nodes' own workers saw it, even after we stopped listening:
        // the slot granted (a lock or a share: 0), or -1.
        let took_at: Arc<Vec<AtomicI64>> = Arc::new((0..n).map(|_| AtomicI64::new(-1)).collect());
        let mut replies = {
            let (keys, took_at, op) = (keys.clone(), took_at.clone(), op.clone());
            let unstamped = self.unstamped.clone();
            let affinity = keys.base.lock.clone();
            // Every node gets the acquire even when a quorum answers first: a lease held on a bare
            // majority would be lost to a single node restarting empty. Calls still unsent when the
            // round's deadline passes are dropped, which bounds the work a slow node can pile up.
            let timing = Timing {
                only_while_heard: false,
                ..self.answer_timing(calls)
            };
            let mark = move |i: usize, answer: &Result<Answer>| {
                let slot = match answer {
                    Ok(Answer::Granted(_)) => 0,
                    Ok(Answer::Slot { slot, .. }) => i64::from(*slot),
                    _ => -1,
                };
                if let (true, Some(took)) = (slot >= 0, took_at.get(i)) {
                    took.store(slot, Ordering::Release);
                }
                if let (Ok(Answer::Unstamped), Some(u)) = (answer, unstamped.get(i)) {
                    u.store(true, Ordering::Release);
                }
            };
            let lock = matches!(op, NodeOp::Lock);
            let (call_keys, call_mark) = (keys.clone(), mark.clone());
            let call = move |i: usize, node: &Node| {
                let answer = kinds::acquire(node, &call_keys, &op, &token, ttl, queueing, calls);
                call_mark(i, &answer);
                answer
            };
            let all: Vec<usize> = (0..n).collect();
            if lock {
                // The plain lock's script is pipelined from this thread where it can be.
                self.fanout.call_pipelined(
                    &all,
                    &affinity,
                    timing,
                    "acquire",
                    calls,
                    |_, node| node::acquire_request(node, &keys, &token, ttl, queueing),
                    |i, node, value| {
                        let answer = node::acquire_reply(node, value);
                        mark(i, &answer);
                        answer
                    },
                    call,
                )
            } else {
                self.fanout.call(&all, &affinity, timing, call)
            }
        };
        let mut tally = Tally::new(n, self.quorum);
        let mut granted: Vec<(usize, u64)> = Vec::with_capacity(n);
        // Permits: the grants by slot (see `kinds.rs`); a lease is a quorum of one slot.
        let mut slots: Vec<(u32, Vec<(usize, u64)>)> = Vec::new();
        let mut ranks: Vec<u64> = Vec::new();
        let mut untrusted: Vec<usize> = Vec::new();
        let mut holding_off = 0;
        // Permits: the nodes that refused for another size, and the size they hold.
        let (mut other_size, mut held_size) = (0, 0);
        while let Some((i, r)) = tally.hear(&mut replies, "acquire") {
            match r {
                // A node where an earlier round's give-back of this token may still arrive (it
                // timed out, or was never waited for) could undo this grant behind our back: it
                // is given back with the others, but never counted.
                Ok(Answer::Granted(_)) if tainted.is(i) => {
                    tally.no += 1;
                    untrusted.push(i);
                }
                Ok(Answer::Granted(fence)) => {
                    tally.yes += 1;
                    granted.push((i, fence));
                }
                // The same for a permit's slot.
                Ok(Answer::Slot { .. }) if tainted.is(i) => {
                    tally.no += 1;
                    untrusted.push(i);
                }
                Ok(Answer::Slot { fence, slot }) => {
                    match slots.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, g)) => g.push((i, fence)),
                        None => slots.push((slot, vec![(i, fence)])),
                    }
                    tally.yes = slots.iter().map(|(_, g)| g.len()).max().unwrap_or(0);
                }
                Ok(Answer::Held { rank }) => {
                    tally.no += 1;
                    ranks.extend(rank);
                }
                // Granting nothing until stamped: a refusal, not a failure.
                Ok(Answer::Unstamped) => {
                    tally.no += 1;
                    holding_off += 1;
                }
                Ok(Answer::OtherSize(size)) => {
                    tally.no += 1;
                    other_size += 1;
                    held_size = size;
                }
                Err(e) => tally.failed.push(e),
            }
        }
        // Permits: the slot most nodes granted makes the lease (if they are a quorum); grants of
        // other slots are given back.
        let mut mismatched: Vec<usize> = Vec::new();
        let mut best_slot = None;
        let mut chosen = None;
        if !slots.is_empty() {
            // For the next round: a node offers its lowest free slot, so every lower slot is
            // taken there; the highest slot offered is the only one no answering node is known
            // to have taken.
            best_slot = slots.iter().map(|(s, _)| *s).max();
            slots.sort_by_key(|(s, g)| (std::cmp::Reverse(g.len()), *s));
            let (slot, group) = slots.remove(0);
            chosen = Some(slot);
            granted = group;
            mismatched = slots
                .iter()
                .flat_map(|(_, g)| g.iter().map(|&(i, _)| i))
                .collect();
        }
        // The deadline of a lease granted now: where `ttl − elapsed − drift` reaches zero.
        let valid_until = ttl.deadline_from(start);
        // Where our grants would lapse on the nodes anyway: a give-back is worth sending until then.
        let expires = start.checked_add(ttl.as_duration()).unwrap_or(start);
        let give_back = |which: &[usize], only_took, taint| {
            self.release_on(
                which, keys, op, token, expires, false, only_took, calls, taint,
            )
        };
        let mut fence_failed = None;
        if tally.yes >= self.quorum && Instant::now() < valid_until {
            // Claiming stops where the lease would have no validity left: past it, the grant is
            // of no use whatever the claims find.
            let claims = calls.min(Deadline::at(valid_until));
            match self.settle_fence(keys, op, token, &granted, claims) {
                Ok(fence) if Instant::now() < valid_until => {
                    let mut lease =
                        RawLease::new(key.clone(), token, fence, ttl, start).with_kind(op.kind());
                    lease.set_deadline(valid_until);
                    mismatched.extend(untrusted);
                    give_back(&mismatched, None, None);
                    // A permit: a node we stopped listening to may yet grant another slot, which
                    // would hold that slot for nobody's lease (and count for this token in an
                    // extend): given back as it lands. Late grants of our slot are the lease's.
                    if let Some(slot) = chosen {
                        let unheard: Vec<usize> = (0..n).filter(|&i| !tally.answered(i)).collect();
                        give_back(&unheard, Some((took_at, Some(slot))), None);
                    }
                    return Round::Granted(lease);
                }
                Ok(_) => {}
                // Out of validity while claiming: the same refusal as a grant that came too late
                // (below), not a refusal by a holder that does not exist.
                Err(_) if Instant::now() >= valid_until => {}
                Err(e) => fence_failed = Some(e),
            }
        }
        // Failed: give back what we took, waiting so that the next round (ours or another owner's)
        // finds it free; and what we may yet take where no answer came, without waiting for nodes
        // that may be down (the release reaches each after our acquire, see `fanout.rs`). Keeping
        // our places in the nodes' queues: the next round is ours too.
        drop(replies);
        let mut took: Vec<usize> = granted.iter().map(|&(i, _)| i).collect();
        took.extend(mismatched);
        took.extend(untrusted);
        let unheard: Vec<usize> = (0..n).filter(|&i| !tally.answered(i)).collect();
        give_back(&unheard, Some((took_at, None)), Some(tainted.clone()));
        give_back(&took, None, Some(tainted.clone()));
        if tally.down() {
            return Round::Down(tally.unavailable("acquire"));
        }
        if let (true, NodeOp::Permit { permits, .. }) = (other_size >= self.quorum, op) {
            return Round::Invalid(other_size_error(key, held_size, permits.get()));
        }
        if let Some(e) = fence_failed {
            return Round::Refused(None, e.message().to_owned(), None);
        }
        if tally.yes >= self.quorum {
            return Round::Refused(None, format!(
                "key \"{key}\": a quorum granted it, but a TTL of {} ms left no validity after {} ms",
                ttl.as_millis(),
                start.elapsed().as_millis()
            ), None);
        }
        // The nodes' queues may disagree a little: go by the middle one.
        ranks.sort_unstable();
        let rank = ranks.get(ranks.len() / 2).copied();
        // Said as it is when nodes that grant nothing yet made the difference: nobody may hold it.
        let why = if holding_off > 0 {
            format!(
                "key \"{key}\": not granted by a quorum: {holding_off} of the nodes that answered \
                 grant nothing until they are stamped (new, or restarted without their data)"
            )
        } else {
            held_elsewhere(key).message().to_owned()
        };
        Round::Refused(rank, why, best_slot)
    }

    /// The fence to hand out: a value that a quorum of the nodes in `granted` (node index, the
    /// value it drew for `token` as it granted) drew for `token`, claimed from the others as
    /// needed, until the deadline `calls` (see `fence.rs`).
    pub(super) fn settle_fence(
        &self,
        keys: &Arc<RedlockKeys>,
        op: &NodeOp,
        token: Token,
        granted: &[(usize, u64)],
        calls: Deadline,
    ) -> Result<u64> {
        // What each node that still counts last drew for us.
        let mut drawn = granted.to_vec();
        let mut reasons: Vec<String> = Vec::new();
        let mut fence = 0;
        for pass in 0.. {
            let above = lift(pass, fastrand::u64(..));
            let (lagging, needed) = match plan(&drawn, self.quorum, above) {
                FencePlan::Ready(fence) => return Ok(fence),
                FencePlan::Claim {
                    fence: f,
                    lagging,
                    needed,
                } => {
                    fence = f;
                    (lagging, needed)
                }
                FencePlan::Short => break,
            };
            if calls.is_past() {
                reasons.push("out of time".to_owned());
                break;
            }
            let mut replies = {
                let (keys, op) = (keys.clone(), op.clone());
                let affinity = keys.base.lock.clone();
                self.fanout.call(
                    &lagging,
                    &affinity,
                    self.answer_timing(calls),
                    move |_, node| kinds::claim(node, &keys, &op, &token, fence, calls),
                )
            };
            let mut claimed = 0;
            let mut heard: Vec<usize> = Vec::with_capacity(lagging.len());
            while let Some((i, r)) = replies.next() {
                heard.push(i);
                match r {
                    Ok(Some(value)) => {
                        if let Some(d) = drawn.iter_mut().find(|(j, _)| *j == i) {
                            d.1 = value;
                        }
                        // A node that answers more than `fence` had drawn it for someone else.
                        if value == fence {
                            claimed += 1;
                            if claimed >= needed {
                                return Ok(fence);
                            }
                        }
                    }
                    // The node no longer holds the key for us: it counts no more.
                    Ok(None) => {
                        drawn.retain(|&(j, _)| j != i);
                        reasons.push(format!("node {i} no longer holds the key"));
                    }
                    Err(e) => {
                        drawn.retain(|&(j, _)| j != i);
                        reasons.push(e.message().to_owned());
                    }
                }
            }
            // Nodes that did not answer in time may yet draw, for nothing: they count no more.
            drawn.retain(|&(j, _)| !lagging.contains(&j) || heard.contains(&j));
        }
        Err(Error::Unavailable(format!(
            "redlock: fence {fence} was drawn by too few nodes: {}",
            reasons.join("; ")
        )))
    }

    /// Compare-and-delete on `which`, in parallel, waiting (within the timeouts) for the answers.
    /// With `only_took`, the nodes we stopped listening to: without waiting, and only where the
    /// acquire before it (queued ahead on the same worker) turned out to be granted (a permit:
    /// a slot other than the one given, if one is given), so a node that is down is not sent a
    /// release per round. The caller listens until `calls` (plus slack) at
    /// most; a release that runs later, behind a slow call, gets a node call's bound of its own.
    /// With `taint`, each node whose give-back fails or times out is marked there (a failed
    /// round's give-back: that request may still reach the node later, after a later round's
    /// grant of the same token there).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn release_on(
        &self,
        which: &[usize],
        keys: &Arc<RedlockKeys>,
        op: &NodeOp,
        token: Token,
        expires: Instant,
        leave: bool,
        only_took: Option<(Arc<Vec<AtomicI64>>, Option<u32>)>,
        calls: Deadline,
        taint: Option<Taint>,
    ) {
        if which.is_empty() {
            return;
        }
        let timing = self.release_timing(expires, calls);
        let (connect, io) = (self.connect_timeout, self.io_timeout);
        let affinity = keys.base.lock.clone();
        let keys = keys.clone();
        let op = op.clone();
        let signal_ttl = self.signal_ttl;
        let wait = only_took.is_none();
        let mut replies = self.fanout.call(which, &affinity, timing, move |i, node| {
            let took = only_took.as_ref().is_none_or(|(t, except)| {
                t.get(i).is_some_and(|t| {
                    let slot = t.load(Ordering::Acquire);
                    slot >= 0 && except.is_none_or(|e| slot != i64::from(e))
                })
            });
            if !took {
                return Ok(false);
            }
            let deadline = late_call(calls, connect, io);
            let outcome =
                kinds::settle(node, &keys, &op, &token, None, leave, signal_ttl, deadline);
            if outcome.is_err() {
                if let Some(t) = &taint {
                    t.mark(i);
                }
            }
            outcome
        });
        while wait && replies.next().is_some() {}
    }

    /// [`RedlockBackend::by_quorum`] for extends, whose answers name the slot each node holds our
    /// token in (see `kinds::extend_on`): `Ok` once a quorum holds it in one slot, with the nodes
    /// that answered another slot; `Lost` once too few could still hold it at all, or every node
    /// answered and no slot has a quorum.
    pub(super) fn by_slot_quorum(
        &self,
        what: &str,
        key: &Key,
        mut replies: Replies<Option<u32>>,
    ) -> Result<Vec<usize>> {
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        let mut votes: Vec<(usize, u32)> = Vec::with_capacity(n);
        let best = |votes: &[(usize, u32)]| {
            let mut counts: Vec<(u32, usize)> = Vec::new();
            for &(_, s) in votes {
                match counts.iter_mut().find(|(slot, _)| *slot == s) {
                    Some((_, c)) => *c += 1,
                    None => counts.push((s, 1)),
                }
            }
            counts
                .into_iter()
                .max_by_key(|&(s, c)| (c, std::cmp::Reverse(s)))
        };
        // `tally.no` counts only nodes that hold no slot for us: those cannot join any slot's
        // quorum, while one that answered another slot may yet be the majority's.
        while let Some((i, r)) = tally.hear(&mut replies, what) {
            match r {
                Ok(Some(slot)) => {
                    votes.push((i, slot));
                    tally.yes = best(&votes).map_or(0, |(_, c)| c);
                }
                Ok(None) => tally.no += 1,
                Err(e) => tally.failed.push(e),
            }
        }
        if let Some((slot, _)) = best(&votes).filter(|&(_, c)| c >= self.quorum) {
            return Ok(votes
                .iter()
                .filter(|&&(_, s)| s != slot)
                .map(|&(i, _)| i)
                .collect());
        }
        let others = votes.len() - tally.yes;
        if tally.no + others > n - self.quorum {
            return Err(lost(key));
        }
        Err(tally.unavailable(what))
    }

    /// Runs a compare-and-something on every node and decides it by quorum: `Ok` once a quorum
    /// said yes, `Lost` once too few could still say yes, `Unavailable` when failures leave it
    /// undecided.
    pub(super) fn by_quorum(
        &self,
        what: &str,
        key: &Key,
        mut replies: Replies<bool>,
    ) -> Result<()> {
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        while let Some((_, r)) = tally.hear(&mut replies, what) {
            match r {
                Ok(true) => tally.yes += 1,
                Ok(false) => tally.no += 1,
                Err(e) => tally.failed.push(e),
            }
        }
        if tally.yes >= self.quorum {
            return Ok(());
        }
        if tally.no > n - self.quorum {
            return Err(lost(key));
        }
        Err(tally.unavailable(what))
    }
}

/// How long a caller listens for answers to node calls due by `calls`.
pub(super) fn listen_until(calls: Deadline) -> Instant {
    calls
        .instant()
        .checked_add(ANSWER_SLACK)
        .unwrap_or(calls.instant())
}

pub(super) fn lost(key: &Key) -> Error {
    Error::Lost(format!(
        "key \"{key}\": fewer than a quorum of nodes still hold this lease's token (it expired, or \
         another owner took it)"
    ))
}
