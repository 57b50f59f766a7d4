//! Redlock's own calls on one node, beside the single-node ones it shares (extend, inspect): an
//! acquire whose refusal tells a waiter its rank in the node's queue, and a release that also
//! leaves that queue. See `REDLOCK_ACQUIRE` in `scripts.rs`.
//!
//! Redlock's queue lives apart from the single-node backend's (`{prefix}rq:{key}` and
//! `{prefix}rh:{key}`): that one reserves free keys for its head, which N independent queues must
//! not do.

use crate::keys::{namespaced, RedisKeys};
use crate::node::Node;
use crate::scripts::{REDLOCK_ACQUIRE_SCRIPT, REDLOCK_RELEASE_SCRIPT};
use leasehold_core::{Deadline, Error, Key, Result, Token, Ttl};
use std::time::Duration;

/// The clock part of a Redlock node's fence is rounded down to this many microseconds, so that the
/// nodes of a round, whose clocks read slightly differently, usually return the same fence and need
/// no claim (see `fence.rs`).
pub(crate) const FENCE_GRANULE_MICROS: u64 = 10_000;

/// Where one Redlock lease lives on each node.
#[derive(Debug, Clone)]
pub(crate) struct RedlockKeys {
    /// The lock, fence and single-node keys (extend and inspect use them).
    pub(crate) base: RedisKeys,
    pub(crate) queue: Vec<u8>,
    pub(crate) heartbeats: Vec<u8>,
    /// The node's stamp, one per prefix (see `gate.rs`).
    pub(crate) gate: Vec<u8>,
}

impl RedlockKeys {
    pub(crate) fn new(prefix: &str, key: &Key) -> RedlockKeys {
        RedlockKeys {
            base: RedisKeys::new(prefix, key),
            queue: namespaced(prefix, b"rq:", key),
            heartbeats: namespaced(prefix, b"rh:", key),
            gate: gate_key(prefix),
        }
    }
}

/// A node's stamp (see `gate.rs`): outside every lease's own names, which all carry a `{…}`.
pub(crate) fn gate_key(prefix: &str) -> Vec<u8> {
    format!("{prefix}redlock:node").into_bytes()
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
    /// A permit: granted this slot (see `kinds.rs`), with a fence.
    Slot {
        fence: u64,
        slot: u32,
    },
    Held {
        rank: Option<u64>,
    },
    /// The node has no stamp: it is new, or lost its data (a restart without persistence). It
    /// grants nothing until the client stamps it (see `gate.rs`).
    Unstamped,
    /// A permit refused because the node's live holders were granted under another size (this
    /// one): a refusal; a quorum of these makes the acquire `InvalidArgument`.
    OtherSize(u32),
}

