//! Shared locks, semaphores, restore and force-release on one Redis server; the
//! scripts are in `scripts.rs`, the key names in `kind_keys.rs`.
//!
//! Shared locks: the lock key holds `#shared` while readers hold it, expiring with the last
//! share, and the shares are a sorted set of token → expiry on the server's clock (plus each
//! share's fence, for restore). The exclusive scripts are untouched: to them a shared key is
//! simply held, with a PTTL a waiter may block for. Both kinds wait in the lock's one FIFO queue
//! with the same `BLPOP` wake-up, so writer preference is plain arrival order: a writer queued
//! behind readers makes every later reader queue behind it (Symfony's reader preference starves
//! writers). A reader granted from the head wakes the next head, so a batch of queued readers
//! gets in together. Fences come from the lock's own counter, so readers and writers share one
//! rising sequence.
//!
//! Promote and demote swap a lease's kind with its token in one script each, atomic because a
//! script runs alone on the server: promote turns the lock key from `#shared` into the token (and
//! drops the shares' keys) only while no other share is live, drawing a new fence as an exclusive
//! acquire does; demote turns the token's key into `#shared` with the token's share, fence
//! unchanged, so it never passes through free. A resent call finds its own first send's result.
//!
//! Semaphores: their own keys (`ps:`, `pf:`, `pq:`, `ph:`), holders token → expiry on the
//! server's clock, expired ones dropped by the next script; the same FIFO queue and wake-up, a
//! head granted with permits still free waking the next head.
//!
//! Every operation is one script call on the uncontended path, bounded by one deadline.

use crate::bounds::Bounds;
use crate::keys::RedisKeys;
use crate::kind_keys::{PermitKeys, SharedKeys};
use crate::node::{millis, Failure, Node, ScriptCall, Via};
use crate::pause;
use crate::scripts::{
    DEMOTE_SCRIPT, INSPECT_KINDS_SCRIPT, PERMIT_ACQUIRE_SCRIPT, PERMIT_INSPECT_SCRIPT,
    PERMIT_SETTLE_SCRIPT, PROMOTE_SCRIPT, SHARED_ACQUIRE_SCRIPT, SHARED_SETTLE_SCRIPT,
};
use crate::topology::Topology;
use crate::wire::Wire;
use leasehold_core::wait::{held_elsewhere, other_size, Turn, Waiter, Wake, Woken};
use leasehold_core::{Deadline, Error, Key, KeyInfo, LeaseKind, RawLease, Result, Token, Ttl};
use redis::{RedisResult, Script};
use std::time::{Duration, Instant};

/// The lock's native FIFO wait (see `single.rs`), for a share or a permit: the `BLPOP` runs on the
/// node serving the key, where the release that wakes it runs. Shared locks and semaphores keep
/// the wake-and-race handoff: their waiters take no grant.
pub(crate) struct KindWaiter<'a> {
    single: Single<'a>,
    key: &'a Key,
    kind: LeaseKind,
    token: Token,
    base: RedisKeys,
    signal: Vec<u8>,
    ttl: Ttl,
    /// The whole call's bound, from the wait's end.
    bound: Deadline,
}

impl Waiter for KindWaiter<'_> {
    fn attempt(&mut self, last: bool, _block_until: Instant) -> Result<Turn> {
        let single = &self.single;
        let bound = self.bound;
        let sent = Instant::now();
        let mode = if last {
            ("last", 1)
        } else {
            ("wait", millis(single.heartbeat.saturating_mul(3)))
        };
        let calls = bound.min(single.bounds.write());
        let (key, kind, ttl) = (self.key, self.kind, self.ttl);
        Ok(
            match single.attempt(key, kind, &self.token, ttl, mode, calls)? {
                Step::Granted(fence) => Turn::Granted(
                    RawLease::new(key.clone(), self.token, fence, ttl, sent).with_kind(kind),
                ),
                Step::Held(left) => Turn::NotYet { holder_left: left },
                Step::Reserved => Turn::NotYet { holder_left: None },
            },
        )
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        let Some((block, precise)) = pause::block_for(wake) else {
            return Ok(Woken::Quiet);
        };
        let bound = self.bound;
        let woken = self.single.topology.run(&self.base, bound, |node, _via| {
            node.wait_signal_routed(&self.signal, block, precise, bound)
        })?;
        Ok(if woken { Woken::Attempt } else { Woken::Quiet })
    }

    fn heartbeat(&self) -> Option<Duration> {
        Some(self.single.heartbeat)
    }
}

