//! Where a lease lives in Redis: one layout for every topology (one server, a Unix socket,
//! Sentinel, Cluster, Redlock's nodes).
//!
//! Every Redis key of one lease starts with the same *base*:
//!
//! ```text
//! base = prefix ‖ "{" ‖ hex(first 8 bytes of SHA-256(prefix ‖ key)) ‖ "}"
//! ```
//!
//! and then a namespace tag and the user key:
//! - `base ‖ "l:" ‖ key`: the owner's token, with the lease's expiry;
//! - `base ‖ "f:" ‖ key`: the fence of the key's live lease (written with the lease's expiry,
//!   deleted on release; a 0.3 client's counter of the same name is still read, see the crate
//!   docs);
//! - `base ‖ "q:" ‖ key` and `base ‖ "h:" ‖ key`: the waiters' queue and their heartbeats (only
//!   while someone waits; they expire);
//! - `base ‖ "s:" ‖ token ‖ ":" ‖ key`: one waiter's wake-up list (the token has a fixed length,
//!   so the name is unambiguous; it expires);
//! - `base ‖ "rq:" ‖ key` and `base ‖ "rh:" ‖ key`: Redlock's waiter ranking on each node;
//! - `base ‖ "r:" ‖ key`: the key's record (a hash of fence, value and stamp, see `records.rs`);
//! - other kinds of lease add tags of their own through [`namespaced`].
//!
//! One key is the server's, not a lease's: the fence high-water `prefix ‖ "{fences}"`, the last
//! fence drawn on the server (see the crate docs). On a Cluster a script may touch the keys of one
//! slot only, so there is one high-water per slot, `prefix ‖ "{fences:" ‖ n ‖ "}"`, with `n` the
//! smallest number whose name hashes to the lease's slot ([`RedisKeys::in_cluster`]; the table of
//! the 16,384 numbers is found by brute force over CRC16 once per prefix, in milliseconds).
//!
//! Why: a Redis Cluster hashes a key by the text between its first `{` and the first `}` after
//! it (the *hash tag*), so every key of a lease lands in one slot and each script touches one
//! slot (no `CROSSSLOT`). The tag is a digest, never the user key itself, so a key containing `{`
//! or `}` (or any byte) cannot move its lease's keys apart, and leases spread evenly over the
//! slots. A prefix containing braces still gives one slot per lease: the text before our `}` is
//! the same for every key of the lease, so whatever tag Redis finds there is too — except a
//! prefix whose first `{` is followed at once by `}` (an empty tag makes Redis hash the whole
//! name), which [`check_prefix_for_cluster`] refuses on a Cluster.
//!
//! The digest covers the prefix too, so two prefixes never share every slot choice. The user
//! key still appears in full after the tag, so no two leases (and no two namespaces) can share a
//! name, whatever the key holds.
//!
//! Keys written by Leasehold 0.1 (`prefix ‖ "l:" ‖ key`, no tag) are not read by this layout:
//! upgrade all clients of one Redis together (leases are short-lived; fences continue from the
//! server's clock, so they keep increasing across the upgrade).

use leasehold_core::{Error, Key, Result, Token};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisKeys {
    pub lock: Vec<u8>,
    pub fence: Vec<u8>,
    pub queue: Vec<u8>,
    pub heartbeats: Vec<u8>,
    /// `base ‖ "s:"`: a signal list's name is this, the waiter's token, then
    /// [`RedisKeys::signal_suffix`].
    pub signal_prefix: Vec<u8>,
    /// `":" ‖ key`
    pub signal_suffix: Vec<u8>,
    /// The fence high-water this lease draws from: the server's ([`high_water`]), or its slot's
    /// on a Cluster ([`RedisKeys::in_cluster`]).
    pub high_water: Vec<u8>,
}

/// `prefix ‖ "{fences}"`: the fence high-water of one server (one node, or a Sentinel service).
pub fn high_water(prefix: &str) -> Vec<u8> {
    [prefix.as_bytes(), b"{fences}"].concat()
}

fn high_water_numbered(prefix: &str, n: u32) -> Vec<u8> {
    [
        prefix.as_bytes(),
        b"{fences:",
        n.to_string().as_bytes(),
        b"}",
    ]
    .concat()
}

