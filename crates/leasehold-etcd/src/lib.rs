//! Leasehold's etcd backend (`etcd://h1:2379,h2:2379,h3:2379`, `etcds://` over TLS): leases on a
//! consensus store, spoken to through etcd's v3 HTTP/JSON gateway.
//!
//! # How a lease is kept
//!
//! * A lease is an etcd lease: TTLs are whole seconds (rounded up) and at least the server's
//!   minimum (1.5 election timeouts, 2 s with etcd's defaults). The holder relies on its own TTL,
//!   dated from the first send; another client can take the key only once etcd ends the etcd
//!   lease — up to the rounding, the server minimum, and the half second etcd's lease checker
//!   takes, later.
//! * The holder's key (`{prefix}lock/{key}`, value the token) is written by a transaction
//!   conditioned on its absence (`create_revision == 0`) and attached to the etcd lease.
//!   Release is a transaction comparing the token, then deleting; the etcd lease is revoked after.
//!   Extend is owner-only: to the same number of seconds it renews the etcd lease (`keepalive`)
//!   and confirms the key still holds the token and that lease; to another it attaches the key to
//!   a new etcd lease in one transaction that compares the token.
//! * Fences come from the cluster's revision of the granting write ([`fence`]): strictly rising,
//!   no clock involved, above every clock-drawn fence of the other backends.
//! * Reads are linearizable (etcd's default; never served stale by a follower), and a member cut
//!   off from the leader is refused by the `hasleader` header, then passed over for another.
//! * Waiters queue by revision ([`waiting`]): each has an entry under the key's queue on an etcd
//!   lease of its own (a dead waiter's entry ends with it), and blocks on a watch of its
//!   predecessor's deletion (no herd, first come first served), cut into slices of at most 50 ms.
//!   A newcomer's attempt is refused while anyone is queued.
//!
//! * `once` records ([`records`]) live beside the locks, each on an etcd lease of its keep.
//!
//! Shared locks, semaphores and promote/demote are not offered yet: they are refused with
//! `InvalidArgument`.

pub mod fence;
mod gateway;
mod keys;
mod records;
mod waiting;

