//! Semaphores, and the swaps of a lock's kind (promote, demote).
//!
//! * A semaphore of `n` permits has slots `{prefix}permit/{len}/{key}/{00000…}`, each holder's
//!   value its token and `n`, on its own etcd lease. An attempt reads the slots, refuses another
//!   size while a holder has one ([`wait::other_size`]), and writes the lowest free slot in a
//!   transaction that also compares every slot's `mod_revision` with the read: a holder that
//!   arrived in between (of either size) makes it look again, so two sizes are never held at once
//!   and never more than `n`. Waiters queue as lock waiters do ([`crate::waiting`]), in a queue of
//!   the semaphore's own (`{prefix}pqueue/…`), and are admitted by rank: an attempt takes a slot
//!   only while fewer entries that came before it wait than permits are free (a newcomer's, the
//!   whole queue; its transaction also compares the queue's `mod_revision`, so a waiter that joined
//!   after the read makes it look again).
//! * A promote is one transaction: no exclusive holder, and every shared holder is this one (each
//!   shared key is written by a transaction of its own, so its `create_revision` is its alone); it
//!   deletes the shared key and writes the holder's key, on a new etcd lease for the TTL. Its
//!   revision is the new fence. A demote is the reverse, compared on the token, keeping the fence.

use crate::gateway::{b64, number, revision, unb64, Resend};
use crate::{fence, keys, no_state, not_ours, EtcdBackend, Held, Holding, Take, Who};
use leasehold_core::wait;
use leasehold_core::{Deadline, Key, LeaseKind, Permits, RawLease, Result, Token, Ttl};
use serde_json::{json, Value};
use std::time::Instant;

/// The holders found under a range: how many, and the last fence among them.
pub(crate) struct Count {
    pub(crate) holders: u32,
    pub(crate) fence: Option<u64>,
}

pub(crate) fn count(backend: &EtcdBackend, start: &[u8], deadline: Deadline) -> Result<Count> {
    let answer = backend.call(
        "/v3/kv/range",
        json!({"key": b64(start), "range_end": b64(&keys::range_end(start)), "keys_only": true}),
        Resend::Safe,
        deadline,
    )?;
    let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
    Ok(Count {
        holders: u32::try_from(kvs.len()).unwrap_or(u32::MAX),
        fence: kvs
            .iter()
            .filter_map(|kv| number(&kv["create_revision"]))
            .max()
            .map(fence::of_revision),
    })
}

impl EtcdBackend {
    /// One attempt at a permit of semaphore `key` of `permits`.
    pub(crate) fn try_permit(&self, key: &Key, permits: u32, ttl: Ttl) -> Result<RawLease> {
        let deadline = self.call_deadline();
        let token = Token::generate()?;
        let kind = LeaseKind::Permit(Permits::new(permits)?);
        let sent = Instant::now();
        let held = self.grant(ttl, deadline)?;
        match self.take_slot(key, permits, token, held, Who::Newcomer, deadline) {
            Ok(Take::Granted(holding)) => Ok(holding.lease(key, kind, token, ttl, sent)),
            Ok(Take::Refused { .. }) => {
                self.revoke(held.lease, deadline);
                Err(wait::refused(key, kind))
            }
            Err(error) => {
                self.revoke(held.lease, deadline);
                Err(error)
            }
        }
    }