/// The acquire script's arguments after the token and TTL: the queue mode and the waiter TTL.
fn queue_args(queueing: Queueing) -> (&'static str, u64) {
    match queueing {
        Queueing::Never => ("try", 1),
        Queueing::Wait { waiter_ttl } => (
            "wait",
            u64::try_from(waiter_ttl.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        ),
        Queueing::Last => ("last", 1),
    }
}

pub(crate) fn acquire(
    node: &Node,
    keys: &RedlockKeys,
    token: &Token,
    ttl: Ttl,
    queueing: Queueing,
    deadline: Deadline,
) -> Result<Answer> {
    let (mode, waiter_ttl) = queue_args(queueing);
    let retention = retention_ms(node);
    let reply: (i64, i64, i64) = node.call("acquire", deadline, |c| {
        REDLOCK_ACQUIRE_SCRIPT
            .key(&keys.base.lock)
            .key(&keys.base.fence)
            .key(&keys.queue)
            .key(&keys.heartbeats)
            .key(&keys.gate)
            .arg(token.as_str())
            .arg(ttl.as_millis())
            .arg(mode)
            .arg(waiter_ttl)
            .arg(FENCE_GRANULE_MICROS)
            .arg(retention)
            .invoke(c)
    })?;
    answer(node, reply)
}

/// [`acquire`]'s request, packed for a pipelined wave (`pipeline.rs`): EVALSHA of the same
/// script with the same keys and arguments.
pub(crate) fn acquire_request(
    node: &Node,
    keys: &RedlockKeys,
    token: &Token,
    ttl: Ttl,
    queueing: Queueing,
) -> Vec<u8> {
    let (mode, waiter_ttl) = queue_args(queueing);
    let mut cmd = evalsha(&REDLOCK_ACQUIRE_SCRIPT, 5);
    cmd.arg(&keys.base.lock)
        .arg(&keys.base.fence)
        .arg(&keys.queue)
        .arg(&keys.heartbeats)
        .arg(&keys.gate)
        .arg(token.as_str())
        .arg(ttl.as_millis())
        .arg(mode)
        .arg(waiter_ttl)
        .arg(FENCE_GRANULE_MICROS)
        .arg(retention_ms(node));
    cmd.get_packed_command()
}

/// [`acquire`]'s answer from a pipelined reply.
pub(crate) fn acquire_reply(node: &Node, value: redis::Value) -> Result<Answer> {
    let reply = redis::from_redis_value(value).map_err(|e| unexpected(node, "acquire", &e))?;
    answer(node, reply)
}

fn answer(node: &Node, (taken, value, rank): (i64, i64, i64)) -> Result<Answer> {
    if taken == -1 {
        return Ok(Answer::Unstamped);
    }
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

fn retention_ms(node: &Node) -> u64 {
    u64::try_from(node.fence_retention().as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// `EVALSHA <sha> <keys>`, the rest to be added.
fn evalsha(script: &redis::Script, keys: usize) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys);
    cmd
}

fn unexpected(node: &Node, what: &str, e: &dyn std::fmt::Display) -> Error {
    Error::Internal(format!(
        "redis {}: {what} got an unexpected answer: {e}",
        node.name()
    ))
}

/// Compare-and-delete; `leave` also gives up the place in the queue. `true`: the key held the
/// token.
pub(crate) fn release(
    node: &Node,
    keys: &RedlockKeys,
    token: &Token,
    leave: bool,
    deadline: Deadline,
) -> Result<bool> {
    let done: i64 = node.call("release", deadline, |c| {
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

/// [`release`]'s request, packed for a pipelined wave.
pub(crate) fn release_request(keys: &RedlockKeys, token: &Token, leave: bool) -> Vec<u8> {
    let mut cmd = evalsha(&REDLOCK_RELEASE_SCRIPT, 3);
    cmd.arg(&keys.base.lock)
        .arg(&keys.queue)
        .arg(&keys.heartbeats)
        .arg(token.as_str())
        .arg(if leave { "1" } else { "0" });
    cmd.get_packed_command()
}

/// [`release`]'s answer from a pipelined reply.
pub(crate) fn release_reply(node: &Node, value: redis::Value) -> Result<bool> {
    let done: i64 = redis::from_redis_value(value).map_err(|e| unexpected(node, "release", &e))?;
    Ok(done == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_queue_keys_have_their_own_namespace() {
        let k = RedlockKeys::new("p:", &Key::new(b"x").unwrap());
        let key = Key::new(b"x").unwrap();
        assert_eq!(k.queue, namespaced("p:", b"rq:", &key));
        assert_eq!(k.heartbeats, namespaced("p:", b"rh:", &key));
        assert!(k.queue.ends_with(b"}rq:x") && k.heartbeats.ends_with(b"}rh:x"));
        assert_ne!(k.queue, k.base.queue);
        assert_eq!(k.base.lock, namespaced("p:", b"l:", &key));
    }

    /// A node that still holds our token from an earlier failed round (its
    /// give-back never landed) is granted again with its expiry reset to the new TTL, so it cannot
    /// lapse before the validity the client computes from the new round.
    #[test]
    fn a_node_still_holding_our_token_is_granted_with_a_fresh_expiry() {
        let server = leasehold_testkit::RedisServer::start();
        let node = Node::for_test(&server);
        let keys = RedlockKeys::new("p:", &Key::new(b"regrant").unwrap());
        // A stamped node, which grants (see `gate.rs`).
        server.command(&[b"HSET", &keys.gate, b"horizon", b"0"]);
        let token = Token::generate().unwrap();
        let ttl = Ttl::new(Duration::from_secs(10)).unwrap();
        let deadline = || Deadline::after(Duration::from_secs(2));
        let wait = Queueing::Wait {
            waiter_ttl: Duration::from_secs(2),
        };
        let first = acquire(&node, &keys, &token, ttl, wait, deadline()).unwrap();
        // The failed round's give-back did not reach this node; the next round comes later.
        std::thread::sleep(Duration::from_millis(1200));
        let again = acquire(&node, &keys, &token, ttl, wait, deadline()).unwrap();
        assert_eq!(first, again, "granted again, with the same fence");
        let reply = server.command(&[b"PTTL", &keys.base.lock]);
        let left: i64 = reply.trim().trim_start_matches(':').parse().unwrap();
        assert!(
            left > 9_500,
            "expiry reset to the new 10 s TTL: {left} ms left"
        );
    }
}