/// The fence high-water of Cluster slot `slot`: `prefix ‖ "{fences:" ‖ n ‖ "}"` for the smallest
/// `n` whose name hashes to `slot`.
pub fn high_water_in_slot(prefix: &str, slot: u16) -> Vec<u8> {
    static TABLES: LazyLock<Mutex<HashMap<String, Arc<Vec<u32>>>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let table = {
        let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            tables
                .entry(prefix.to_owned())
                .or_insert_with(|| Arc::new(slot_numbers(prefix))),
        )
    };
    // A slot no number reaches can only be one no lease of this prefix is in (a prefix with a
    // tag of its own puts every name in the same slot, which number 0 reaches).
    let n = table[usize::from(slot % 16384)];
    high_water_numbered(prefix, if n == u32::MAX { 0 } else { n })
}

/// For each slot, the smallest `n` whose numbered high-water name hashes there (`u32::MAX`: none
/// below the search's end). About 170,000 names cover all 16,384 slots.
fn slot_numbers(prefix: &str) -> Vec<u32> {
    let mut table = vec![u32::MAX; 16384];
    let mut left = table.len();
    for n in 0..(1u32 << 22) {
        // 65,536 names all in one slot: the prefix has a tag of its own, and that slot is all.
        if n == 1 << 16 && left == table.len() - 1 {
            break;
        }
        let s = usize::from(slot(&high_water_numbered(prefix, n)));
        if table[s] == u32::MAX {
            table[s] = n;
            left -= 1;
            if left == 0 {
                break;
            }
        }
    }
    table
}

/// `prefix ‖ "{" ‖ 16 hex digits ‖ "}"`: what every Redis key of the lease of `key` starts with.
pub fn base(prefix: &str, key: &Key) -> Vec<u8> {
    let mut digest = Sha256::new();
    digest.update(prefix.as_bytes());
    digest.update(key.as_bytes());
    let digest = digest.finalize();
    let mut out = Vec::with_capacity(prefix.len() + 18 + 4 + key.as_bytes().len());
    out.extend_from_slice(prefix.as_bytes());
    out.push(b'{');
    out.extend_from_slice(hex::encode(&digest[..8]).as_bytes());
    out.push(b'}');
    out
}

/// `base ‖ tag ‖ key`: the name of one of a lease's Redis keys (`tag` names the namespace, such
/// as `l:`; give each kind of key a tag of its own, ending in `:`).
pub fn namespaced(prefix: &str, tag: &[u8], key: &Key) -> Vec<u8> {
    with_base(base(prefix, key), tag, key)
}

fn with_base(mut out: Vec<u8>, tag: &[u8], key: &Key) -> Vec<u8> {
    out.extend_from_slice(tag);
    out.extend_from_slice(key.as_bytes());
    out
}

impl RedisKeys {
    pub fn new(prefix: &str, key: &Key) -> Self {
        let base = base(prefix, key);
        let make = |tag: &[u8]| with_base(base.clone(), tag, key);
        let mut signal_prefix = base.clone();
        signal_prefix.extend_from_slice(b"s:");
        let mut signal_suffix = b":".to_vec();
        signal_suffix.extend_from_slice(key.as_bytes());
        RedisKeys {
            lock: make(b"l:"),
            fence: make(b"f:"),
            queue: make(b"q:"),
            heartbeats: make(b"h:"),
            signal_prefix,
            signal_suffix,
            high_water: high_water(prefix),
        }
    }

    /// The same keys on a Cluster: the high-water is the lease's slot's.
    pub fn in_cluster(mut self, prefix: &str) -> Self {
        self.high_water = high_water_in_slot(prefix, self.slot());
        self
    }

    /// The wake-up list of the waiter holding `token`.
    pub fn signal(&self, token: &Token) -> Vec<u8> {
        let mut out = self.signal_prefix.clone();
        out.extend_from_slice(token.as_str().as_bytes());
        out.extend_from_slice(&self.signal_suffix);
        out
    }

    /// The Cluster hash slot all of this lease's keys live in.
    pub fn slot(&self) -> u16 {
        slot(&self.lock)
    }
}

/// Refuses a prefix that would split a lease over several Cluster slots: one whose first `{` is
/// directly followed by `}` (Redis then hashes each whole name, and the names differ).
pub fn check_prefix_for_cluster(prefix: &str) -> Result<()> {
    match prefix.find('{') {
        Some(open) if prefix.as_bytes().get(open + 1) == Some(&b'}') => {
            Err(Error::invalid(format!(
                "prefix {:?} contains `{{}}` before any other brace: on a Redis Cluster its keys \
                 would not share a slot; drop the empty braces",
                prefix
            )))
        }
        _ => Ok(()),
    }
}

