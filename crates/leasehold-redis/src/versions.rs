//! What a client of another Leasehold version leaves on a Redis server, for `leasehold doctor`:
//! whether 0.3 clients share this server's keys.
//!
//! 0.3 keeps a fence counter per key, `base ‖ "f:" ‖ key` (a semaphore's `base ‖ "pf:" ‖ key`),
//! written with every acquisition and kept 24 h (its fence retention) after it. This version keeps
//! a key's fence under the same name only with its lease (the lease's expiry, deleted on release)
//! and draws from the server's high-water. So a fence key that outlives its lease (the lock key
//! `l:`, a semaphore's holders `ps:`) is 0.3's — or, for the rest of that lease's TTL, one this
//! version's force-release left. Two marks tell 0.3's counter apart, either enough:
//! - its value is above the high-water: 0.3 drew it since this version's last draw on the server
//!   (this version sets the high-water to every fence it draws, and the high-water never falls
//!   while it lives);
//! - it expires one retention after the time its value reads as: fences drawn from the clock are
//!   the server's µs at that moment, and 0.3 wrote its counter with the retention as its expiry
//!   then, where a lease of this version would have to have lasted that long.
//!
//! What is not seen: a 0.3 client that took no key here in the last 24 h, or whose keys this
//! version took after it (its acquisition replaces the counter, its release deletes it). The work
//! is bounded: at most [`MAX_PAGES`] `SCAN` calls of `COUNT` [`PAGE`] per server, within the call's
//! deadline, and what was not scanned is said. Redlock is not scanned: 0.3 and this version keep
//! the same per-key counters on its nodes and read each other's.

use crate::keys;
use crate::node::Node;
use leasehold_core::Deadline;
use redis::Value;

/// 0.3's fence retention: it always kept its counters this long (only Rust callers could change
/// it, through `with_fence_retention`).
const OLD_RETENTION_MS: i64 = 24 * 3600 * 1000;
/// How far an expiry may be from a draw time plus the retention and still be 0.3's (the draw and
/// the expiry are taken in one script, a millisecond apart at most).
const RETENTION_SLACK_MS: i64 = 5_000;
/// How much longer than its lease a fence key must live to outlive it (this version gives both
/// one expiry in one script).
const OUTLIVES_MS: i64 = 1_000;
/// The `COUNT` of each `SCAN` call.
pub(crate) const PAGE: usize = 1_000;
/// `SCAN` calls per server (on 300,000 keys, 200 calls took 0.2 s and did not cover them all: a
/// `COUNT` is a number of hash table slots, which hold fewer keys than that).
pub(crate) const MAX_PAGES: usize = 200;

/// What the scan of one server found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Fence keys that are 0.3's counters.
    pub(crate) old: u64,
    /// Fence keys looked at.
    pub(crate) fences: u64,
    /// Whether the scan went through the whole keyspace.
    pub(crate) complete: bool,
    /// The server's key count (`DBSIZE`), when it answered.
    pub(crate) keys: Option<u64>,
}

