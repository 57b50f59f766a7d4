//! A node that lost its data grants nothing while a lease it may have granted can still be live.
//!
//! Redlock's safety rests on each node remembering what it granted. A node restarted without
//! persistence (or flushed) forgets, and a lease that held a bare majority through it then holds
//! a minority: another client could take the key on the forgetful node plus one more while the
//! first holder still counts on its lease. Redis's own Redlock page names the cure: keep a
//! restarted node out for at least the longest TTL, or persist with `appendfsync always`. The
//! library applies the first itself, so it holds whatever the operator configured.
//!
//! Each node keeps a stamp (one hash per prefix, `{prefix}redlock:node`) with its
//! `horizon`: the server time until which any lease granted or extended on it may live (every
//! grant and extend moves it forward first, in the acquire scripts and [`reach`]), and `until`,
//! before which the node grants nothing. A node without a stamp is new or lost its data; it
//! grants nothing (its acquire answers [`super::node::Answer::Unstamped`], counted as a
//! refusal) until a client stamps it (the first round that meets it, granted or not):
//!
//! - The client asks every node how long its horizon still reaches. A lease the forgetful node
//!   held was granted on a majority, so on `quorum − 1` other nodes too, whose horizons cover it.
//!   If some node has a stamp, the nodes without one are stamped to grant nothing until the
//!   furthest horizon heard (plus the drift allowance) has passed — provided at most
//!   `quorum − 2` nodes were silent, so that every majority has a member among the answers;
//!   otherwise they stay unstamped (refusing) and a later round tries again. If a majority
//!   answered and none has a stamp, the deployment is new (a live lease's majority would meet
//!   that majority in a stamped node): every node answering is stamped ready at once.
//! - Stamping never overwrites a stamp, so two clients stamping at once are harmless.
//!
//! The stamp expires a fence retention (24 h by default) after its horizon, like a key's fence
//! counter after its last lease. While a lease lives, every node of its majority keeps a stamp
//! whose horizon covers it; so when no node has a stamp, no lease is live, and an expired stamp
//! is renewed as a new one (or held off for the horizon other nodes still have).
//!
//! What the operator must still see to: no majority of the nodes may lose its data at once (then
//! no horizon remembers a lease; `appendfsync always` on every node, or restarting at most a
//! minority at a time, rules that out), and the servers' clocks must run at about the same rate
//! (the allowance is 1 % + 2 ms, as for the validity). Nodes unreachable since before the
//! deployment's first lease have no stamp either: should they and nodes that lost their data
//! make up a majority of the answers, with no stamped node answering, the deployment is taken for
//! new.

use super::node::gate_key;
use super::RedlockBackend;
use crate::node::{millis, Node};
use crate::scripts::{
    REDLOCK_GATE_INIT_SCRIPT, REDLOCK_GATE_REACH_SCRIPT, REDLOCK_GATE_READ_SCRIPT,
};
use leasehold_core::{Deadline, Result, Ttl};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a lease granted or extended on the node may still live, if it has a stamp.
fn read(node: &Node, gate: &[u8], deadline: Deadline) -> Result<Option<Duration>> {
    let (stamped, left): (i64, i64) = node.call("gate", deadline, |c| {
        REDLOCK_GATE_READ_SCRIPT.key(gate).invoke(c)
    })?;
    Ok((stamped == 1).then(|| Duration::from_millis(u64::try_from(left).unwrap_or(0))))
}

/// Whether the node has a stamp (it grants, as far as the gate goes).
pub(super) fn stamped(node: &Node, gate: &[u8], deadline: Deadline) -> Result<bool> {
    read(node, gate, deadline).map(|left| left.is_some())
}

/// Stamps a node that has none: it grants nothing for `hold`. `true`: stamped now.
fn init(node: &Node, gate: &[u8], hold: Duration, deadline: Deadline) -> Result<bool> {
    let ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
    let done: i64 = node.call("gate", deadline, |c| {
        REDLOCK_GATE_INIT_SCRIPT
            .key(gate)
            .arg(ms)
            .arg(millis(node.fence_retention()))
            .invoke(c)
    })?;
    Ok(done == 1)
}

/// Whether `heard` answers of `nodes` tell enough to stamp the nodes that have none (see the
/// module docs). A live lease holds a majority, whose members other than the forgetful node are
/// `quorum − 1`: while at most `quorum − 2` nodes are silent, one of them answered, and its
/// horizon covers the lease. With no stamp anywhere, a majority of answers suffices: a live lease's
/// majority would meet it in a node that has a stamp, unless a majority of the nodes lost their
/// data together.
fn enough_heard(nodes: usize, quorum: usize, heard: usize, stamps_seen: bool) -> bool {
    let silent = nodes.saturating_sub(heard);
    if stamps_seen {
        silent + 2 <= quorum
    } else {
        heard >= quorum
    }
}

/// The time it takes until every lease another node's horizon covers is over, stretched by the
/// drift allowance (the nodes' clocks may run a little apart).
fn hold_for(furthest: Duration) -> Duration {
    furthest
        .saturating_add(furthest / 100)
        .saturating_add(Duration::from_millis(2))
}