/// Which acquire script to run, for which lease.
struct Acquire<'a> {
    script: &'static Script,
    kind: LeaseKind,
    key: &'a Key,
    /// A semaphore's size (its script's last argument).
    permits: Option<u32>,
}

/// One acquire script's outcome.
enum Step {
    Granted(u64),
    /// Held, with this much left until the holder (or the first permit) expires.
    Held(Option<Duration>),
    /// Free, but the queue's head goes first.
    Reserved,
}

/// What these operations need of `RedisBackend`. Every call goes through the topology, so on a
/// Cluster it reaches the master of the lease's slot (a lock's and a semaphore's keys each share
/// one slot: `kind_keys.rs`), and on Sentinel the master of the moment, following `MOVED`, `ASK`
/// and failovers like the exclusive calls.
pub(crate) struct Single<'a> {
    pub(crate) topology: &'a Topology,
    pub(crate) bounds: Bounds,
    pub(crate) prefix: &'a str,
    pub(crate) signal_ttl: Duration,
    pub(crate) heartbeat: Duration,
}

/// An acquire script's mode (`try`, `wait` or `last`) and waiter TTL in ms. Shared locks and
/// semaphores keep the wake-and-race handoff: their waiters take no grant, so unlike
/// [`crate::node::Mode::Wait`] this has no grant time.
type ModeArgs = (&'static str, u64);

fn step(name: &str, taken: i64, value: i64) -> Result<Step> {
    if taken == 1 {
        return u64::try_from(value)
            .ok()
            .filter(|f| *f >= 1)
            .map(Step::Granted)
            .ok_or_else(|| Error::Internal(format!("redis {name}: fence counter gave {value}")));
    }
    Ok(match value {
        -3 => Step::Reserved,
        -1 => Step::Held(None),
        ms => Step::Held(Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))),
    })
}

/// The first reply of a permit acquire script refused for another size than the semaphore's live
/// holders were granted under; the second is that size.
pub(crate) const SIZE_REFUSED: i64 = -4;

pub(crate) fn lost(key: &Key, kind: LeaseKind) -> Error {
    Error::Lost(format!(
        "key \"{key}\" no longer holds this {} lease's token (it expired, or was force-released)",
        kind.name()
    ))
}

/// `ASKING` first when a Cluster slot is being migrated (the `ASK` target serves this one call
/// only after it). Should the script need loading there, the load uses up the flag and the
/// script's second send is answered `ASK` again, which the topology follows once more: by then
/// the script is loaded.
fn asking(c: &mut Wire, via: Via) -> RedisResult<()> {
    if via.asking {
        redis::cmd("ASKING").query::<()>(c)?;
    }
    Ok(())
}

impl<'a> Single<'a> {
    /// A lock's keys, drawing fences from the high-water of the node serving them (its slot's
    /// on a Cluster, see `keys.rs`).
    fn shared_keys(&self, key: &Key) -> SharedKeys {
        let mut k = SharedKeys::new(self.prefix, key);
        if matches!(self.topology, Topology::Cluster(_)) {
            k.base = k.base.in_cluster(self.prefix);
        }
        k
    }

    /// A semaphore's keys, placed as [`Single::shared_keys`] places a lock's.
    fn permit_keys(&self, key: &Key) -> PermitKeys {
        let mut k = PermitKeys::new(self.prefix, key);
        if matches!(self.topology, Topology::Cluster(_)) {
            k.base = k.base.in_cluster(self.prefix);
        }
        k
    }

