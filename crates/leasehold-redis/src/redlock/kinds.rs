//! Redlock's per-node calls for every kind of lease: each node grants in its own right (the
//! scripts are in `scripts.rs`), and `round.rs` counts a quorum of grants.
//!
//! Shared: a node admits a reader while it has no exclusive holder and no live exclusive waiter
//! ranked in its Redlock queue (writer preference, as on one node). A quorum of nodes each
//! admitting the reader makes the share; an exclusive lease needs a quorum of nodes with neither
//! holder nor shares, and two majorities always share a node, so a writer and a reader never
//! both hold a quorum.
//!
//! Permits: counting is NOT enough. If each node admitted up to `permits` holders and a lease
//! needed a majority of nodes, more than `permits` leases could hold a majority each: with 3
//! nodes and 2 permits, leases A, B, C on nodes {1,2}, {2,3}, {1,3} leave every node with 2
//! holders, yet 3 leases hold. (In general counting bounds the total only while the quorum
//! exceeds `N × permits / (permits + 1)` nodes, i.e. for one permit with a majority.) So a
//! semaphore of `permits` is `permits` numbered slots, each a mutex of its own: a lease is a
//! quorum of nodes granting it the SAME slot, and since two majorities share a node, no slot is
//! held by two leases at once, so at most `permits` hold. A node grants its lowest free slot
//! (nodes in step agree on it, so one round suffices); when the nodes split between slots, the
//! round gives back its grants and one more round asks every node for the highest slot offered
//! (the lower ones are known taken on the node that offered it). Redlock's own condition still
//! applies: the bound holds while no majority of nodes loses its data at once (a node restarted
//! empty forgets the slots it held, as it forgets a lock, and so grants nothing until they are
//! over: see `gate.rs`).
//!
//! Fences: a per-key counter per kind (the lock's, shared by readers and writers; the
//! semaphore's own), with `fence.rs`'s design: a value a quorum of nodes drew for the lease's
//! token, claimed from lagging nodes when the granting nodes differ (for a share, the value each
//! node drew is also the share's own record, so any quorum can restore it). Several permits or
//! readers hold at once, so they draw from one counter side by side: this is why a fence must be
//! drawn for its token on a quorum, not merely reached by a quorum's counters.

use crate::kind_keys::{PermitKeys, SharedKeys};
use crate::node::{millis, Node};
use crate::redlock::node::FENCE_GRANULE_MICROS;
use crate::redlock::node::{self, Answer, Queueing, RedlockKeys};
use crate::scripts::{
    REDLOCK_CLAIM_FENCE_SCRIPT, REDLOCK_CLAIM_PERMIT_FENCE_SCRIPT,
    REDLOCK_CLAIM_SHARE_FENCE_SCRIPT, REDLOCK_PERMIT_ACQUIRE_SCRIPT, REDLOCK_PERMIT_SETTLE_SCRIPT,
    REDLOCK_SHARED_ACQUIRE_SCRIPT,
};
use leasehold_core::{Deadline, Error, Key, LeaseKind, Permits, Result, Token, Ttl};
use redis::ScriptInvocation;
use std::sync::Arc;
use std::time::Duration;

/// What one Redlock round asks of each node.
#[derive(Debug, Clone)]
pub(crate) enum NodeOp {
    Lock,
    Shared(Arc<SharedKeys>),
    Permit {
        keys: Arc<PermitKeys>,
        permits: Permits,
        /// The slot to ask for (after a split round), or the node's lowest free one.
        hint: Option<u32>,
    },
}

impl NodeOp {
    pub(crate) fn new(prefix: &str, key: &Key, kind: LeaseKind) -> NodeOp {
        match kind {
            LeaseKind::Shared => NodeOp::Shared(Arc::new(SharedKeys::new(prefix, key))),
            LeaseKind::Permit(permits) => NodeOp::Permit {
                keys: Arc::new(PermitKeys::new(prefix, key)),
                permits,
                hint: None,
            },
            _ => NodeOp::Lock,
        }
    }

    pub(crate) fn kind(&self) -> LeaseKind {
        match self {
            NodeOp::Lock => LeaseKind::Exclusive,
            NodeOp::Shared(_) => LeaseKind::Shared,
            NodeOp::Permit { permits, .. } => LeaseKind::Permit(*permits),
        }
    }

