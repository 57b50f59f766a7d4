//! Key → lock id. Part of the public contract forever (PEERS.md on php-lock #64): changing it would let
//! two versions of Leasehold hold the same key at once during an upgrade.

use sha2::{Digest, Sha256};

/// The advisory lock id of a key: the first 8 bytes of SHA-256 over the prefixed key (`prefix ‖ key`,
/// raw bytes), read as a big-endian two's-complement `i64`. In SQL (PostgreSQL 11+):
///
/// ```sql
/// SELECT ('x' || encode(substring(sha256(convert_to('leasehold:' || 'report:2026-11-29', 'UTF8'))
///                                 FROM 1 FOR 8), 'hex'))::bit(64)::bigint;
/// ```
pub fn lock_id(prefixed_key: &[u8]) -> i64 {
    let digest = Sha256::digest(prefixed_key);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// Where table-mode waiters for one key meet: the id of the advisory lock that orders them (so only
/// the first waiter listens, and one release wakes one waiter) and the channel a release notifies.
/// Internal, not part of the contract; domain-separated so it never equals any key's [`lock_id`].
pub(crate) fn wait_queue(table: &str, prefixed_key: &[u8]) -> (i64, String) {
    let mut h = Sha256::new();
    h.update(b"leasehold table-mode wait queue\0");
    h.update(table.as_bytes());
    h.update(b"\0");
    h.update(prefixed_key);
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let channel = format!("leasehold_{}", hex(&digest[..12]));
    (i64::from_be_bytes(first), channel)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_never_change() {
        // SHA-256("abc") = ba7816bf8f01cfea…; these values are the contract.
        assert_eq!(
            lock_id(b"abc"),
            i64::from_be_bytes(*b"\xba\x78\x16\xbf\x8f\x01\xcf\xea")
        );
        assert_eq!(lock_id(b"abc"), -5010229573455851542);
        assert_ne!(lock_id(b"leasehold:a"), lock_id(b"leasehold:b"));
        let (q, ch) = wait_queue("leasehold_locks", b"leasehold:a");
        assert_ne!(q, lock_id(b"leasehold:a"));
        assert!(ch.len() < 63 && ch.starts_with("leasehold_"));
    }
}