    /// The settle script of a share or a permit (see `scripts.rs`): a release (`ms` 0) or an
    /// extend to `ms`, with the keys whose node serves it.
    fn settle_call(
        &self,
        kind: LeaseKind,
        key: &Key,
        token: &Token,
        ms: u64,
    ) -> Result<(RedisKeys, ScriptCall<'static>)> {
        let signal_ttl = millis(self.signal_ttl);
        let (base, call) = match kind {
            LeaseKind::Shared => {
                let k = self.shared_keys(key);
                let b = &k.base;
                let call = ScriptCall::new(&SHARED_SETTLE_SCRIPT).keys([
                    &b.lock,
                    &b.queue,
                    &b.heartbeats,
                    &k.shares,
                    &k.share_fences,
                    &b.fence,
                    &b.high_water,
                ]);
                (k.base, call)
            }
            LeaseKind::Permit(_) => {
                let k = self.permit_keys(key);
                let call = ScriptCall::new(&PERMIT_SETTLE_SCRIPT).keys([
                    &k.holders,
                    &k.queue,
                    &k.heartbeats,
                    &k.size,
                    &k.fence,
                    &k.base.high_water,
                ]);
                (k.base, call)
            }
            other => {
                return Err(Error::Internal(format!(
                    "redis: {} leases go through the lock path",
                    other.name()
                )))
            }
        };
        let call = call
            .arg(token.as_str())
            .arg(ms)
            .arg(&base.signal_prefix)
            .arg(&base.signal_suffix)
            .arg(signal_ttl);
        Ok((base, call))
    }

    /// Gives a share or a permit back on `node` (a write its replicas did not acknowledge).
    /// `Ok(true)`: deleted; `Ok(false)`: the token no longer held it.
    fn give_back_on(
        &self,
        node: &Node,
        via: Via,
        kind: LeaseKind,
        key: &Key,
        token: &Token,
        deadline: Deadline,
    ) -> Result<bool> {
        let (_, call) = self.settle_call(kind, key, token, 0)?;
        let done: i64 = node
            .call_routed("release", deadline, |c| {
                call.send(c, via, None).map(|(done, _)| done)
            })
            .map_err(Failure::into_error)?;
        Ok(done == 1)
    }

    /// Runs `f` on a connection to the node serving `keys` (see the struct's docs); `f` gets that
    /// node too (its name and fence retention).
    fn call<T>(
        &self,
        keys: &RedisKeys,
        what: &str,
        deadline: Deadline,
        mut f: impl FnMut(&Node, &mut Wire) -> RedisResult<T>,
    ) -> Result<T> {
        self.topology.run(keys, deadline, |node, via| {
            node.call_routed(what, deadline, |c| {
                asking(c, via)?;
                f(node, c)
            })
        })
    }

    /// One acquire script run for a shared lease or a permit.
    fn attempt(
        &self,
        key: &Key,
        kind: LeaseKind,
        token: &Token,
        ttl: Ttl,
        mode: ModeArgs,
        deadline: Deadline,
    ) -> Result<Step> {
        match kind {
            LeaseKind::Shared => {
                let k = self.shared_keys(key);
                let b = &k.base;
                let keys = [
                    &b.lock,
                    &b.fence,
                    &b.queue,
                    &b.heartbeats,
                    &k.shares,
                    &k.share_fences,
                    &b.high_water,
                ];
                let script = &SHARED_ACQUIRE_SCRIPT;
                let acquire = Acquire {
                    script,
                    kind,
                    key,
                    permits: None,
                };
                self.run_acquire(&acquire, b, &keys, token, ttl, mode, deadline)
            }
            LeaseKind::Permit(permits) => {
                let k = self.permit_keys(key);
                let keys = [
                    &k.holders,
                    &k.fence,
                    &k.queue,
                    &k.heartbeats,
                    &k.size,
                    &k.base.high_water,
                ];
                let acquire = Acquire {
                    script: &PERMIT_ACQUIRE_SCRIPT,
                    kind,
                    key,
                    permits: Some(permits.get()),
                };
                self.run_acquire(&acquire, &k.base, &keys, token, ttl, mode, deadline)
            }
            other => Err(Error::Internal(format!(
                "redis: {} leases go through the lock path",
                other.name()
            ))),
        }
    }