    pub(crate) fn with_hint(&self, slot: u32) -> NodeOp {
        match self {
            NodeOp::Permit { keys, permits, .. } => NodeOp::Permit {
                keys: keys.clone(),
                permits: *permits,
                hint: Some(slot),
            },
            other => other.clone(),
        }
    }
}

fn fence_of(node: &Node, value: i64) -> Result<u64> {
    u64::try_from(value)
        .ok()
        .filter(|f| *f >= 1)
        .ok_or_else(|| {
            Error::Internal(format!("redis {}: fence counter gave {value}", node.name()))
        })
}

/// One node's acquire. Permits answer [`Answer::Slot`]; the others as `node::acquire`.
pub(crate) fn acquire(
    node: &Node,
    keys: &RedlockKeys,
    op: &NodeOp,
    token: &Token,
    ttl: Ttl,
    queueing: Queueing,
    deadline: Deadline,
) -> Result<Answer> {
    let retention = millis(node.fence_retention());
    match op {
        NodeOp::Lock => node::acquire(node, keys, token, ttl, queueing, deadline),
        NodeOp::Shared(k) => {
            let (taken, value): (i64, i64) = node.call("acquire", deadline, |c| {
                REDLOCK_SHARED_ACQUIRE_SCRIPT
                    .key(&k.base.lock)
                    .key(&k.base.fence)
                    .key(&keys.queue)
                    .key(&keys.heartbeats)
                    .key(&k.shares)
                    .key(&k.share_fences)
                    .key(&keys.gate)
                    .arg(token.as_str())
                    .arg(ttl.as_millis())
                    .arg(FENCE_GRANULE_MICROS)
                    .arg(retention)
                    .invoke(c)
            })?;
            match taken {
                1 => fence_of(node, value).map(Answer::Granted),
                -1 => Ok(Answer::Unstamped),
                _ => Ok(Answer::Held { rank: None }),
            }
        }
        NodeOp::Permit {
            keys: k,
            permits,
            hint,
        } => {
            let hint = hint.map_or(-1, i64::from);
            let (taken, value, slot): (i64, i64, i64) = node.call("acquire", deadline, |c| {
                REDLOCK_PERMIT_ACQUIRE_SCRIPT
                    .key(&k.slots)
                    .key(&k.slot_of)
                    .key(&k.holders)
                    .key(&k.fence)
                    .key(&keys.gate)
                    .key(&k.taken)
                    .key(&k.size)
                    .arg(token.as_str())
                    .arg(ttl.as_millis())
                    .arg(permits.get())
                    .arg(hint)
                    .arg(FENCE_GRANULE_MICROS)
                    .arg(retention)
                    .invoke(c)
            })?;
            if taken == 1 {
                let fence = fence_of(node, value)?;
                let slot = u32::try_from(slot).map_err(|_| {
                    Error::Internal(format!("redis {}: permit slot {slot}", node.name()))
                })?;
                return Ok(Answer::Slot { fence, slot });
            }
            if taken == -1 {
                return Ok(Answer::Unstamped);
            }
            if taken == crate::kinds::SIZE_REFUSED {
                return Ok(Answer::OtherSize(u32::try_from(value).unwrap_or(0)));
            }
            Ok(Answer::Held { rank: None })
        }
    }
}

/// One node's release (`ttl` None) or extend. `true`: the node held our token (unexpired).
#[allow(clippy::too_many_arguments)]
pub(crate) fn settle(
    node: &Node,
    keys: &RedlockKeys,
    op: &NodeOp,
    token: &Token,
    ttl: Option<Ttl>,
    leave: bool,
    signal_ttl: Duration,
    deadline: Deadline,
) -> Result<bool> {
    let ms = ttl.map_or(0, |t| t.as_millis());
    let what = if ttl.is_some() { "extend" } else { "release" };
    let done: i64 = match (op, ttl) {
        (NodeOp::Lock, None) => {
            return node::release(node, keys, token, leave, deadline);
        }
        (NodeOp::Lock, Some(ttl)) => {
            return node.extend(&keys.base, token, ttl, signal_ttl, deadline);
        }
        (NodeOp::Shared(k), _) => node.call(what, deadline, |c| {
            k.settle(token, ms, millis(signal_ttl)).invoke(c)
        })?,
        (NodeOp::Permit { keys: k, .. }, _) => {
            node.call(what, deadline, |c| permit_settle(k, token, ms).invoke(c))?
        }
    };
    // A permit's extend answers its slot + 1 (see `extend_on`).
    Ok(done >= 1)
}

