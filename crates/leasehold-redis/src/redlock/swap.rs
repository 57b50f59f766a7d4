//! Promote and demote over a quorum: a Redlock share becomes the exclusive lock, keeping its
//! token, and back.
//!
//! Each node promotes in its own right (`REDLOCK_PROMOTE` in `scripts.rs`): the token's share
//! becomes the node's exclusive lock when it is the node's only live share. A promote stands on a
//! quorum of such nodes, for the reason an exclusive acquire does: any other lease, reader or
//! writer, needs a quorum too, and two quorums share a node, where the promoted token holds the
//! lock alone. Its fence is settled as an acquire's (`fence.rs`): a value a quorum of the promoted
//! nodes drew for the token, claimed from the lagging ones.
//!
//! A promote short of a quorum (other readers still hold some nodes) is undone where it went
//! through: those nodes are demoted back, with the share's old fence, and the lease stays shared.
//! That is safe even where the undo does not arrive: a node the token holds exclusively shuts out
//! writers as its share did, so the share still stands wherever a quorum holds the token in
//! either form. The share is `Lost` only when too few nodes hold the token at all, and the outcome
//! is unknown (`Unavailable`, which core counts as a loss) when failed nodes leave that open.
//!
//! A waiting promote polls (core's loop) and does not hold new readers back: Redlock's queues
//! rank exclusive waiters only, and a place left there by a promote that gave up would hold
//! readers back until it lapsed.

use super::fanout::Timing;
use super::gate;
use super::round::lost;
use super::tally::Tally;
use super::{late_call, RedlockBackend};
use crate::kind_keys::SharedKeys;
use crate::node::{millis, Node};
use crate::redlock::kinds::NodeOp;
use crate::redlock::node::{RedlockKeys, FENCE_GRANULE_MICROS};
use crate::scripts::{REDLOCK_DEMOTE_SCRIPT, REDLOCK_PROMOTE_SCRIPT};
use leasehold_core::wait::held_elsewhere;
use leasehold_core::{Deadline, Error, Key, LeaseKind, RawLease, Result, Token, Ttl};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One node's answer to a promote.
enum Promoted {
    /// The token holds the lock here now, with the fence this node drew for it.
    Yes(u64),
    /// Other live shares here: nothing changed, the token's share stands.
    Others,
    /// The token holds nothing here.
    Gone,
}

fn promote_on(
    node: &Node,
    keys: &SharedKeys,
    token: &Token,
    ttl: Ttl,
    deadline: Deadline,
) -> Result<Promoted> {
    let (done, value): (i64, i64) = node.call("promote", deadline, |c| {
        REDLOCK_PROMOTE_SCRIPT
            .key(&keys.base.lock)
            .key(&keys.base.fence)
            .key(&keys.shares)
            .key(&keys.share_fences)
            .arg(token.as_str())
            .arg(ttl.as_millis())
            .arg(FENCE_GRANULE_MICROS)
            .arg(millis(node.fence_retention()))
            .invoke(c)
    })?;
    match done {
        1 => u64::try_from(value)
            .ok()
            .filter(|f| *f >= 1)
            .map(Promoted::Yes)
            .ok_or_else(|| {
                Error::Internal(format!("redis {}: fence counter gave {value}", node.name()))
            }),
        0 => Ok(Promoted::Others),
        _ => Ok(Promoted::Gone),
    }
}

fn demote_on(
    node: &Node,
    keys: &SharedKeys,
    queue: &RedlockKeys,
    token: &Token,
    ttl: Ttl,
    fence: u64,
    deadline: Deadline,
) -> Result<bool> {
    let done: i64 = node.call("demote", deadline, |c| {
        REDLOCK_DEMOTE_SCRIPT
            .key(&keys.base.lock)
            .key(&queue.queue)
            .key(&queue.heartbeats)
            .key(&keys.shares)
            .key(&keys.share_fences)
            .arg(token.as_str())
            .arg(ttl.as_millis())
            .arg(fence)
            .invoke(c)
    })?;
    Ok(done == 1)
}

/// Whether node `i` may hold this attempt's promote: it said so, or it never answered.
fn took_or_unheard(granted: &[(usize, u64)], tally: &Tally, i: usize) -> bool {
    granted.iter().any(|&(g, _)| g == i) || !tally.answered(i)
}