    /// Runs `SHARED_ACQUIRE` or `PERMIT_ACQUIRE` with `keys` on the node serving `base`: both
    /// scripts take the same arguments after their keys (a semaphore's `permits` last), so these
    /// are written once, in the scripts' order. With `replicas=N`, a `WAIT` follows in the same
    /// round trip, and a grant fewer replicas acknowledged is given back and `Unavailable`, as for
    /// an exclusive lock.
    #[allow(clippy::too_many_arguments)]
    fn run_acquire(
        &self,
        acquire: &Acquire<'_>,
        base: &RedisKeys,
        keys: &[&Vec<u8>],
        token: &Token,
        ttl: Ttl,
        (mode, waiter_ttl): ModeArgs,
        deadline: Deadline,
    ) -> Result<Step> {
        let signal_ttl = millis(self.signal_ttl);
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        self.topology.run(base, deadline, |node, via| {
            let mut call = ScriptCall::new(acquire.script)
                .key_list(&keys)
                .arg(token.as_str())
                .arg(ttl.as_millis())
                .arg(mode)
                .arg(waiter_ttl)
                .arg(&base.signal_prefix)
                .arg(&base.signal_suffix)
                .arg(signal_ttl)
                .arg(millis(node.fence_retention()));
            if let Some(permits) = acquire.permits {
                call = call.arg(u64::from(permits));
            }
            let ((taken, value), acked): ((i64, i64), _) =
                node.confirmed("acquire", deadline, via, &call)?;
            if taken == SIZE_REFUSED {
                // Held under another size: refused (and not queued).
                let held = u32::try_from(value).unwrap_or(0);
                let asked = acquire.permits.unwrap_or(0);
                return Err(Failure::from_error(other_size(acquire.key, held, asked)));
            }
            let step = step(node.name(), taken, value).map_err(Failure::from_error)?;
            if let (Step::Granted(_), Some(acked)) = (&step, node.short_of_replicas(acked)) {
                let given_back =
                    self.give_back_on(node, via, acquire.kind, acquire.key, token, deadline);
                return Err(Failure::from_error(Error::Unavailable(node.unconfirmed(
                    "acquire",
                    acked,
                    &given_back,
                ))));
            }
            Ok(step)
        })
    }

    pub(crate) fn try_acquire_as(&self, key: &Key, kind: LeaseKind, ttl: Ttl) -> Result<RawLease> {
        let token = Token::generate()?;
        let sent = Instant::now();
        let mode = ("try", millis(self.heartbeat));
        match self.attempt(key, kind, &token, ttl, mode, self.bounds.write())? {
            Step::Granted(fence) => {
                Ok(RawLease::new(key.clone(), token, fence, ttl, sent).with_kind(kind))
            }
            _ => Err(held_elsewhere(key)),
        }
    }