/// The permit settle script on one node: a release (`ms` 0; answers 1 if `token` held a live
/// permit there, else 0) or an extend to `ms` (answers the slot + 1 it holds, else 0). Built in
/// one place, so that its KEYS and ARGV order matches the script's for both.
fn permit_settle(k: &PermitKeys, token: &Token, ms: u64) -> ScriptInvocation<'static> {
    let mut call = REDLOCK_PERMIT_SETTLE_SCRIPT.prepare_invoke();
    call.key(&k.slots)
        .key(&k.slot_of)
        .key(&k.holders)
        .key(&k.taken)
        .key(&k.size)
        .arg(token.as_str())
        .arg(ms);
    call
}

/// One node's extend: the slot the node holds our token in (`Some(0)` for a lock or a share, which
/// have none), or `None` when it does not hold it. A permit counts only on a quorum of one slot
/// (see the module docs), so the caller groups these answers by slot.
#[allow(clippy::too_many_arguments)]
pub(crate) fn extend_on(
    node: &Node,
    keys: &RedlockKeys,
    op: &NodeOp,
    token: &Token,
    ttl: Ttl,
    signal_ttl: Duration,
    deadline: Deadline,
) -> Result<Option<u32>> {
    let NodeOp::Permit { keys: k, .. } = op else {
        let held = settle(
            node,
            keys,
            op,
            token,
            Some(ttl),
            false,
            signal_ttl,
            deadline,
        )?;
        return Ok(held.then_some(0));
    };
    let done: i64 = node.call("extend", deadline, |c| {
        permit_settle(k, token, ttl.as_millis()).invoke(c)
    })?;
    Ok(u32::try_from(done - 1).ok())
}

/// Has one node draw a fence for `token` of at least `fence` (see `fence.rs`): the value drawn
/// (for a share, also recorded as the share's fence), or `None` when the node no longer holds the
/// key for `token` (it then draws nothing).
pub(crate) fn claim(
    node: &Node,
    keys: &RedlockKeys,
    op: &NodeOp,
    token: &Token,
    fence: u64,
    deadline: Deadline,
) -> Result<Option<u64>> {
    let retention = millis(node.fence_retention());
    let drawn: i64 = match op {
        NodeOp::Lock => node.call("fence", deadline, |c| {
            REDLOCK_CLAIM_FENCE_SCRIPT
                .key(&keys.base.lock)
                .key(&keys.base.fence)
                .arg(token.as_str())
                .arg(fence)
                .arg(retention)
                .invoke(c)
        })?,
        NodeOp::Shared(k) => node.call("fence", deadline, |c| {
            REDLOCK_CLAIM_SHARE_FENCE_SCRIPT
                .key(&k.base.lock)
                .key(&k.base.fence)
                .key(&k.shares)
                .key(&k.share_fences)
                .arg(token.as_str())
                .arg(fence)
                .arg(retention)
                .invoke(c)
        })?,
        NodeOp::Permit { keys: k, .. } => node.call("fence", deadline, |c| {
            REDLOCK_CLAIM_PERMIT_FENCE_SCRIPT
                .key(&k.slots)
                .key(&k.slot_of)
                .key(&k.holders)
                .key(&k.fence)
                .arg(token.as_str())
                .arg(fence)
                .arg(retention)
                .invoke(c)
        })?,
    };
    if drawn == 0 {
        return Ok(None);
    }
    fence_of(node, drawn).map(Some)
}

/// One node's restore answer: `(how, fence, ms left)` as `kinds::restored` reads it.
pub(crate) fn restore(
    node: &Node,
    keys: &SharedKeys,
    token: &Token,
    deadline: Deadline,
) -> Result<(i64, i64, i64)> {
    let retention = millis(node.fence_retention());
    node.call("restore", deadline, |c| {
        keys.restore(token, retention).invoke(c)
    })
}

