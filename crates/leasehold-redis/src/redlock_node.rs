//! Redlock's own calls on one node, beside the single-node ones it shares (extend, inspect, the
//! fence raise): an acquire whose refusal tells a waiter its rank in the node's queue, and a
//! release that also leaves that queue. See `REDLOCK_ACQUIRE` in `scripts.rs`.
//!
//! Redlock's queue lives apart from the single-node backend's (`{prefix}rq:{key}` and
//! `{prefix}rh:{key}`): that one reserves free keys for its head, which N independent queues must
//! not do.

use crate::keys::{namespaced, RedisKeys};
use crate::node::Node;
use crate::scripts::{REDLOCK_ACQUIRE_SCRIPT, REDLOCK_RELEASE_SCRIPT};
use leasehold_core::{Error, Key, Result, Token, Ttl};
use std::time::Duration;

/// Where one Redlock lease lives on each node.
#[derive(Debug, Clone)]
pub(crate) struct RedlockKeys {
    /// The lock, fence and single-node keys (extend and inspect use them).
    pub(crate) base: RedisKeys,
    pub(crate) queue: Vec<u8>,
    pub(crate) heartbeats: Vec<u8>,
}

impl RedlockKeys {
    pub(crate) fn new(prefix: &str, key: &Key) -> RedlockKeys {
        RedlockKeys {
            base: RedisKeys::new(prefix, key),
            queue: namespaced(prefix, b"rq:", key),
            heartbeats: namespaced(prefix, b"rh:", key),
        }
    }
}

/// How a Redlock acquire treats the node's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queueing {
    /// `try_acquire`: never queues.
    Never,
    /// A waiting round: a refusal joins the queue (or renews the place) and reports the rank.
    Wait { waiter_ttl: Duration },
    /// The final round of a wait: a refusal leaves the queue.
    Last,
}

/// One node's answer to an acquire: granted with a fence, or held (with how many live waiters
/// are ahead of us, when we queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Granted(u64),
    Held { rank: Option<u64> },
}

pub(crate) fn acquire(
    node: &Node,
    keys: &RedlockKeys,
    token: &Token,
    ttl: Ttl,
    queueing: Queueing,
) -> Result<Answer> {
    let (mode, waiter_ttl) = match queueing {
        Queueing::Never => ("try", 1),
        Queueing::Wait { waiter_ttl } => (
            "wait",
            u64::try_from(waiter_ttl.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        ),
        Queueing::Last => ("last", 1),
    };
    let (taken, value, rank): (i64, i64, i64) = node.call("acquire", |c| {
        REDLOCK_ACQUIRE_SCRIPT
            .key(&keys.base.lock)
            .key(&keys.base.fence)
            .key(&keys.queue)
            .key(&keys.heartbeats)
            .arg(token.as_str())
            .arg(ttl.as_millis())
            .arg(mode)
            .arg(waiter_ttl)
            .invoke(c)
    })?;
    if taken == 1 {
        return u64::try_from(value)
            .ok()
            .filter(|f| *f >= 1)
            .map(Answer::Granted)
            .ok_or_else(|| {
                Error::Internal(format!("redis {}: fence counter gave {value}", node.name()))
            });
    }
    Ok(Answer::Held {
        rank: u64::try_from(rank).ok(),
    })
}

/// Compare-and-delete; `leave` also gives up the place in the queue. `true`: the key held the
/// token.
pub(crate) fn release(node: &Node, keys: &RedlockKeys, token: &Token, leave: bool) -> Result<bool> {
    let done: i64 = node.call("release", |c| {
        REDLOCK_RELEASE_SCRIPT
            .key(&keys.base.lock)
            .key(&keys.queue)
            .key(&keys.heartbeats)
            .arg(token.as_str())
            .arg(if leave { "1" } else { "0" })
            .invoke(c)
    })?;
    Ok(done == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_queue_keys_have_their_own_namespace() {
        let k = RedlockKeys::new("p:", &Key::new(b"x").unwrap());
        assert_eq!(k.queue, b"p:rq:x");
        assert_eq!(k.heartbeats, b"p:rh:x");
        assert_ne!(k.queue, k.base.queue);
        assert_eq!(k.base.lock, b"p:l:x");
    }
}
