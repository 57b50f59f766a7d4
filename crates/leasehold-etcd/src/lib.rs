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
//!   predecessor's deletion (no herd, first come first served), read in slices of at most 50 ms.
//!   A newcomer's attempt is refused while anyone is queued (a reader's, while a writer is).
//!   Semaphore waiters queue apart and are let in by rank: while fewer older entries wait than
//!   permits are free (a newcomer, while the queue is shorter than that).
//! * Shared locks: a key per reader (`{prefix}shared/…`) beside the holder's key; an exclusive
//!   grant needs both empty, a shared one no exclusive holder. Semaphores, promote and demote are
//!   in [`kinds`]; `once` records ([`records`]) live beside the locks, each on an etcd lease of
//!   its keep.

mod doctor;
pub mod fence;
mod gateway;
mod keys;
mod kinds;
mod records;
mod waiting;

use gateway::{b64, number, revision, unb64, Gateway, Resend};
use leasehold_core::config::BackendConfig;
use leasehold_core::wait::{self, Waiter};
use leasehold_core::{
    Config, Deadline, Error, Key, KeyInfo, LeaseKind, LockBackend, RawLease, Request, Result,
    Token, Ttl,
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

/// An etcd lease: its id, and the seconds asked for (the TTL rounded up).
#[derive(Debug, Clone, Copy)]
struct Held {
    lease: i64,
    asked: i64,
}

/// What a lease carries: the etcd key it holds, that key's value, the etcd lease the key is
/// attached to, and the revision that created the key.
#[derive(Debug, Clone)]
struct Holding {
    name: Vec<u8>,
    value: Vec<u8>,
    held: Held,
    created: i64,
}

impl Holding {
    fn new(name: Vec<u8>, token: Token, held: Held, created: i64) -> Holding {
        Holding {
            name,
            value: token.as_str().as_bytes().to_vec(),
            held,
            created,
        }
    }

    /// The lease of this holding, of `kind`, granted for `ttl` by a request sent at `sent`.
    fn lease(self, key: &Key, kind: LeaseKind, token: Token, ttl: Ttl, sent: Instant) -> RawLease {
        let fence = fence::of_revision(self.created);
        RawLease::new(key.clone(), token, fence, ttl, sent)
            .with_kind(kind)
            .with_state(self)
    }
}

/// The holder's key as read: its token, etcd lease and fence.
struct Holder {
    token: Vec<u8>,
    lease: i64,
    fence: u64,
}

/// What one attempt at a lock (or a semaphore's slot) found.
pub(crate) enum Take<G = i64> {
    /// The key is ours: the revision that wrote it (a slot: what the lease holds).
    Granted(G),
    /// Held, or someone queued first: the answer's revision, the queue's entries (keys and
    /// revisions) in the order they came, and whether an exclusive holder has the key.
    Refused {
        revision: i64,
        queue: Vec<(Vec<u8>, i64)>,
        exclusive_held: bool,
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
    /// What a lock key (exclusive or shared) holds now.
    fn inspect_lock(&self, key: &Key) -> Result<KeyInfo> {
        let deadline = self.call_deadline();
        if let Some(holder) = self.holder(key, deadline)? {
            let left = self
                .time_left(holder.lease, deadline)?
                .map(|(left, _)| left);
            return Ok(KeyInfo::new(true, left, Some(holder.fence)).with_holders(1, false));
        }
        let readers = kinds::count(self, &keys::readers(&self.prefix, key), deadline)?;
        if readers.holders == 0 {
            return Ok(KeyInfo::new(false, None, None));
        }
        Ok(KeyInfo::new(true, None, readers.fence).with_holders(readers.holders, true))
    }

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

    fn call(&self, path: &str, body: Value, retry: Resend, deadline: Deadline) -> Result<Value> {
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
            Resend::Safe,
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
            Resend::Safe,
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
            Resend::Safe,
            deadline,
        );
    }

    /// The etcd key a lock lease of `kind` (exclusive or shared) with `token` holds.
    pub(crate) fn lock_name(&self, key: &Key, kind: LeaseKind, token: Token) -> Vec<u8> {
        match kind {
            LeaseKind::Shared => keys::entry(&keys::readers(&self.prefix, key), token.as_str()),
            _ => keys::lock(&self.prefix, key),
        }
    }

    /// One attempt at `key` as a lock of `kind` (exclusive: no holder of either kind; shared: no
    /// exclusive holder) for `token` on the etcd lease `held`.
    pub(crate) fn take(
        &self,
        key: &Key,
        kind: LeaseKind,
        token: Token,
        held: Held,
        who: Who<'_>,
        deadline: Deadline,
    ) -> Result<Take> {
        let lock = keys::lock(&self.prefix, key);
        let name = self.lock_name(key, kind, token);
        let queue = keys::queue(&self.prefix, key);
        let queue_end = keys::range_end(&queue);
        let writers = keys::entry(&queue, keys::WRITER);
        let line = match who {
            // A writer: nobody queued (every key in the range, none, has create_revision 0). A
            // reader: no writer queued (readers wait only behind a writer, and one that left
            // its entry behind must not hold readers up).
            Who::Newcomer if kind == LeaseKind::Shared => json!({"key": b64(&writers),
                "range_end": b64(&keys::range_end(&writers)), "target": "CREATE",
                "result": "EQUAL", "create_revision": "0"}),
            Who::Newcomer => json!({"key": b64(&queue), "range_end": b64(&queue_end),
                "target": "CREATE", "result": "EQUAL", "create_revision": "0"}),
            // Every entry came at or after ours.
            Who::Queued { revision, .. } => json!({"key": b64(&queue),
                "range_end": b64(&queue_end), "target": "CREATE", "result": "GREATER",
                "create_revision": (revision - 1).to_string()}),
        };
        let mut compare = vec![
            json!({"key": b64(&lock), "target": "CREATE", "result": "EQUAL",
                "create_revision": "0"}),
            line,
        ];
        if kind == LeaseKind::Exclusive {
            let readers = keys::readers(&self.prefix, key);
            compare.push(
                json!({"key": b64(&readers), "range_end": b64(&keys::range_end(&readers)),
                "target": "CREATE", "result": "EQUAL", "create_revision": "0"}),
            );
        }
        let mut success = vec![json!({"request_put": {"key": b64(&name),
            "value": b64(token.as_str().as_bytes()), "lease": held.lease.to_string()}})];
        if let Who::Queued { entry, .. } = who {
            success.push(json!({"request_delete_range": {"key": b64(entry)}}));
        }
        let txn = json!({
            "compare": compare,
            "success": success,
            "failure": [
                {"request_range": {"key": b64(&name)}},
                {"request_range": {"key": b64(&queue), "range_end": b64(&queue_end),
                    "keys_only": true, "sort_order": "ASCEND", "sort_target": "CREATE"}},
                {"request_range": {"key": b64(&lock), "keys_only": true}},
            ],
        });
        // Sent again after an answer that never came, the transaction tells: our key with our
        // token on our etcd lease is a grant of the first send.
        let answer = self.call("/v3/kv/txn", txn, Resend::Safe, deadline)?;
        let revision = revision(&answer).unwrap_or(0);
        if answer["succeeded"].as_bool() == Some(true) {
            return Ok(Take::Granted(revision));
        }
        let responses = answer["responses"].as_array().cloned().unwrap_or_default();
        let kvs = |i: usize| -> Vec<Value> {
            responses
                .get(i)
                .and_then(|r| r["response_range"]["kvs"].as_array().cloned())
                .unwrap_or_default()
        };
        if let Some(mine) = kvs(0).first() {
            if unb64(&mine["value"]) == token.as_str().as_bytes()
                && number(&mine["lease"]) == Some(held.lease)
            {
                return Ok(Take::Granted(
                    number(&mine["create_revision"]).unwrap_or(revision),
                ));
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
        Ok(Take::Refused {
            revision,
            queue,
            exclusive_held: !kvs(2).is_empty(),
        })
    }

    /// One attempt at a lock of `kind`, as a newcomer.
    fn try_lock(&self, key: &Key, kind: LeaseKind, ttl: Ttl) -> Result<RawLease> {
        let deadline = self.call_deadline();
        let token = Token::generate()?;
        let sent = Instant::now();
        let held = self.grant(ttl, deadline)?;
        match self.take(key, kind, token, held, Who::Newcomer, deadline) {
            Ok(Take::Granted(created)) => {
                let name = self.lock_name(key, kind, token);
                let holding = Holding::new(name, token, held, created);
                Ok(holding.lease(key, kind, token, ttl, sent))
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

    /// The holder's key of `key`, read linearizably.
    fn holder(&self, key: &Key, deadline: Deadline) -> Result<Option<Holder>> {
        let lock = keys::lock(&self.prefix, key);
        let answer = self.call(
            "/v3/kv/range",
            json!({"key": b64(&lock)}),
            Resend::Safe,
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

    /// What is left of an etcd lease that can be relied on, and its granted TTL; `None` once it
    /// has ended. etcd answers whole seconds; one is taken off, so this never says more than there
    /// is. A lease granted or renewed reads less than its granted TTL: more is what a leader
    /// elected since added (a new leader gives every lease its TTL plus an election timeout), or
    /// what etcd 3.4 answers in the middle of a leader change (9223372036 seconds). Neither is
    /// relied on: the leader before, stalled and not yet aware of the election, still ends leases
    /// by its own older count when it wakes (etcd releases before late 2023), so such a lease has
    /// nothing proven left until its holder renews it.
    fn time_left(&self, lease: i64, deadline: Deadline) -> Result<Option<(Duration, i64)>> {
        let answer = self.call(
            "/v3/lease/timetolive",
            json!({"ID": lease.to_string()}),
            Resend::Safe,
            deadline,
        )?;
        let ttl = number(&answer["TTL"]).unwrap_or(-1);
        let granted = number(&answer["grantedTTL"]).unwrap_or(0);
        if ttl <= 0 {
            return Ok(None);
        }
        let left = if ttl >= granted { 0 } else { ttl - 1 };
        Ok(Some((
            Duration::from_secs(u64::try_from(left).unwrap_or(0)),
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

fn no_state() -> Error {
    Error::Internal("an etcd lease without its state".into())
}

impl LockBackend for EtcdBackend {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        let (key, ttl) = (request.key(), request.ttl());
        match request.kind() {
            LeaseKind::Permit(permits) => self.try_permit(key, permits.get(), ttl),
            kind => self.try_lock(key, kind, ttl),
        }
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let deadline = self.call_deadline();
        let holding = lease.state_mut::<Holding>().ok_or_else(no_state)?.clone();
        let txn = json!({
            "compare": [{"key": b64(&holding.name), "target": "VALUE", "result": "EQUAL",
                "value": b64(&holding.value)}],
            "success": [{"request_delete_range": {"key": b64(&holding.name)}}],
        });
        let answer = self.call("/v3/kv/txn", txn, Resend::Once, deadline);
        // The etcd lease goes either way: nothing of ours is left on it.
        self.revoke(holding.held.lease, deadline);
        match answer?["succeeded"].as_bool() {
            Some(true) => Ok(()),
            _ => Err(not_ours(lease.key())),
        }
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let deadline = self.call_deadline();
        let holding = lease.state_mut::<Holding>().ok_or_else(no_state)?.clone();
        let (name, value) = (b64(&holding.name), b64(&holding.value));
        let held = holding.held;
        let sent = Instant::now();
        if seconds(ttl) == held.asked {
            // The same etcd lease will do: renew it, then make sure our key is still on it.
            match self.renew(held.lease, deadline) {
                Err(Error::Lost(_)) => return Err(not_ours(lease.key())),
                other => other?,
            }
            let txn = json!({
                "compare": [
                    {"key": name, "target": "VALUE", "result": "EQUAL", "value": value},
                    {"key": name, "target": "LEASE", "result": "EQUAL",
                        "lease": held.lease.to_string()},
                ],
            });
            let answer = self.call("/v3/kv/txn", txn, Resend::Safe, deadline)?;
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
            "compare": [{"key": name, "target": "VALUE", "result": "EQUAL", "value": value}],
            "success": [{"request_put": {"key": name, "value": value,
                "lease": fresh.lease.to_string()}}],
        });
        let moved = match self.call("/v3/kv/txn", txn, Resend::Safe, deadline) {
            Ok(answer) => answer["succeeded"].as_bool() == Some(true),
            Err(error) => {
                // Unknown: the key may be on either etcd lease now. Both end: the lease is
                // relied on no more (core expires it), and what it held goes with them.
                self.revoke(fresh.lease, deadline);
                self.revoke(held.lease, deadline);
                return Err(error);
            }
        };
        if !moved {
            self.revoke(fresh.lease, deadline);
            return Err(not_ours(lease.key()));
        }
        lease.state = Some(Box::new(Holding {
            held: fresh,
            ..holding
        }));
        self.revoke(held.lease, deadline);
        lease.renewed(ttl, sent);
        Ok(())
    }

    fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        kinds::try_promote(self, lease, ttl)
    }

    fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        kinds::demote(self, lease, ttl)
    }

    fn inspect(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo> {
        match kind {
            LeaseKind::Permit(_) => {
                let deadline = self.call_deadline();
                let permits = kinds::count(self, &keys::permits(&self.prefix, key), deadline)?;
                Ok(KeyInfo::new(permits.holders > 0, None, permits.fence)
                    .with_holders(permits.holders, false))
            }
            _ => self.inspect_lock(key),
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
        let holding = Holding {
            name: keys::lock(&self.prefix, key),
            value: holder.token,
            held: Held {
                lease: holder.lease,
                asked: granted,
            },
            created: i64::try_from(holder.fence - fence::BASE).unwrap_or(0),
        };
        Ok(RawLease::restored(key.clone(), token, holder.fence, left, sent).with_state(holding))
    }

    fn force_release(&self, key: &Key) -> Result<bool> {
        let deadline = self.call_deadline();
        let lock = keys::lock(&self.prefix, key);
        let readers = keys::readers(&self.prefix, key);
        // The exclusive holder and every shared one, in one transaction.
        let txn = json!({
            "success": [
                {"request_delete_range": {"key": b64(&lock), "prev_kv": true}},
                {"request_delete_range": {"key": b64(&readers),
                    "range_end": b64(&keys::range_end(&readers)), "prev_kv": true}},
            ],
        });
        let answer = self.call("/v3/kv/txn", txn, Resend::Once, deadline)?;
        let mut deleted = false;
        for response in answer["responses"].as_array().into_iter().flatten() {
            let gone = &response["response_delete_range"];
            deleted |= number(&gone["deleted"]).unwrap_or(0) > 0;
            for kv in gone["prev_kvs"].as_array().into_iter().flatten() {
                if let Some(lease) = number(&kv["lease"]).filter(|l| *l != 0) {
                    self.revoke(lease, deadline);
                }
            }
        }
        if deleted {
            tracing::warn!(%key, "etcd: forced release");
        }
        Ok(deleted)
    }

    fn waiter<'a>(&'a self, request: &'a Request, end: Instant) -> Result<Box<dyn Waiter + 'a>> {
        // Every kind queues, semaphores in a queue of their own.
        let (key, ttl, kind) = (request.key(), request.ttl(), request.kind());
        Ok(Box::new(waiting::QueueWaiter::new(
            self, key, kind, ttl, end,
        )?))
    }

    fn records(&self) -> Option<&dyn leasehold_core::records::RecordStore> {
        Some(self)
    }

    fn topology(&self) -> Option<String> {
        Some(format!("etcd members {}", self.gateway.members()))
    }

    fn diagnose(&self) -> Result<leasehold_core::doctor::Diagnosis> {
        doctor::diagnose(&self.gateway, || self.call_deadline())
    }
}