    /// The waiter of a share or a permit (see [`KindWaiter`]).
    pub(crate) fn waiter(
        self,
        key: &'a Key,
        kind: LeaseKind,
        ttl: Ttl,
        end: Instant,
    ) -> Result<KindWaiter<'a>> {
        let token = Token::generate()?;
        let bound = self.bounds.acquire_until(end);
        // The lock's and the semaphore's keys each share the slot of this base (`kind_keys.rs`).
        let base = RedisKeys::new(self.prefix, key);
        Ok(KindWaiter {
            signal: base.signal(&token),
            base,
            single: self,
            key,
            kind,
            token,
            ttl,
            bound,
        })
    }

    /// Release (`ttl` None) or extend a share or a permit. `false`: not held by the token. With
    /// `replicas=N`, an extend fewer replicas acknowledged is given back and `Lost` (see
    /// `Node::check_acked`).
    fn settle(&self, lease: &RawLease, ttl: Option<Ttl>) -> Result<bool> {
        let token = lease.token();
        let ms = ttl.map_or(0, |t| t.as_millis());
        let (base, call) = self.settle_call(lease.kind(), lease.key(), &token, ms)?;
        let Some(_) = ttl else {
            let deadline = self.bounds.call();
            let done: i64 = self.topology.run_standing(
                &base,
                deadline,
                |node, via| {
                    node.call_routed("release", deadline, |c| {
                        call.send(c, via, None).map(|(done, _)| done)
                    })
                },
                |done| *done == 1,
            )?;
            return Ok(done == 1);
        };
        let deadline = self.bounds.write();
        let extend = |node: &Node, via: Via| {
            let (done, acked): (i64, _) = node.confirmed("extend", deadline, via, &call)?;
            if done != 1 {
                return Ok(false);
            }
            let Some(acked) = node.short_of_replicas(acked) else {
                return Ok(true);
            };
            let (kind, key) = (lease.kind(), lease.key());
            let given_back = self.give_back_on(node, via, kind, key, &token, deadline);
            Err(Failure::from_error(Error::Lost(node.unconfirmed(
                "extend",
                acked,
                &given_back,
            ))))
        };
        self.topology
            .run_standing(&base, deadline, extend, |done| *done)
    }

    pub(crate) fn release(&self, lease: &mut RawLease) -> Result<()> {
        if self.settle(lease, None)? {
            Ok(())
        } else {
            Err(lost(lease.key(), lease.kind()))
        }
    }

    pub(crate) fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let sent = Instant::now();
        if self.settle(lease, Some(ttl))? {
            lease.renewed(ttl, sent);
            Ok(())
        } else {
            Err(lost(lease.key(), lease.kind()))
        }
    }

    /// One promote attempt (see `PROMOTE` in `scripts.rs`): the check for other live shares, the
    /// switch to the exclusive lock and the new fence are one script, so no reader can join
    /// between them. With `replicas=N`, a promote fewer replicas acknowledged is given back (the
    /// exclusive key released) and `Lost`, as an extend is: the lease no longer stands.
    pub(crate) fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let k = self.shared_keys(lease.key());
        let b = &k.base;
        let token = lease.token();
        let signal_ttl = millis(self.signal_ttl);
        let deadline = self.bounds.write();
        let sent = Instant::now();
        let promote = |node: &Node, via: Via| {
            let call = ScriptCall::new(&PROMOTE_SCRIPT)
                .keys([
                    &b.lock,
                    &b.fence,
                    &k.shares,
                    &k.share_fences,
                    &b.queue,
                    &b.heartbeats,
                    &b.high_water,
                ])
                .arg(token.as_str())
                .arg(ttl.as_millis())
                .arg(millis(node.fence_retention()))
                .arg(&b.signal_prefix)
                .arg(&b.signal_suffix)
                .arg(signal_ttl);
            let (reply, acked): ((i64, i64), _) =
                node.confirmed("promote", deadline, via, &call)?;
            if reply.0 == 1 {
                if let Some(acked) = node.short_of_replicas(acked) {
                    let given_back = node
                        .release_via(b, &token, self.signal_ttl, deadline, via)
                        .map_err(Failure::into_error);
                    return Err(Failure::from_error(Error::Lost(node.unconfirmed(
                        "promote",
                        acked,
                        &given_back,
                    ))));
                }
            }
            Ok(reply)
        };
        // 0: another share is live; 1: promoted; anything else: our share is gone.
        let (taken, value): (i64, i64) =
            self.topology
                .run_standing(b, deadline, promote, |(taken, _)| matches!(taken, 0 | 1))?;
        match taken {
            1 => {
                let fence = u64::try_from(value)
                    .ok()
                    .filter(|f| *f >= 1)
                    .ok_or_else(|| {
                        Error::Internal(format!("redis promote: fence counter gave {value}"))
                    })?;
                lease.set_kind(LeaseKind::Exclusive);
                lease.set_fence(fence);
                lease.renewed(ttl, sent);
                Ok(())
            }
            0 => Err(held_elsewhere(lease.key())),
            _ => Err(lost(lease.key(), LeaseKind::Shared)),
        }
    }

    /// Demotes the exclusive lease to a share with the same token and fence, in one script (see
    /// `DEMOTE` in `scripts.rs`), so the key is never free in between. With `replicas=N`, a demote
    /// fewer replicas acknowledged is given back (the share released) and `Lost`, as an extend
    /// is.
    pub(crate) fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let k = SharedKeys::new(self.prefix, lease.key());
        let b = &k.base;
        let token = lease.token();
        let signal_ttl = millis(self.signal_ttl);
        let deadline = self.bounds.write();
        let sent = Instant::now();
        let call = ScriptCall::new(&DEMOTE_SCRIPT)
            .keys([&b.lock, &b.queue, &b.heartbeats, &k.shares, &k.share_fences])
            .arg(token.as_str())
            .arg(ttl.as_millis())
            .arg(lease.fence())
            .arg(&b.signal_prefix)
            .arg(&b.signal_suffix)
            .arg(signal_ttl);
        let key = lease.key();
        let demote = |node: &Node, via: Via| {
            let (done, acked): (i64, _) = node.confirmed("demote", deadline, via, &call)?;
            if done != 1 {
                return Ok(false);
            }
            let Some(acked) = node.short_of_replicas(acked) else {
                return Ok(true);
            };
            let given_back = self.give_back_on(node, via, LeaseKind::Shared, key, &token, deadline);
            Err(Failure::from_error(Error::Lost(node.unconfirmed(
                "demote",
                acked,
                &given_back,
            ))))
        };
        let done: bool = self
            .topology
            .run_standing(b, deadline, demote, |done| *done)?;
        if !done {
            return Err(lost(lease.key(), LeaseKind::Exclusive));
        }
        lease.set_kind(LeaseKind::Shared);
        lease.renewed(ttl, sent);
        Ok(())
    }

    pub(crate) fn restore(&self, key: &Key, token: Token) -> Result<RawLease> {
        let k = self.shared_keys(key);
        let sent = Instant::now();
        let deadline = self.bounds.call();
        let reply = self.topology.run_standing(
            &k.base,
            deadline,
            |node, via| {
                node.call_routed("restore", deadline, |c| {
                    asking(c, via)?;
                    k.restore(&token, millis(node.fence_retention())).invoke(c)
                })
            },
            // 0: the token holds nothing there.
            |(how, _, _): &(i64, i64, i64)| *how != 0,
        )?;
        restored(key, token, reply, sent)
    }

    pub(crate) fn force_release(&self, key: &Key) -> Result<bool> {
        let k = SharedKeys::new(self.prefix, key);
        let signal_ttl = millis(self.signal_ttl);
        let held: i64 = self.call(&k.base, "force_release", self.bounds.call(), |_, c| {
            k.force_release(signal_ttl).invoke(c)
        })?;
        Ok(held == 1)
    }

    /// A lock's holders (exclusive or shared) or a semaphore's, on the node serving the key.
    pub(crate) fn inspect_as(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo> {
        let deadline = self.bounds.call();
        let base = RedisKeys::new(self.prefix, key);
        self.topology.run(&base, deadline, |node, via| {
            inspect_routed(node, via, self.prefix, key, kind, deadline)
        })
    }
}