impl RedlockBackend {
    /// One promote attempt on every node (see the module docs).
    pub(super) fn promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let key = lease.key().clone();
        let keys = self.keys(&key);
        let shared = Arc::new(SharedKeys::new(&self.prefix, &key));
        let token = lease.token();
        let old_fence = lease.fence();
        let n = self.fanout.len();
        let start = Instant::now();
        let calls = self.call_deadline();
        // Which nodes promoted, as their workers saw it, even after we stopped listening: where
        // an undo must go.
        let took: Arc<Vec<AtomicBool>> = Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
        let mut replies = {
            let (keys, shared, took) = (keys.clone(), shared.clone(), took.clone());
            let horizons = self.horizons.clone();
            // Every node gets the promote, as every node gets an acquire: a lock on a bare
            // majority would be lost to one node restarting empty.
            let timing = Timing {
                only_while_heard: false,
                ..self.answer_timing(calls)
            };
            self.fanout
                .call_all(&keys.base.lock.clone(), timing, move |i, node| {
                    gate::reach(&horizons, i, node, &keys.gate, ttl, calls)?;
                    let answer = promote_on(node, &shared, &token, ttl, calls)?;
                    if let (Promoted::Yes(_), Some(t)) = (&answer, took.get(i)) {
                        t.store(true, Ordering::Release);
                    }
                    Ok(answer)
                })
        };
        let quorum = self.quorum;
        let mut tally = Tally::new(n, quorum);
        let mut granted: Vec<(usize, u64)> = Vec::with_capacity(n);
        let (mut others, mut gone) = (Vec::with_capacity(n), 0);
        while let Some((i, r)) = tally.hear_all(&mut replies, "promote") {
            match r {
                Ok(Promoted::Yes(fence)) => granted.push((i, fence)),
                Ok(Promoted::Others) => others.push(i),
                Ok(Promoted::Gone) => gone += 1,
                Err(e) => tally.failed.push(e),
            }
            let unheard = n - granted.len() - others.len() - gone - tally.failed.len();
            let promoted = granted.len() >= quorum;
            // Refused, with the share standing: no quorum of promotes is possible any more.
            let refused =
                granted.len() + others.len() >= quorum && granted.len() + unheard < quorum;
            if promoted || refused || gone > n - quorum {
                break;
            }
        }
        drop(replies);
        let valid_until = ttl.deadline_from(start);
        let expires = start.checked_add(ttl.as_duration()).unwrap_or(start);
        let mut why = None;
        if granted.len() >= quorum && Instant::now() < valid_until {
            let claims = calls.min(Deadline::at(valid_until));
            match self.settle_fence(&keys, &NodeOp::Lock, token, &granted, claims) {
                Ok(fence) if Instant::now() < valid_until => {
                    // The shares left where other readers were: no part of the lock.
                    self.release_on(
                        &others,
                        &keys,
                        &NodeOp::Shared(shared),
                        token,
                        expires,
                        false,
                        None,
                        calls,
                        None,
                    );
                    lease.set_kind(LeaseKind::Exclusive);
                    lease.set_fence(fence);
                    lease.set_deadline(valid_until);
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) => why = Some(e.message().to_owned()),
            }
        }
        let held = granted.len() + others.len();
        let (heard, unheard): (Vec<usize>, Vec<usize>) = (0..n)
            .filter(|&i| took_or_unheard(&granted, &tally, i))
            .partition(|&i| tally.answered(i));
        self.undo_promote(
            &keys, &shared, token, ttl, old_fence, &took, &heard, &unheard, expires,
        );
        if held >= quorum {
            let why = why.unwrap_or_else(|| held_elsewhere(&key).message().to_owned());
            return Err(Error::NotAcquired(why));
        }
        if gone > n - quorum {
            return Err(lost(&key));
        }
        Err(tally.unavailable("promote"))
    }

    /// Demotes back every node where this attempt promoted: waiting for those that said so
    /// (`heard`: the next attempt must find their share), and, without waiting, those that had not
    /// answered (`unheard`), where the demote runs only if their promote (queued ahead on the same
    /// worker) went through.
    #[allow(clippy::too_many_arguments)]
    fn undo_promote(
        &self,
        keys: &Arc<RedlockKeys>,
        shared: &Arc<SharedKeys>,
        token: Token,
        ttl: Ttl,
        fence: u64,
        took: &Arc<Vec<AtomicBool>>,
        heard: &[usize],
        unheard: &[usize],
        expires: Instant,
    ) {
        let calls = self.call_deadline();
        let (connect, io) = (self.connect_timeout, self.io_timeout);
        let affinity = &keys.base.lock;
        let undo = |which: &[usize], wait: bool| {
            if which.is_empty() {
                return;
            }
            let (keys, shared, took) = (keys.clone(), shared.clone(), took.clone());
            // Worth sending until the promote would have lapsed anyway.
            let timing = self.release_timing(expires, calls);
            let mut replies = self.fanout.call(which, affinity, timing, move |i, node| {
                if !took.get(i).is_some_and(|t| t.load(Ordering::Acquire)) {
                    return Ok(false);
                }
                let deadline = late_call(calls, connect, io);
                demote_on(node, &shared, &keys, &token, ttl, fence, deadline)
            });
            while wait && replies.next().is_some() {}
        };
        undo(unheard, false);
        undo(heard, true);
    }

    /// Demotes the lock on every node and decides by quorum, as an extend does: the share's
    /// validity is counted from the send; `Lost` when fewer than a quorum hold the token.
    pub(super) fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let key: Key = lease.key().clone();
        let keys = self.keys(&key);
        let shared = Arc::new(SharedKeys::new(&self.prefix, &key));
        let token = lease.token();
        let fence = lease.fence();
        let start = Instant::now();
        let calls = self.call_deadline();
        let replies = {
            let (keys, shared, horizons) = (keys.clone(), shared.clone(), self.horizons.clone());
            self.fanout.call_all(
                &keys.base.lock.clone(),
                self.answer_timing(calls),
                move |i, node| {
                    gate::reach(&horizons, i, node, &keys.gate, ttl, calls)?;
                    demote_on(node, &shared, &keys, &token, ttl, fence, calls)
                },
            )
        };
        let result = self.by_quorum("demote", &key, replies);
        if let Err(Error::Lost(_)) = &result {
            // Ours on a minority at most, in either form: free it for the next owner now.
            let all: Vec<usize> = (0..self.fanout.len()).collect();
            let expires = lease.deadline();
            for op in [NodeOp::Lock, NodeOp::Shared(shared)] {
                self.release_on(&all, &keys, &op, token, expires, true, None, calls, None);
            }
        }
        result?;
        let valid_until = ttl.deadline_from(start);
        if Instant::now() >= valid_until {
            lease.expire();
            return Err(Error::Lost(format!(
                "key \"{key}\": demoted on a quorum, but a TTL of {} ms left no validity",
                ttl.as_millis()
            )));
        }
        lease.set_kind(LeaseKind::Shared);
        lease.set_deadline(valid_until);
        Ok(())
    }
}