    /// One attempt at a slot of semaphore `key` on the etcd lease `held`, by `who`: granted when
    /// fewer entries that came before it wait in the semaphore's queue than permits are free (a
    /// newcomer: the whole queue came before it).
    pub(crate) fn take_slot(
        &self,
        key: &Key,
        permits: u32,
        token: Token,
        held: Held,
        who: Who<'_>,
        deadline: Deadline,
    ) -> Result<Take<Holding>> {
        let base = keys::permits(&self.prefix, key);
        let end = keys::range_end(&base);
        let queue = keys::permit_queue(&self.prefix, key);
        let queue_end = keys::range_end(&queue);
        let value = format!("{} {permits}", token.as_str()).into_bytes();
        loop {
            deadline.check("etcd semaphore")?;
            // The holders and the queue as of one revision.
            let read = json!({"success": [
                {"request_range": {"key": b64(&base), "range_end": b64(&end)}},
                {"request_range": {"key": b64(&queue), "range_end": b64(&queue_end),
                    "keys_only": true, "sort_order": "ASCEND", "sort_target": "CREATE"}},
            ]});
            let answer = self.call("/v3/kv/txn", read, Resend::Safe, deadline)?;
            let read = revision(&answer).unwrap_or(0);
            let kvs = |i: usize| -> Vec<serde_json::Value> {
                answer["responses"][i]["response_range"]["kvs"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            };
            let mut used = Vec::new();
            for kv in kvs(0) {
                let stored = unb64(&kv["value"]);
                if stored == value {
                    // Ours, written by a send whose answer was lost.
                    return Ok(Take::Granted(Holding {
                        name: unb64(&kv["key"]),
                        value,
                        held,
                        created: number(&kv["create_revision"]).unwrap_or(read),
                    }));
                }
                let size = std::str::from_utf8(&stored)
                    .ok()
                    .and_then(|v| v.split(' ').nth(1))
                    .and_then(|n| n.parse::<u32>().ok());
                if let Some(size) = size.filter(|s| *s != permits) {
                    return Err(wait::other_size(key, size, permits));
                }
                let name = unb64(&kv["key"]);
                let slot = std::str::from_utf8(&name[base.len().min(name.len())..])
                    .ok()
                    .and_then(|s| s.parse::<u32>().ok());
                used.extend(slot);
            }
            let line: Vec<(Vec<u8>, i64)> = kvs(1)
                .iter()
                .map(|kv| {
                    (
                        unb64(&kv["key"]),
                        number(&kv["create_revision"]).unwrap_or(0),
                    )
                })
                .collect();
            // A queued waiter whose entry is gone (its etcd lease ended) is a newcomer again.
            let place = match who {
                Who::Queued { entry, revision } if line.iter().any(|(k, _)| k == entry) => {
                    Some((entry, revision))
                }
                _ => None,
            };
            let before = match place {
                Some((_, mine)) => line.iter().filter(|(_, c)| *c < mine).count(),
                None => line.len(),
            };
            let free = (permits as usize).saturating_sub(used.len());
            let slot = (0..permits).find(|s| !used.contains(s));
            let (Some(slot), true) = (slot, before < free) else {
                return Ok(Take::Refused {
                    revision: read,
                    queue: line,
                    exclusive_held: false,
                });
            };
            let name = keys::slot(&base, slot);
            let mut compare = vec![
                json!({"key": b64(&base), "range_end": b64(&end), "target": "MOD",
                    "result": "LESS", "mod_revision": (read + 1).to_string()}),
                json!({"key": b64(&name), "target": "CREATE", "result": "EQUAL",
                    "create_revision": "0"}),
            ];
            let mut success = vec![json!({"request_put": {"key": b64(&name),
                "value": b64(&value), "lease": held.lease.to_string()}})];
            match place {
                // Entries that came later do not matter; older ones only leave.
                Some((entry, _)) => {
                    success.push(json!({"request_delete_range": {"key": b64(entry)}}));
                }
                // Nobody joined since the read.
                None => compare.push(json!({"key": b64(&queue), "range_end": b64(&queue_end),
                    "target": "MOD", "result": "LESS", "mod_revision": (read + 1).to_string()})),
            }
            let txn = json!({"compare": compare, "success": success});
            let answer = self.call("/v3/kv/txn", txn, Resend::Safe, deadline)?;
            if answer["succeeded"].as_bool() == Some(true) {
                return Ok(Take::Granted(Holding {
                    name,
                    value,
                    held,
                    created: revision(&answer).unwrap_or(0),
                }));
            }
            // A holder or waiter came or went since the read (or the first send of this one
            // wrote it): look again.
        }
    }
}

/// Sends `txn`, which moves `holding`'s key to a new one on the `fresh` etcd lease (a promote or
/// a demote). After an error it is not known which of the two keys exists, so both etcd leases are
/// revoked: the lease is given up rather than left holding a key nobody tracks.
fn send_move(
    backend: &EtcdBackend,
    txn: Value,
    fresh: Held,
    holding: &Holding,
    deadline: Deadline,
) -> Result<Value> {
    backend
        .call("/v3/kv/txn", txn, Resend::Once, deadline)
        .inspect_err(|_| {
            backend.revoke(fresh.lease, deadline);
            backend.revoke(holding.held.lease, deadline);
        })
}

/// One attempt to turn a shared lease exclusive ([`leasehold_core::LockBackend::try_promote`]).
pub(crate) fn try_promote(backend: &EtcdBackend, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
    let deadline = backend.call_deadline();
    let holding = lease.state_mut::<Holding>().ok_or_else(no_state)?.clone();
    let key = lease.key().clone();
    let lock = keys::lock(&backend.prefix, &key);
    let readers = keys::readers(&backend.prefix, &key);
    let sent = Instant::now();
    let fresh = backend.grant(ttl, deadline)?;
    let txn = json!({
        "compare": [
            {"key": b64(&lock), "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
            {"key": b64(&readers), "range_end": b64(&keys::range_end(&readers)),
                "target": "CREATE", "result": "EQUAL",
                "create_revision": holding.created.to_string()},
            {"key": b64(&holding.name), "target": "VALUE", "result": "EQUAL",
                "value": b64(&holding.value)},
        ],
        "success": [
            {"request_delete_range": {"key": b64(&holding.name)}},
            {"request_put": {"key": b64(&lock), "value": b64(&holding.value),
                "lease": fresh.lease.to_string()}},
        ],
        "failure": [{"request_range": {"key": b64(&holding.name)}}],
    });
    let answer = send_move(backend, txn, fresh, &holding, deadline)?;
    if answer["succeeded"].as_bool() != Some(true) {
        backend.revoke(fresh.lease, deadline);
        let still_shared = answer["responses"][0]["response_range"]["kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .is_some_and(|kv| unb64(&kv["value"]) == holding.value);
        return Err(if still_shared {
            wait::held_elsewhere(&key)
        } else {
            not_ours(&key)
        });
    }
    let created = revision(&answer).unwrap_or(0);
    backend.revoke(holding.held.lease, deadline);
    lease.set_fence(fence::of_revision(created));
    lease.set_kind(LeaseKind::Exclusive);
    lease.state = Some(Box::new(Holding {
        name: lock,
        value: holding.value,
        held: fresh,
        created,
    }));
    lease.renewed(ttl, sent);
    Ok(())
}

/// Turns an exclusive lease shared, at once, keeping its fence.
pub(crate) fn demote(backend: &EtcdBackend, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
    let deadline = backend.call_deadline();
    let holding = lease.state_mut::<Holding>().ok_or_else(no_state)?.clone();
    let key = lease.key().clone();
    let reader = backend.lock_name(&key, LeaseKind::Shared, lease.token());
    let sent = Instant::now();
    let fresh = backend.grant(ttl, deadline)?;
    let txn = json!({
        "compare": [{"key": b64(&holding.name), "target": "VALUE", "result": "EQUAL",
            "value": b64(&holding.value)}],
        "success": [
            {"request_delete_range": {"key": b64(&holding.name)}},
            {"request_put": {"key": b64(&reader), "value": b64(&holding.value),
                "lease": fresh.lease.to_string()}},
        ],
    });
    let answer = send_move(backend, txn, fresh, &holding, deadline)?;
    if answer["succeeded"].as_bool() != Some(true) {
        backend.revoke(fresh.lease, deadline);
        return Err(not_ours(&key));
    }
    let created = revision(&answer).unwrap_or(0);
    backend.revoke(holding.held.lease, deadline);
    lease.set_kind(LeaseKind::Shared);
    lease.state = Some(Box::new(Holding {
        name: reader,
        value: holding.value,
        held: fresh,
        created,
    }));
    lease.renewed(ttl, sent);
    Ok(())
}