/// The Redis Cluster hash slot of a key name: CRC16 (XMODEM) of its hash tag (or of the whole
/// name when it has no non-empty tag), modulo 16384.
pub fn slot(name: &[u8]) -> u16 {
    let hashed = name
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &name[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(name);
    crc16(hashed) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(keys: &RedisKeys) -> Vec<Vec<u8>> {
        let token = Token::from_bytes([0xab; 16]);
        vec![
            keys.lock.clone(),
            keys.fence.clone(),
            keys.queue.clone(),
            keys.heartbeats.clone(),
            keys.signal(&token),
        ]
    }

    #[test]
    fn namespaces_never_overlap() {
        let a = RedisKeys::new("p:", &Key::new(b"x").unwrap());
        let base = base("p:", &Key::new(b"x").unwrap());
        assert_eq!(base.len(), 2 + 18);
        assert!(base.starts_with(b"p:{") && base.ends_with(b"}"));
        assert_eq!(a.lock, [&base[..], b"l:x"].concat());
        assert_eq!(a.fence, [&base[..], b"f:x"].concat());
        assert_eq!(a.queue, [&base[..], b"q:x"].concat());
        assert_eq!(a.heartbeats, [&base[..], b"h:x"].concat());
        let token = Token::from_bytes([0xab; 16]);
        assert_eq!(
            a.signal(&token),
            [&base[..], b"s:abababababababababababababababab:x"].concat()
        );
        assert_eq!(namespaced("p:", b"l:", &Key::new(b"x").unwrap()), a.lock);
        // A user key that spells out another key's auxiliary name still lands in the lock
        // namespace, under a base of its own.
        let b = RedisKeys::new("p:", &Key::new(b"f:x").unwrap());
        assert!(b.lock.ends_with(b"l:f:x"));
        assert_ne!(b.lock, a.fence);
        let binary = RedisKeys::new("", &Key::new(b"\0\xff").unwrap());
        assert!(binary.lock.starts_with(b"{") && binary.lock.ends_with(b"}l:\0\xff"));
    }

    #[test]
    fn slots_match_redis() {
        // Known values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(
            slot(b"foo{}{bar}"),
            slot(b"bar"),
            "an empty tag hashes the whole name"
        );
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn every_key_of_a_lease_shares_one_slot_whatever_the_key_or_prefix() {
        let keys: [&[u8]; 7] = [b"x", b"{", b"}", b"{a}", b"}{", b"\0{\xff}", b"{}"];
        let prefixes = ["", "leasehold:", "a{", "a}", "{b}", "a{b", "}{", "x}{y"];
        for prefix in prefixes {
            check_prefix_for_cluster(prefix).unwrap();
            for key in keys {
                let key = Key::new(key).unwrap();
                let names = all(&RedisKeys::new(prefix, &key));
                let first = slot(&names[0]);
                for name in &names {
                    assert_eq!(slot(name), first, "prefix {prefix:?} key {key:?}");
                }
                assert_eq!(slot(&namespaced(prefix, b"w:", &key)), first);
            }
        }
        // The one prefix that cannot work is refused.
        assert!(check_prefix_for_cluster("a{}b").is_err());
        assert!(check_prefix_for_cluster("{}").is_err());
        assert!(check_prefix_for_cluster("a}{}").is_err());
        check_prefix_for_cluster("a}{x}{}").unwrap();
    }

    #[test]
    fn every_slot_has_a_high_water_of_its_own() {
        for prefix in ["leasehold:", ""] {
            let table = slot_numbers(prefix);
            assert!(table.iter().all(|&n| n != u32::MAX), "prefix {prefix:?}");
        }
        for prefix in ["leasehold:", "a{b", "{x}", "a}{"] {
            for key in [&b"x"[..], b"y", b"{", b"\0\xff"] {
                let keys = RedisKeys::new(prefix, &Key::new(key).unwrap()).in_cluster(prefix);
                assert_eq!(slot(&keys.high_water), keys.slot(), "prefix {prefix:?}");
                assert!(keys.high_water.starts_with(prefix.as_bytes()));
            }
        }
        assert_eq!(high_water("p:"), b"p:{fences}");
    }

    #[test]
    fn leases_spread_over_the_slots() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            let key = Key::new(format!("k{i}").as_bytes()).unwrap();
            seen.insert(RedisKeys::new("leasehold:", &key).slot());
        }
        assert!(
            seen.len() > 950,
            "{} distinct slots of 1000 keys",
            seen.len()
        );
    }
}