/// A restore script's reply `(how, fence, ms left)` as a lease: `how` 1 exclusive, 2 shared, 0 not
/// held.
pub(crate) fn restored(
    key: &Key,
    token: Token,
    (how, fence, left): (i64, i64, i64),
    sent: Instant,
) -> Result<RawLease> {
    let kind = match how {
        1 => LeaseKind::Exclusive,
        2 => LeaseKind::Shared,
        _ => {
            return Err(Error::Lost(format!(
                "key \"{key}\" is not held by that token (it expired, was released, or never was)"
            )))
        }
    };
    let fence = u64::try_from(fence)
        .ok()
        .filter(|f| *f >= 1)
        .ok_or_else(|| Error::Internal(format!("redis: restore read fence {fence}")))?;
    let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
    Ok(RawLease::restored(key.clone(), token, fence, left, sent).with_kind(kind))
}

/// One node's view of a lock (with its holders) or a semaphore (Redlock asks each node).
pub(crate) fn inspect_on(
    node: &Node,
    prefix: &str,
    key: &Key,
    kind: LeaseKind,
    deadline: Deadline,
) -> Result<KeyInfo> {
    inspect_routed(node, Via::default(), prefix, key, kind, deadline).map_err(Failure::into_error)
}

/// [`inspect_on`], keeping what routing needs to know about a failure.
fn inspect_routed(
    node: &Node,
    via: Via,
    prefix: &str,
    key: &Key,
    kind: LeaseKind,
    deadline: Deadline,
) -> std::result::Result<KeyInfo, Failure> {
    let to_ms = |v: i64| u64::try_from(v).ok().map(Duration::from_millis);
    if let LeaseKind::Permit(_) = kind {
        let k = PermitKeys::new(prefix, key);
        let (n, left, fence): (i64, i64, i64) = node.call_routed("inspect", deadline, |c| {
            asking(c, via)?;
            PERMIT_INSPECT_SCRIPT
                .key(&k.holders)
                .key(&k.fence)
                .invoke(c)
        })?;
        let holders = u32::try_from(n).unwrap_or(0);
        return Ok(
            KeyInfo::new(holders > 0, to_ms(left), u64::try_from(fence).ok())
                .with_holders(holders, false),
        );
    }
    let k = SharedKeys::new(prefix, key);
    let (pttl, fence, _waiters, n, shared): (i64, i64, i64, i64, i64) =
        node.call_routed("inspect", deadline, |c| {
            asking(c, via)?;
            INSPECT_KINDS_SCRIPT
                .key(&k.base.lock)
                .key(&k.base.fence)
                .key(&k.base.queue)
                .key(&k.shares)
                .invoke(c)
        })?;
    let held = pttl >= 0 || pttl == -1;
    Ok(KeyInfo::new(held, to_ms(pttl), u64::try_from(fence).ok())
        .with_holders(u32::try_from(n).unwrap_or(0), shared == 1))
}