impl Seen {
    pub(crate) fn add(&mut self, other: &Seen) {
        self.old += other.old;
        self.fences += other.fences;
        self.complete &= other.complete;
        self.keys = match (self.keys, other.keys) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
}

/// `SCAN MATCH` text that matches `prefix` literally.
fn glob_literal(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The pattern of every key of a lease under `prefix`: the prefix, then the base's tag.
fn lease_pattern(prefix: &str) -> String {
    format!("{}{{{}}}*", glob_literal(prefix), "[0-9a-f]".repeat(16))
}

/// For a fence key under `prefix` (`f:` or `pf:` after the base), the key its lease lives in.
fn holder_of(prefix: &str, name: &[u8]) -> Option<Vec<u8>> {
    let base = prefix.len() + 18;
    let rest = name.get(base..)?;
    let (tag, holder): (&[u8], &[u8]) = if rest.starts_with(b"f:") {
        (b"f:", b"l:")
    } else if rest.starts_with(b"pf:") {
        (b"pf:", b"ps:")
    } else {
        return None;
    };
    Some([&name[..base], holder, &rest[tag.len()..]].concat())
}

/// One fence key as the server showed it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FenceKey {
    /// Its value (`None`: not a number, or gone meanwhile).
    pub(crate) value: Option<u64>,
    /// Its `PTTL` (negative: no expiry, or gone).
    pub(crate) pttl: i64,
    /// Its lease's key's `PTTL` (negative: no lease).
    pub(crate) holder_pttl: i64,
    /// The high-water it would be drawn against (0: none).
    pub(crate) high_water: u64,
    /// The server's clock, in ms.
    pub(crate) now_ms: i64,
}

/// Whether `k` is a counter 0.3 left (see the module docs).
pub(crate) fn is_old(k: &FenceKey) -> bool {
    let Some(value) = k.value else { return false };
    if k.pttl < 0 || k.pttl <= k.holder_pttl.max(0) + OUTLIVES_MS {
        return false;
    }
    let above_high_water = value > k.high_water;
    let drawn_ms = i64::try_from(value / 1000).unwrap_or(i64::MAX);
    let expiry_ms = k.now_ms.saturating_add(k.pttl);
    let kept_for_retention =
        (expiry_ms.saturating_sub(drawn_ms) - OLD_RETENTION_MS).abs() <= RETENTION_SLACK_MS;
    above_high_water || kept_for_retention
}

/// Scans `node` for 0.3's fence counters under `prefix` (`cluster`: one high-water per slot), until
/// the keyspace, [`MAX_PAGES`] or `deadline` ends. `None` when the server answered nothing.
pub(crate) fn scan(node: &Node, prefix: &str, cluster: bool, deadline: Deadline) -> Option<Seen> {
    let pattern = lease_pattern(prefix);
    let mut seen = Seen {
        keys: node
            .call("doctor", deadline, |c| redis::cmd("DBSIZE").query::<u64>(c))
            .ok(),
        ..Seen::default()
    };
    let mut cursor = 0u64;
    let mut answered = false;
    for _ in 0..MAX_PAGES {
        let page = node.call("doctor", deadline, |c| {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(PAGE)
                .query::<(u64, Vec<Vec<u8>>)>(c)
        });
        let Ok((next, names)) = page else {
            return answered.then_some(seen);
        };
        answered = true;
        let fences: Vec<(Vec<u8>, Vec<u8>)> = names
            .into_iter()
            .filter_map(|name| holder_of(prefix, &name).map(|holder| (name, holder)))
            .collect();
        if !fences.is_empty() {
            let Some(keys) = inspect(node, prefix, cluster, &fences, deadline) else {
                return Some(seen);
            };
            seen.fences += keys.len() as u64;
            seen.old += keys.iter().filter(|k| is_old(k)).count() as u64;
        }
        cursor = next;
        if cursor == 0 {
            seen.complete = true;
            break;
        }
    }
    Some(seen)
}

/// Each fence key of one page, its lease's `PTTL` and its high-water, in one round trip.
fn inspect(
    node: &Node,
    prefix: &str,
    cluster: bool,
    fences: &[(Vec<u8>, Vec<u8>)],
    deadline: Deadline,
) -> Option<Vec<FenceKey>> {
    let replies = node
        .call("doctor", deadline, |c| {
            let mut pipe = redis::pipe();
            pipe.cmd("TIME");
            for (name, holder) in fences {
                let high_water = if cluster {
                    keys::high_water_in_slot(prefix, keys::slot(name))
                } else {
                    keys::high_water(prefix)
                };
                pipe.cmd("GET")
                    .arg(name)
                    .cmd("PTTL")
                    .arg(name)
                    .cmd("PTTL")
                    .arg(holder)
                    .cmd("GET")
                    .arg(high_water);
            }
            pipe.query::<Vec<Value>>(c)
        })
        .ok()?;
    let (time, rest) = replies.split_first()?;
    let (secs, micros) = redis::from_redis_value::<(i64, i64)>(time.clone()).ok()?;
    let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
    let number = |v: &Value| {
        redis::from_redis_value::<Option<u64>>(v.clone())
            .ok()
            .flatten()
    };
    let ttl = |v: &Value| redis::from_redis_value::<i64>(v.clone()).unwrap_or(-2);
    Some(
        rest.chunks_exact(4)
            .map(|r| FenceKey {
                value: number(&r[0]),
                pttl: ttl(&r[1]),
                holder_pttl: ttl(&r[2]),
                high_water: number(&r[3]).unwrap_or(0),
                now_ms,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::Key;

    const NOW_MS: i64 = 1_800_000_000_000;

    fn key(value: u64, pttl: i64, holder_pttl: i64, high_water: u64) -> FenceKey {
        FenceKey {
            value: Some(value),
            pttl,
            holder_pttl,
            high_water,
            now_ms: NOW_MS,
        }
    }

    /// A fence drawn from the clock `ago_ms` before now.
    fn drawn(ago_ms: i64) -> u64 {
        ((NOW_MS - ago_ms) * 1000) as u64
    }

    #[test]
    fn old_counters_outlive_their_lease_and_carry_a_mark() {
        let hour = 3_600_000;
        // 0.3 released it an hour ago: kept a day from its draw, below a later high-water.
        assert!(is_old(&key(drawn(hour), 23 * hour, -2, drawn(0))));
        // 0.3 holds it now (a 30 s lease), drawn just now.
        assert!(is_old(&key(drawn(0), 24 * hour, 30_000, drawn(hour))));
        // Drawn by 0.3 above a clock that was behind it, but above the high-water.
        assert!(is_old(&key(drawn(-hour), 20 * hour, -2, drawn(10))));
        // This version's live lease: the fence key expires with the lock key.
        assert!(!is_old(&key(drawn(5), 29_995, 29_995, drawn(5))));
        // This version's force-release: the fence key outlives the lock key, but carries no mark.
        assert!(!is_old(&key(drawn(5), 29_995, -2, drawn(1))));
        // A long lease of this version, force-released: its life is not a day.
        assert!(!is_old(&key(drawn(hour), 2 * hour, -2, drawn(hour))));
        // No expiry, or not a number: not 0.3's.
        assert!(!is_old(&key(drawn(hour), -1, -2, 0)));
        assert!(!is_old(&FenceKey {
            value: None,
            ..key(0, 23 * hour, -2, 0)
        }));
    }

    #[test]
    fn fence_keys_name_their_lease() {
        for prefix in ["leasehold:", "", "a*b{"] {
            let k = Key::new(b"job:f:1").unwrap();
            let lock = keys::namespaced(prefix, b"l:", &k);
            let fence = keys::namespaced(prefix, b"f:", &k);
            assert_eq!(holder_of(prefix, &fence), Some(lock));
            let permit_fence = keys::namespaced(prefix, b"pf:", &k);
            let holders = keys::namespaced(prefix, b"ps:", &k);
            assert_eq!(holder_of(prefix, &permit_fence), Some(holders));
            for other in [&b"l:"[..], b"q:", b"rf:", b"ps:", b"r:"] {
                assert_eq!(
                    holder_of(prefix, &keys::namespaced(prefix, other, &k)),
                    None
                );
            }
        }
        assert_eq!(
            lease_pattern("a*[x]\\"),
            format!("a\\*\\[x\\]\\\\{{{}}}*", "[0-9a-f]".repeat(16))
        );
    }
}