/// How far this client has moved each node's horizon by [`reach`], so that an extend costs one
/// more call on a node only about once per TTL, not every time.
pub(super) struct Horizons {
    epoch: Instant,
    /// Per node: ms after `epoch` that its horizon surely reaches (0: unknown).
    reached: Vec<AtomicU64>,
}

impl Horizons {
    pub(super) fn new(nodes: usize) -> Horizons {
        Horizons {
            epoch: Instant::now(),
            reached: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }
}

/// Before an extend to `ttl` on node `i`: its horizon must cover the extended lease before the
/// lease is extended (so a node stamped meanwhile, reading it, holds off long enough). It is moved
/// two TTLs ahead, so the next extends of a lease renewed every TTL/3 need no call. A node without
/// a stamp is left so: the extend fails there anyway (it lost the key).
pub(super) fn reach(
    horizons: &Horizons,
    i: usize,
    node: &Node,
    gate: &[u8],
    ttl: Ttl,
    deadline: Deadline,
) -> Result<()> {
    let Some(reached) = horizons.reached.get(i) else {
        return Ok(());
    };
    let sent = Instant::now();
    let needed = horizons.ms(sent.checked_add(ttl.as_duration()).unwrap_or(sent));
    if reached.load(Ordering::Acquire) >= needed {
        return Ok(());
    }
    let ahead = ttl.as_duration().saturating_mul(2);
    let stamped: i64 = node.call("gate", deadline, |c| {
        REDLOCK_GATE_REACH_SCRIPT
            .key(gate)
            .arg(millis(ahead))
            .arg(millis(node.fence_retention()))
            .invoke(c)
    })?;
    if stamped == 1 {
        // Counted from the send: the server moved it from a later moment.
        let at = horizons.ms(sent.checked_add(ahead).unwrap_or(sent));
        reached.fetch_max(at, Ordering::AcqRel);
    }
    Ok(())
}

impl RedlockBackend {
    /// Called once a node answered [`super::node::Answer::Unstamped`]: stamps every node found
    /// without a stamp (see the module docs). Returns how long they now grant nothing, once every
    /// one of them is stamped.
    pub(super) fn stamp(&self, calls: Deadline) -> Option<Duration> {
        let gate = gate_key(&self.prefix);
        let mut replies = {
            let gate = gate.clone();
            self.fanout
                .call_all(&gate.clone(), self.answer_timing(calls), move |_, node| {
                    read(node, &gate, calls)
                })
        };
        let mut heard = 0;
        let mut furthest: Option<Duration> = None;
        let mut which = Vec::new();
        while let Some((i, r)) = replies.next() {
            match r {
                Ok(left) => {
                    heard += 1;
                    match left {
                        Some(left) => furthest = Some(furthest.map_or(left, |f| f.max(left))),
                        None => which.push(i),
                    }
                }
                Err(e) => tracing::debug!(
                    "redlock: {} did not say how far its leases reach: {e}",
                    self.fanout.nodes().nth(i).map_or("?", |n| n.name()),
                ),
            }
        }
        if which.is_empty() {
            return Some(Duration::ZERO);
        }
        if !enough_heard(self.fanout.len(), self.quorum, heard, furthest.is_some()) {
            tracing::debug!("redlock: too few nodes answered to stamp {which:?}; later");
            return None;
        }
        // No stamp anywhere: a new deployment, nothing to wait for.
        let hold = furthest.map_or(Duration::ZERO, hold_for);
        let names: Vec<&str> = which
            .iter()
            .filter_map(|&i| self.fanout.nodes().nth(i).map(|n| n.name()))
            .collect();
        if hold.is_zero() {
            tracing::info!("redlock: stamping new nodes {names:?}");
        } else {
            tracing::warn!(
                "redlock: {names:?} lost their data (restarted without persistence?): they grant \
                 nothing for {} ms, until every lease they may have granted is over",
                hold.as_millis()
            );
        }
        let mut stamped = self.fanout.call(
            &which,
            &gate.clone(),
            self.answer_timing(calls),
            move |_, node| init(node, &gate, hold, calls),
        );
        let mut count = 0;
        while let Some((_, r)) = stamped.next() {
            if r.is_err() {
                return None;
            }
            count += 1;
        }
        (count == which.len()).then_some(hold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamping_needs_an_answer_from_every_majority() {
        // Three nodes: every one must answer once any has a stamp.
        assert!(enough_heard(3, 2, 3, true));
        assert!(!enough_heard(3, 2, 2, true));
        // Five: one may be silent.
        assert!(enough_heard(5, 3, 4, true));
        assert!(!enough_heard(5, 3, 3, true));
        // A new deployment: a majority of answers, none stamped.
        assert!(enough_heard(5, 3, 3, false));
        assert!(!enough_heard(5, 3, 2, false));
        assert!(enough_heard(3, 2, 2, false));
    }

    #[test]
    fn the_hold_covers_the_furthest_horizon_with_the_drift_allowance() {
        assert_eq!(hold_for(Duration::ZERO), Duration::from_millis(2));
        assert_eq!(
            hold_for(Duration::from_secs(10)),
            Duration::from_millis(10_102)
        );
        assert_eq!(hold_for(Duration::MAX), Duration::MAX);
    }
}
