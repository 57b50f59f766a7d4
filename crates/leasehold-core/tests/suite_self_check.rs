//! Runs the conformance suite against a tiny in-process backend, so a mistake in the suite itself shows
//! up here, next to the suite, rather than as a mysterious failure in every real backend.

use leasehold_core::{
    conformance, wait, Client, Error, Key, KeyInfo, LeaseKind, LockBackend, RawLease, Request,
    Result, Token, Ttl,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One key's state: holders by token (with their kind and expiry), the last fence, and how many
/// exclusive requests wait (new shared requests give way to them).
#[derive(Debug, Default)]
struct Record {
    holders: HashMap<Token, (LeaseKind, Instant)>,
    fence: u64,
    writers_waiting: usize,
}

impl Record {
    fn sweep(&mut self, now: Instant) {
        self.holders.retain(|_, (_, exp)| *exp > now);
    }

    fn admits(&self, kind: LeaseKind) -> bool {
        match kind {
            LeaseKind::Exclusive => self.holders.is_empty(),
            LeaseKind::Shared => {
                self.writers_waiting == 0
                    && self.holders.values().all(|(k, _)| *k == LeaseKind::Shared)
            }
            LeaseKind::Permit(p) => self.holders.len() < p.get() as usize,
            _ => false,
        }
    }
}

#[derive(Debug, Default)]
struct Memory {
    keys: Mutex<HashMap<(bool, Vec<u8>), Record>>,
}

/// Semaphores live in a namespace of their own.
fn slot(key: &Key, kind: LeaseKind) -> (bool, Vec<u8>) {
    (
        matches!(kind, LeaseKind::Permit(_)),
        key.as_bytes().to_vec(),
    )
}

impl Memory {
    fn with<T>(&self, key: &Key, kind: LeaseKind, f: impl FnOnce(&mut Record, Instant) -> T) -> T {
        let now = Instant::now();
        let mut keys = self.keys.lock().unwrap();
        let record = keys.entry(slot(key, kind)).or_default();
        record.sweep(now);
        f(record, now)
    }
}

/// A waiter of the memory backend: a polling one that marks a waiting writer while it lives.
struct WaitingWriter<'a> {
    polling: wait::Polling<'a, Memory>,
    memory: &'a Memory,
    key: &'a Key,
    writer: bool,
}

impl wait::Waiter for WaitingWriter<'_> {
    fn attempt(&mut self, last: bool, block_until: std::time::Instant) -> Result<wait::Turn> {
        self.polling.attempt(last, block_until)
    }

    fn block(&mut self, wake: wait::Wake) -> Result<wait::Woken> {
        self.polling.block(wake)
    }
}

impl Drop for WaitingWriter<'_> {
    fn drop(&mut self) {
        if self.writer {
            self.memory.with(self.key, LeaseKind::Exclusive, |r, _| {
                r.writers_waiting -= 1
            });
        }
    }
}