use gateway::{b64, number, revision, unb64, Gateway, Retry};
use leasehold_core::config::BackendConfig;
use leasehold_core::wait::{self, Waiter};
use leasehold_core::{
    Config, Deadline, Error, Key, KeyInfo, LeaseKind, LockBackend, RawLease, Result, Token, Ttl,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The etcd backend. Thread-safe; share it (through a `Client`).
#[derive(Debug)]
pub struct EtcdBackend {
    gateway: Gateway,
    prefix: String,
    connect_timeout: Duration,
    io_timeout: Duration,
}

/// What a lease carries: the etcd lease its key is attached to, and that lease's TTL as granted.
#[derive(Debug, Clone, Copy)]
struct Held {
    lease: i64,
    /// The seconds asked for (the TTL rounded up).
    asked: i64,
}

/// The holder's key as read: its token, etcd lease and fence.
struct Holder {
    token: Vec<u8>,
    lease: i64,
    fence: u64,
}

/// What one attempt at the holder's key found.
pub(crate) enum Take {
    /// The key is ours; its fence.
    Granted(u64),
    /// Held, or someone queued first: the answer's revision, and the queue's entries (keys) in
    /// the order they came.
    Refused {
        revision: i64,
        queue: Vec<(Vec<u8>, i64)>,
    },
}

/// Who makes an attempt.
pub(crate) enum Who<'a> {
    /// Not queued: refused while anyone is.
    Newcomer,
    /// Queued with `entry`, created at `revision`: refused while an older entry is there. The
    /// entry leaves the queue with the grant.
    Queued { entry: &'a [u8], revision: i64 },
}

impl EtcdBackend {
    pub fn connect(config: &Config) -> Result<EtcdBackend> {
        let BackendConfig::Etcd(etcd) = &config.backend else {
            return Err(Error::invalid("not an etcd:// configuration"));
        };
        Ok(EtcdBackend {
            gateway: Gateway::new(etcd, config.connect_timeout, config.pool_size)?,
            prefix: config.prefix.clone(),
            connect_timeout: config.connect_timeout,
            io_timeout: config.io_timeout,
        })
    }

    fn call_deadline(&self) -> Deadline {
        Deadline::for_call(self.connect_timeout, self.io_timeout)
    }

    fn call(&self, path: &str, body: Value, retry: Retry, deadline: Deadline) -> Result<Value> {
        self.gateway.call(path, &body, retry, deadline)
    }

    /// A new etcd lease for `ttl` (whole seconds, rounded up): its id and the TTL etcd granted
    /// (its minimum when that is more).
    pub(crate) fn grant(&self, ttl: Ttl, deadline: Deadline) -> Result<Held> {
        let secs = seconds(ttl);
        // A grant that was applied and never answered leaves an etcd lease nobody knows: it ends
        // by itself after its TTL, with nothing attached. So a grant may be sent again.
        let answer = self.call(
            "/v3/lease/grant",
            json!({ "TTL": secs.to_string() }),
            Retry::Safe,
            deadline,
        )?;
        let lease = number(&answer["ID"]).filter(|id| *id != 0);
        let ttl_secs = number(&answer["TTL"]).unwrap_or(0);
        match lease {
            Some(lease) if ttl_secs > 0 => Ok(Held { lease, asked: secs }),
            _ => Err(Error::Unavailable(format!(
                "etcd granted no lease: {}",
                answer["error"].as_str().unwrap_or("no ID in its answer")
            ))),
        }
    }

    /// Renews an etcd lease to its full TTL: `Lost` once it has ended.
    pub(crate) fn renew(&self, lease: i64, deadline: Deadline) -> Result<()> {
        let answer = self.call(
            "/v3/lease/keepalive",
            json!({ "ID": lease.to_string() }),
            Retry::Safe,
            deadline,
        )?;
        match number(&answer["result"]["TTL"]) {
            Some(ttl) if ttl > 0 => Ok(()),
            _ => Err(Error::Lost("its etcd lease has ended".into())),
        }
    }

    /// Ends an etcd lease, and every key attached to it. Best effort: one that was not ended
    /// ends by itself after its TTL.
    pub(crate) fn revoke(&self, lease: i64, deadline: Deadline) {
        let _ = self.call(
            "/v3/lease/revoke",
            json!({ "ID": lease.to_string() }),
            Retry::Safe,
            deadline,
        );
    }

    /// One attempt at `key`'s holder key for `token` on the etcd lease `held`.
    pub(crate) fn take(
        &self,
        key: &Key,
        token: Token,
        held: Held,
        who: Who<'_>,
        deadline: Deadline,
    ) -> Result<Take> {
        let lock = keys::lock(&self.prefix, key);
        let queue = keys::queue(&self.prefix, key);
        let queue_end = keys::range_end(&queue);
        let line = match who {
            // Nobody queued: every key in the range (none) has create_revision 0.
            Who::Newcomer => json!({"key": b64(&queue), "range_end": b64(&queue_end),
                "target": "CREATE", "result": "EQUAL", "create_revision": "0"}),
            // Every entry came at or after ours.
            Who::Queued { revision, .. } => json!({"key": b64(&queue),
                "range_end": b64(&queue_end), "target": "CREATE", "result": "GREATER",
                "create_revision": (revision - 1).to_string()}),
        };
        let mut success = vec![json!({"request_put": {"key": b64(&lock),
            "value": b64(token.as_str().as_bytes()), "lease": held.lease.to_string()}})];
        if let Who::Queued { entry, .. } = who {
            success.push(json!({"request_delete_range": {"key": b64(entry)}}));
        }
        let txn = json!({
            "compare": [
                {"key": b64(&lock), "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
                line,
            ],
            "success": success,
            "failure": [
                {"request_range": {"key": b64(&lock)}},
                {"request_range": {"key": b64(&queue), "range_end": b64(&queue_end),
                    "keys_only": true, "sort_order": "ASCEND", "sort_target": "CREATE"}},
            ],
        });
        // Sent again after an answer that never came, the transaction tells: the holder's key
        // with our token is a grant of the first send.
        let answer = self.call("/v3/kv/txn", txn, Retry::Safe, deadline)?;
        let revision = revision(&answer).unwrap_or(0);
        if answer["succeeded"].as_bool() == Some(true) {
            return Ok(Take::Granted(fence::of_revision(revision)));
        }
        let responses = answer["responses"].as_array().cloned().unwrap_or_default();
        let kvs = |i: usize| -> Vec<Value> {
            responses
                .get(i)
                .and_then(|r| r["response_range"]["kvs"].as_array().cloned())
                .unwrap_or_default()
        };
        if let Some(holder) = kvs(0).first() {
            if unb64(&holder["value"]) == token.as_str().as_bytes()
                && number(&holder["lease"]) == Some(held.lease)
            {
                let created = number(&holder["create_revision"]).unwrap_or(revision);
                return Ok(Take::Granted(fence::of_revision(created)));
            }
        }
        let queue = kvs(1)
            .iter()
            .map(|kv| {
                (
                    unb64(&kv["key"]),
                    number(&kv["create_revision"]).unwrap_or(0),
                )
            })
            .collect();
        Ok(Take::Refused { revision, queue })
    }

    /// The holder's key of `key`, read linearizably.
    fn holder(&self, key: &Key, deadline: Deadline) -> Result<Option<Holder>> {
        let lock = keys::lock(&self.prefix, key);
        let answer = self.call(
            "/v3/kv/range",
            json!({"key": b64(&lock)}),
            Retry::Safe,
            deadline,
        )?;
        Ok(answer["kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .map(|kv| Holder {
                token: unb64(&kv["value"]),
                lease: number(&kv["lease"]).unwrap_or(0),
                fence: fence::of_revision(number(&kv["create_revision"]).unwrap_or(0)),
            }))
    }

    /// What is left of an etcd lease, as etcd's clock sees it (etcd rounds its seconds up, so
    /// one is taken off: this never says more than there is). `None` once it has ended.
    fn time_left(&self, lease: i64, deadline: Deadline) -> Result<Option<(Duration, i64)>> {
        let answer = self.call(
            "/v3/lease/timetolive",
            json!({"ID": lease.to_string()}),
            Retry::Safe,
            deadline,
        )?;
        let ttl = number(&answer["TTL"]).unwrap_or(-1);
        let granted = number(&answer["grantedTTL"]).unwrap_or(0);
        if ttl <= 0 {
            return Ok(None);
        }
        Ok(Some((
            Duration::from_secs(u64::try_from(ttl - 1).unwrap_or(0)),
            granted,
        )))
    }
}

/// An etcd lease's TTL for `ttl`: whole seconds, rounded up.
fn seconds(ttl: Ttl) -> i64 {
    i64::try_from(ttl.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX)
}

fn not_ours(key: &Key) -> Error {
    Error::Lost(format!("key \"{key}\" is not held by this lease any more"))
}

fn only_exclusive(kind: LeaseKind) -> Error {
    Error::invalid(format!(
        "the etcd backend does not offer {} leases yet (exclusive leases only)",
        kind.name()
    ))
}

impl LockBackend for EtcdBackend {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl) -> Result<RawLease> {
        let deadline = self.call_deadline();
        let token = Token::generate()?;
        let sent = Instant::now();
        let held = self.grant(ttl, deadline)?;
        match self.take(key, token, held, Who::Newcomer, deadline) {
            Ok(Take::Granted(fence)) => {
                Ok(RawLease::new(key.clone(), token, fence, ttl, sent).with_state(held))
            }
            Ok(Take::Refused { .. }) => {
                self.revoke(held.lease, deadline);
                Err(wait::held_elsewhere(key))
            }
            Err(error) => {
                // Whatever the transaction did, revoking the etcd lease undoes it.
                self.revoke(held.lease, deadline);
                Err(error)
            }
        }
    }

    fn try_acquire_as(&self, key: &Key, kind: LeaseKind, ttl: Ttl) -> Result<RawLease> {
        match kind {
            LeaseKind::Exclusive => self.try_acquire(key, ttl),
            other => Err(only_exclusive(other)),
        }
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let deadline = self.call_deadline();
        let held = *lease
            .state_mut::<Held>()
            .ok_or_else(|| Error::Internal("an etcd lease without its state".into()))?;
        let lock = keys::lock(&self.prefix, lease.key());
        let txn = json!({
            "compare": [{"key": b64(&lock), "target": "VALUE", "result": "EQUAL",
                "value": b64(lease.token().as_str().as_bytes())}],
            "success": [{"request_delete_range": {"key": b64(&lock)}}],
        });
        let answer = self.call("/v3/kv/txn", txn, Retry::Once, deadline);
        // The etcd lease goes either way: nothing of ours is left on it.
        self.revoke(held.lease, deadline);
        match answer?["succeeded"].as_bool() {
            Some(true) => Ok(()),
            _ => Err(not_ours(lease.key())),
        }
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let deadline = self.call_deadline();
        let held = *lease
            .state_mut::<Held>()
            .ok_or_else(|| Error::Internal("an etcd lease without its state".into()))?;
        let lock = keys::lock(&self.prefix, lease.key());
        let token = b64(lease.token().as_str().as_bytes());
        let sent = Instant::now();
        if seconds(ttl) == held.asked {
            // The same etcd lease will do: renew it, then make sure our key is still on it.
            match self.renew(held.lease, deadline) {
                Err(Error::Lost(_)) => return Err(not_ours(lease.key())),
                other => other?,
            }
            let txn = json!({
                "compare": [
                    {"key": b64(&lock), "target": "VALUE", "result": "EQUAL", "value": token},
                    {"key": b64(&lock), "target": "LEASE", "result": "EQUAL",
                        "lease": held.lease.to_string()},
                ],
            });
            let answer = self.call("/v3/kv/txn", txn, Retry::Safe, deadline)?;
            if answer["succeeded"].as_bool() != Some(true) {
                return Err(not_ours(lease.key()));
            }
            lease.renewed(ttl, sent);
            return Ok(());
        }
        // Another TTL: a new etcd lease, and the key moved onto it in one transaction that
        // compares the token (its create_revision, and so the fence, stays).
        let fresh = self.grant(ttl, deadline)?;
        let txn = json!({
            "compare": [{"key": b64(&lock), "target": "VALUE", "result": "EQUAL", "value": token}],
            "success": [{"request_put": {"key": b64(&lock), "value": token,
                "lease": fresh.lease.to_string()}}],
        });
        let moved = match self.call("/v3/kv/txn", txn, Retry::Safe, deadline) {
            Ok(answer) => answer["succeeded"].as_bool() == Some(true),
            Err(error) => {
                // Unknown: the key may be on either lease now; the new one stays ours to
                // release, the lease is relied on no more (core expires it).
                lease.state = Some(Box::new(fresh));
                self.revoke(held.lease, deadline);
                return Err(error);
            }
        };
        if !moved {
            self.revoke(fresh.lease, deadline);
            return Err(not_ours(lease.key()));
        }
        lease.state = Some(Box::new(fresh));
        self.revoke(held.lease, deadline);
        lease.renewed(ttl, sent);
        Ok(())
    }

    fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let deadline = self.call_deadline();
        let Some(holder) = self.holder(key, deadline)? else {
            return Ok(KeyInfo::new(false, None, None));
        };
        let left = self
            .time_left(holder.lease, deadline)?
            .map(|(left, _)| left);
        Ok(KeyInfo::new(true, left, Some(holder.fence)).with_holders(1, false))
    }

    fn inspect_as(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo> {
        match kind {
            LeaseKind::Permit(_) => Err(only_exclusive(kind)),
            _ => self.inspect(key),
        }
    }

    fn restore(&self, key: &Key, token: Token) -> Result<RawLease> {
        let deadline = self.call_deadline();
        let sent = Instant::now();
        let lost = || Error::Lost(format!("key \"{key}\" is not held by that token"));
        let Some(holder) = self.holder(key, deadline)? else {
            return Err(lost());
        };
        if holder.token != token.as_str().as_bytes() {
            return Err(lost());
        }
        let Some((left, granted)) = self.time_left(holder.lease, deadline)? else {
            return Err(lost());
        };
        let held = Held {
            lease: holder.lease,
            asked: granted,
        };
        Ok(RawLease::restored(key.clone(), token, holder.fence, left, sent).with_state(held))
    }

    fn force_release(&self, key: &Key) -> Result<bool> {
        let deadline = self.call_deadline();
        let lock = keys::lock(&self.prefix, key);
        let answer = self.call(
            "/v3/kv/deleterange",
            json!({"key": b64(&lock), "prev_kv": true}),
            Retry::Once,
            deadline,
        )?;
        let deleted = number(&answer["deleted"]).unwrap_or(0) > 0;
        if let Some(lease) = answer["prev_kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .and_then(|kv| number(&kv["lease"]))
        {
            self.revoke(lease, deadline);
        }
        if deleted {
            tracing::warn!(%key, "etcd: forced release");
        }
        Ok(deleted)
    }

    fn waiter<'a>(
        &'a self,
        key: &'a Key,
        kind: LeaseKind,
        ttl: Ttl,
        end: Instant,
    ) -> Result<Box<dyn Waiter + 'a>> {
        if kind != LeaseKind::Exclusive {
            return Err(only_exclusive(kind));
        }
        Ok(Box::new(waiting::QueueWaiter::new(self, key, ttl, end)?))
    }

    fn records(&self) -> Option<&dyn leasehold_core::records::RecordStore> {
        Some(self)
    }

    fn topology(&self) -> Option<String> {
        Some(format!("etcd members {}", self.gateway.members()))
    }
}