/// Deletes the lock and its shares on one node (Redlock's waiters poll: nothing to wake).
pub(crate) fn force_release(node: &Node, keys: &SharedKeys, deadline: Deadline) -> Result<bool> {
    let held: i64 = node.call("force_release", deadline, |c| {
        keys.force_release(1).invoke(c)
    })?;
    Ok(held == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(server: &leasehold_testkit::RedisServer) -> Node {
        Node::for_test(server)
    }

    fn deadline() -> Deadline {
        Deadline::after(Duration::from_secs(2))
    }

    fn granted(answer: Answer) -> u64 {
        match answer {
            Answer::Granted(fence) | Answer::Slot { fence, .. } => fence,
            other => panic!("not granted: {other:?}"),
        }
    }

    /// A claim draws for its token only, only while the token holds the key on the node, and never
    /// answers a value the node already drew (for anyone): what makes a fence one acquisition's.
    #[test]
    fn a_claim_draws_a_value_of_its_own_for_a_holder_only() {
        let server = leasehold_testkit::RedisServer::start();
        let node = node(&server);
        let key = Key::new(b"claims").unwrap();
        let keys = RedlockKeys::new("p:", &key);
        // A stamped node, which grants (see `gate.rs`).
        server.command(&[b"HSET", &keys.gate, b"horizon", b"0"]);
        let ttl = Ttl::new(Duration::from_secs(10)).unwrap();
        let (a, b) = (Token::generate().unwrap(), Token::generate().unwrap());
        let get = |op: &NodeOp, token: &Token| {
            granted(acquire(&node, &keys, op, token, ttl, Queueing::Never, deadline()).unwrap())
        };
        let claim = |op: &NodeOp, token: &Token, fence: u64| {
            claim(&node, &keys, op, token, fence, deadline()).unwrap()
        };

        // Two permits: B drew the value above A's. A's claim of B's value draws past it.
        let permit = NodeOp::new("p:", &key, LeaseKind::Permit(Permits::new(2).unwrap()));
        let (fa, fb) = (get(&permit, &a), get(&permit, &b));
        assert!(fb > fa, "{fb} after {fa}");
        assert_eq!(claim(&permit, &a, fb), Some(fb + 1));
        assert_eq!(claim(&permit, &a, fb + 10), Some(fb + 10));
        // Granted back to A (a retried round): a fresh draw, never B's or an earlier value (the
        // server's clock in µs may have passed the stored value meanwhile: then it is the draw).
        let again = get(&permit, &a);
        assert!(again > fb + 10, "{again} after {}", fb + 10);
        let stranger = Token::generate().unwrap();
        assert_eq!(claim(&permit, &stranger, fb + 100), None);
        settle(
            &node,
            &keys,
            &permit,
            &b,
            None,
            true,
            ttl.as_duration(),
            deadline(),
        )
        .unwrap();
        assert_eq!(claim(&permit, &b, fb + 100), None, "B released its permit");

        // Two readers: the claimed value is the share's own record, which a regrant reports.
        let shared = NodeOp::new("p:", &key, LeaseKind::Shared);
        let (ra, rb) = (get(&shared, &a), get(&shared, &b));
        assert_eq!(claim(&shared, &a, rb), Some(rb + 1));
        assert_eq!(get(&shared, &a), rb + 1);
        assert_eq!(get(&shared, &b), rb, "B's own record is untouched");
        assert!(ra < rb);
        assert_eq!(claim(&shared, &stranger, rb + 100), None);
        for t in [&a, &b] {
            settle(
                &node,
                &keys,
                &shared,
                t,
                None,
                true,
                ttl.as_duration(),
                deadline(),
            )
            .unwrap();
        }

        // A lock: claims only for its holder; a regrant reports the holder's last draw.
        let f = get(&NodeOp::Lock, &a);
        assert!(f > rb + 1);
        assert_eq!(claim(&NodeOp::Lock, &b, f + 5), None);
        assert_eq!(claim(&NodeOp::Lock, &a, f + 5), Some(f + 5));
        assert_eq!(claim(&NodeOp::Lock, &a, f + 5), Some(f + 6));
        assert_eq!(get(&NodeOp::Lock, &a), f + 6);
    }
}