impl LockBackend for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        let (key, kind, ttl) = (request.key(), request.kind(), request.ttl());
        let token = Token::generate()?;
        self.with(key, kind, |r, now| {
            // Every holder of a semaphore asks for the same size.
            if let LeaseKind::Permit(p) = kind {
                let held = r.holders.values().find_map(|(k, _)| match k {
                    LeaseKind::Permit(h) if *h != p => Some(h.get()),
                    _ => None,
                });
                if let Some(held) = held {
                    return Err(wait::other_size(key, held, p.get()));
                }
            }
            if !r.admits(kind) {
                return Err(wait::held_elsewhere(key));
            }
            r.fence += 1;
            r.holders.insert(token, (kind, now + ttl.as_duration()));
            Ok(RawLease::new(key.clone(), token, r.fence, ttl, now).with_kind(kind))
        })
    }

    fn waiter<'a>(
        &'a self,
        request: &'a Request,
        end: std::time::Instant,
    ) -> Result<Box<dyn wait::Waiter + 'a>> {
        let (key, kind) = (request.key(), request.kind());
        // A waiting writer holds new readers back while it polls.
        let writer = kind == LeaseKind::Exclusive;
        if writer {
            self.with(key, kind, |r, _| r.writers_waiting += 1);
        }
        Ok(Box::new(WaitingWriter {
            polling: wait::Polling::new(self, request, end),
            memory: self,
            key,
            writer,
        }))
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        self.with(lease.key(), lease.kind(), |r, _| {
            match r.holders.remove(&lease.token()) {
                Some(_) => Ok(()),
                None => Err(Error::Lost("not ours".into())),
            }
        })
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let (key, token) = (lease.key().clone(), lease.token());
        let sent = self.with(&key, lease.kind(), |r, now| {
            match r.holders.get_mut(&token) {
                Some((_, exp)) => {
                    *exp = now + ttl.as_duration();
                    Ok(now)
                }
                None => Err(Error::Lost("not ours".into())),
            }
        })?;
        lease.renewed(ttl, sent);
        Ok(())
    }

    fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let (key, token) = (lease.key().clone(), lease.token());
        let (fence, sent) = self.with(&key, LeaseKind::Shared, |r, now| {
            if !r.holders.contains_key(&token) {
                return Err(Error::Lost("not ours".into()));
            }
            if r.holders.len() > 1 {
                return Err(wait::held_elsewhere(&key));
            }
            r.fence += 1;
            r.holders
                .insert(token, (LeaseKind::Exclusive, now + ttl.as_duration()));
            Ok((r.fence, now))
        })?;
        lease.set_kind(LeaseKind::Exclusive);
        lease.set_fence(fence);
        lease.renewed(ttl, sent);
        Ok(())
    }

    fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let (key, token) = (lease.key().clone(), lease.token());
        let sent = self.with(&key, LeaseKind::Exclusive, |r, now| {
            match r.holders.get_mut(&token) {
                Some(holder) => {
                    *holder = (LeaseKind::Shared, now + ttl.as_duration());
                    Ok(now)
                }
                None => Err(Error::Lost("not ours".into())),
            }
        })?;
        lease.set_kind(LeaseKind::Shared);
        lease.renewed(ttl, sent);
        Ok(())
    }

    fn inspect(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo> {
        if let LeaseKind::Permit(_) = kind {
            return Err(leasehold_core::unsupported(self.name(), kind));
        }
        self.with(key, LeaseKind::Exclusive, |r, now| {
            let fence = (r.fence > 0).then_some(r.fence);
            let left = r.holders.values().map(|(_, exp)| *exp - now).max();
            Ok(KeyInfo::new(left.is_some(), left, fence))
        })
    }

    fn restore(&self, key: &Key, token: Token) -> Result<RawLease> {
        self.with(key, LeaseKind::Exclusive, |r, now| {
            match r.holders.get(&token) {
                Some((kind, exp)) => {
                    Ok(
                        RawLease::restored(key.clone(), token, r.fence, *exp - now, now)
                            .with_kind(*kind),
                    )
                }
                None => Err(Error::Lost("not held by that token".into())),
            }
        })
    }

    fn force_release(&self, key: &Key) -> Result<bool> {
        self.with(key, LeaseKind::Exclusive, |r, _| {
            let held = !r.holders.is_empty();
            r.holders.clear();
            Ok(held)
        })
    }
}

#[test]
fn the_suite_passes_on_a_correct_backend() {
    let shared: Arc<dyn LockBackend> = Arc::new(Memory::default());
    let new_client = || Client::from_arc(shared.clone());
    conformance::run(&new_client);
    conformance::run_restore(&new_client);
    conformance::run_force_release(&new_client);
    conformance::run_shared(&new_client);
    conformance::run_semaphore(&new_client);
    conformance::run_semaphore_size(&new_client);
    conformance::run_promote(&new_client);
    conformance::mutual_exclusion(&Client::from_arc(shared.clone()), 8, 200);
    conformance::semaphore_limit(&Client::from_arc(shared.clone()), 3, 8, 100);
}

#[test]
fn keep_alive_loss_is_never_silent() {
    let memory = Arc::new(Memory::default());
    let client = Client::from_arc(memory.clone());
    let lease = client
        .try_acquire("ka-lost", Duration::from_millis(300))
        .unwrap();
    lease.keep_alive(true).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    assert!(lease.is_held());
    // Delete the key underneath, as an operator or a failover would.
    memory.keys.lock().unwrap().clear();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(lease.remaining(), Duration::ZERO);
    assert!(matches!(lease.keep_alive_error(), Some(Error::Lost(_))));
    assert!(matches!(lease.release(), Err(Error::Lost(_))));
    let stats = client.stats();
    assert!(stats.keepalive_renewals >= 1);
    assert_eq!(stats.keepalive_failures, 1);
    assert_eq!(stats.releases_lost, 1);
    assert_eq!(
        stats.expired, 0,
        "deleted underneath is a loss, not an expiry"
    );
}
