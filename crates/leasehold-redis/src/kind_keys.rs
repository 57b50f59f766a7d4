//! Where shared locks and semaphores live in Redis, beside a lock's own keys (`keys.rs`). Every name
//! is built by [`namespaced`], so whatever layout `keys.rs` gives a key (today its base with the
//! Cluster hash tag, then the tag, then the key; written `{prefix}tag:{key}` below) these follow,
//! and every key of one lock or semaphore lands in one slot. The tags are prefix-free with the lock's (`l:`, `f:`, `q:`, `h:`, `s:`, `rq:`,
//! `rh:`), so no user key can name another key's data:
//! - `{prefix}rs:{key}`: the shared holders of the lock `key`, a sorted set of token → expiry in
//!   ms on the server's clock; `{prefix}rf:{key}`: a hash of each shared holder's fence (for
//!   restore). While shares exist the lock key `{prefix}l:{key}` holds `#shared` (never a token:
//!   tokens are 32 hex digits) and expires with the last share, so the exclusive scripts, unchanged, see a held key;
//! - `{prefix}ps:{key}`: the semaphore `key`'s holders, token → expiry ms on the server's clock;
//!   `{prefix}pf:{key}` its last fence (expiring with the holders; fences are drawn from the
//!   server's high-water, see the crate docs), `{prefix}pq:{key}` and `{prefix}ph:{key}` its waiters'
//!   queue and heartbeats (single node); on Redlock nodes `{prefix}pn:{key}` (slot → token) and
//!   `{prefix}pt:{key}` (token → slot) number the permits (see `redlock/kinds.rs`), and
//!   `{prefix}px:{key}` sorts the taken slots, to find the lowest free one by rank;
//!   `{prefix}pz:{key}` keeps the size (`permits`) the live holders were granted under, set with
//!   each grant and expiring with the holders' key, so that another size is refused while they
//!   live.

use crate::keys::{namespaced, RedisKeys};
use crate::scripts::{FORCE_RELEASE_SCRIPT, RESTORE_SCRIPT, SHARED_SETTLE_SCRIPT};
use leasehold_core::{Key, Token};
use redis::ScriptInvocation;

/// A lock's keys plus its shared holders.
#[derive(Debug, Clone)]
pub(crate) struct SharedKeys {
    pub(crate) base: RedisKeys,
    pub(crate) shares: Vec<u8>,
    pub(crate) share_fences: Vec<u8>,
}

impl SharedKeys {
    pub(crate) fn new(prefix: &str, key: &Key) -> SharedKeys {
        SharedKeys {
            base: RedisKeys::new(prefix, key),
            shares: namespaced(prefix, b"rs:", key),
            share_fences: namespaced(prefix, b"rf:", key),
        }
    }

    // The scripts that single nodes and Redlock nodes run alike on these keys, each called in one
    // place so the KEYS and ARGV order matches its script in `scripts.rs`.

    /// Release (`ms` = 0) or extend a share; the wake-up list of the queue's head gets its
    /// signal for `signal_ttl_ms`.
    pub(crate) fn settle(
        &self,
        token: &Token,
        ms: u64,
        signal_ttl_ms: u64,
    ) -> ScriptInvocation<'static> {
        let mut call = SHARED_SETTLE_SCRIPT.prepare_invoke();
        call.key(&self.base.lock)
            .key(&self.base.queue)
            .key(&self.base.heartbeats)
            .key(&self.shares)
            .key(&self.share_fences)
            .arg(token.as_str())
            .arg(ms)
            .arg(&self.base.signal_prefix)
            .arg(&self.base.signal_suffix)
            .arg(signal_ttl_ms);
        call
    }

    /// Whether `token` holds the lock or a share, with its fence and the time left.
    pub(crate) fn restore(&self, token: &Token, retention_ms: u64) -> ScriptInvocation<'static> {
        let mut call = RESTORE_SCRIPT.prepare_invoke();
        call.key(&self.base.lock)
            .key(&self.base.fence)
            .key(&self.shares)
            .key(&self.share_fences)
            .key(&self.base.high_water)
            .arg(token.as_str())
            .arg(retention_ms);
        call
    }

    /// Deletes the lock and its shares, waking the queue's head (signal kept `signal_ttl_ms`).
    pub(crate) fn force_release(&self, signal_ttl_ms: u64) -> ScriptInvocation<'static> {
        let mut call = FORCE_RELEASE_SCRIPT.prepare_invoke();
        call.key(&self.base.lock)
            .key(&self.base.queue)
            .key(&self.base.heartbeats)
            .key(&self.shares)
            .key(&self.share_fences)
            .arg(&self.base.signal_prefix)
            .arg(&self.base.signal_suffix)
            .arg(signal_ttl_ms);
        call
    }
}

/// A semaphore's keys. Wake-up lists are the lock's (`{prefix}s:{token}:{key}`): a waiter's
/// token is its own, so the names never meet.
#[derive(Debug, Clone)]
pub(crate) struct PermitKeys {
    pub(crate) holders: Vec<u8>,
    pub(crate) fence: Vec<u8>,
    pub(crate) queue: Vec<u8>,
    pub(crate) heartbeats: Vec<u8>,
    /// The size (`permits`) the live holders were granted under; expires with the holders.
    pub(crate) size: Vec<u8>,
    pub(crate) slots: Vec<u8>,
    pub(crate) slot_of: Vec<u8>,
    /// Redlock: the taken slots, sorted, to find the lowest free one by rank.
    pub(crate) taken: Vec<u8>,
    /// For the wake-up lists' names.
    pub(crate) base: RedisKeys,
}

impl PermitKeys {
    pub(crate) fn new(prefix: &str, key: &Key) -> PermitKeys {
        let make = |tag: &[u8]| namespaced(prefix, tag, key);
        PermitKeys {
            holders: make(b"ps:"),
            fence: make(b"pf:"),
            queue: make(b"pq:"),
            heartbeats: make(b"ph:"),
            size: make(b"pz:"),
            slots: make(b"pn:"),
            slot_of: make(b"pt:"),
            taken: make(b"px:"),
            base: RedisKeys::new(prefix, key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_their_own_namespaces() {
        let k = Key::new(b"x").unwrap();
        let s = SharedKeys::new("p:", &k);
        let p = PermitKeys::new("p:", &k);
        let all = [
            s.base.lock.clone(),
            s.base.fence.clone(),
            s.base.queue.clone(),
            s.base.heartbeats.clone(),
            s.shares,
            s.share_fences,
            p.holders,
            p.fence,
            p.queue,
            p.heartbeats,
            p.size,
            p.slots,
            p.slot_of,
            p.taken,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Under the lease's own base (one Cluster slot for all of them), in their own tags.
        let base = crate::keys::base("p:", &k);
        for name in &all {
            assert!(name.starts_with(&base));
        }
        assert!(all[4].ends_with(b"}rs:x"));
        assert!(all[6].ends_with(b"}ps:x"));
    }
}
