//! Refusing a server that may evict lock keys. Under a memory limit (`maxmemory` > 0) every policy
//! but `noeviction` drops keys when memory runs short — the `volatile-*` ones exactly the keys with
//! an expiry, which every lock key has — and an evicted lock key is free for a second holder while
//! the first still counts on its lease. So each node is screened once, from `INFO memory` (which
//! managed services that rename or forbid `CONFIG` still answer), before it serves a lease, and
//! refused unless the URL says `allow_eviction=true`.
//!
//! The verdict is kept per node and per pool generation: a server found gone (restarted, perhaps
//! with another configuration) is screened again on the next connection, and no other call pays a
//! round trip for it. A server that does not say (`INFO` denied by an ACL) is used: `leasehold
//! doctor` reports it. A node once refused stays refused for the life of the client.

use leasehold_core::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// One node's screening.
#[derive(Debug, Default)]
pub(crate) struct Screen {
    /// `allow_eviction=true`: nothing is read, everything is accepted.
    allow: bool,
    /// 1 + the pool generation the last verdict was reached in; 0: never screened.
    screened: AtomicU64,
    refused: AtomicBool,
    /// The refusal, once refused.
    reason: Mutex<Option<Error>>,
}

impl Screen {
    pub(crate) fn new(allow: bool) -> Screen {
        Screen {
            allow,
            ..Screen::default()
        }
    }

    /// Whether a connection made in `generation` still needs the server's `INFO memory`.
    pub(crate) fn needed(&self, generation: u64) -> bool {
        !self.allow
            && !self.refused.load(Ordering::Acquire)
            && self.screened.load(Ordering::Acquire) != generation.saturating_add(1)
    }

    /// The refusal, if this node was refused.
    pub(crate) fn refusal(&self) -> Option<Error> {
        if !self.refused.load(Ordering::Acquire) {
            return None;
        }
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records what `INFO memory` said (`None`: it could not be read) on a connection of
    /// `generation`; the refusal if the server evicts.
    pub(crate) fn record(&self, node: &str, generation: u64, info: Option<&str>) -> Option<Error> {
        if let Some(reason) = info.and_then(|info| evicting(node, info)) {
            *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.clone());
            self.refused.store(true, Ordering::Release);
            return Some(reason);
        }
        self.screened
            .fetch_max(generation.saturating_add(1), Ordering::AcqRel);
        None
    }
}

/// The refusal of a server whose `INFO memory` shows an evicting policy under a memory limit.
fn evicting(node: &str, info: &str) -> Option<Error> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let limit: u64 = field("maxmemory")?.parse().ok()?;
    let policy = field("maxmemory_policy")?;
    if limit == 0 || policy == "noeviction" {
        return None;
    }
    Some(Error::refused_deployment(format!(
        "redis {node}: maxmemory-policy is {policy} under maxmemory {limit} (INFO memory): the \
         server evicts keys when memory runs short, lock keys among them, and an evicted lock key \
         lets a second holder in beside the first; set maxmemory-policy noeviction (or maxmemory \
         0), or accept that risk with allow_eviction=true in the URL"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(limit: u64, policy: &str) -> String {
        format!("# Memory\r\nused_memory:1000\r\nmaxmemory:{limit}\r\nmaxmemory_human:1M\r\nmaxmemory_policy:{policy}\r\n")
    }

    #[test]
    fn only_an_evicting_policy_under_a_limit_is_refused() {
        let refused = evicting("h:1", &info(1 << 20, "volatile-lru")).unwrap();
        assert!(refused.is_refused_deployment());
        let text = refused.to_string();
        assert!(text.contains("maxmemory-policy is volatile-lru"), "{text}");
        assert!(text.contains("allow_eviction=true"), "{text}");
        assert!(evicting("h:1", &info(1 << 20, "allkeys-random")).is_some());
        assert!(evicting("h:1", &info(1 << 20, "noeviction")).is_none());
        assert!(evicting("h:1", &info(0, "volatile-lru")).is_none());
        // A server that does not say is not refused.
        assert!(evicting("h:1", "# Memory\r\nused_memory:1\r\n").is_none());
    }

    #[test]
    fn verdicts_are_kept_per_generation_and_a_refusal_sticks() {
        let screen = Screen::new(false);
        assert!(screen.needed(0));
        assert!(screen
            .record("h:1", 0, Some(&info(0, "allkeys-lru")))
            .is_none());
        assert!(!screen.needed(0));
        assert!(screen.needed(1), "a restarted server is screened again");
        assert!(screen.record("h:1", 1, None).is_none(), "unreadable: used");
        assert!(!screen.needed(1));
        assert!(screen
            .record("h:1", 2, Some(&info(10, "volatile-ttl")))
            .is_some());
        assert!(screen.refusal().is_some());
        assert!(!screen.needed(3), "refused: nothing more is read");
        let allowed = Screen::new(true);
        assert!(!allowed.needed(0));
    }
}
