//! Key → lock id. Part of the public contract forever: changing it would let two versions of Leasehold
//! hold the same key at once during an upgrade (a PHP lock library that changed its key hashing between
//! releases let old and new workers lock one resource twice while a deployment rolled).

use sha2::{Digest, Sha256};

/// The advisory lock id of a key: the first 8 bytes of SHA-256 over the prefixed key (`prefix ‖ key`,
/// raw bytes), read as a big-endian two's-complement `i64`. In SQL (PostgreSQL 11+):
///
/// ```sql
/// SELECT ('x' || encode(substring(sha256(convert_to('leasehold:' || 'report:2026-11-29', 'UTF8'))
///                                 FROM 1 FOR 8), 'hex'))::bit(64)::bigint;
/// ```
pub fn lock_id(prefixed_key: &[u8]) -> i64 {
    leading_i64(&sha256(&[prefixed_key]))
}

/// SHA-256 over `parts`, one after the other.
fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in parts {
        h.update(part);
    }
    h.finalize().into()
}

/// How every id here is read from its digest: the first 8 bytes, big-endian two's complement.
fn leading_i64(digest: &[u8; 32]) -> i64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// Where table-mode waiters for one key meet: the id of the advisory lock that orders them (so only
/// the first waiter listens, and one release wakes one waiter) and the channel a release notifies.
/// Internal, not part of the contract; domain-separated so it never equals any key's [`lock_id`].
pub(crate) fn wait_queue(table: &str, prefixed_key: &[u8]) -> (i64, String) {
    let digest = sha256(&[
        b"leasehold table-mode wait queue\0",
        table.as_bytes(),
        b"\0",
        prefixed_key,
    ]);
    (
        leading_i64(&digest),
        format!("leasehold_{}", hex(&digest[..12])),
    )
}

/// The domain of semaphore slot ids: hashed in front of the key, so a slot id never equals a lock id.
pub const SEMAPHORE_DOMAIN: &[u8] = b"leasehold semaphore\0";

/// The advisory lock id of slot `slot` (0 to permits − 1) of a semaphore (advisory mode): the first 8
/// bytes of SHA-256 over `"leasehold semaphore\0" ‖ prefix ‖ key ‖ slot` (the slot as 4 bytes,
/// big-endian), read as a big-endian `i64`. Part of the public contract like [`lock_id`]. In SQL:
///
/// ```sql
/// SELECT ('x' || encode(substring(sha256('leasehold semaphore'::bytea || '\x00'::bytea
///          || convert_to('leasehold:' || 'payments', 'UTF8') || int4send(0)) FROM 1 FOR 8), 'hex'))::bit(64)::bigint;
/// ```
pub fn semaphore_slot_id(prefixed_key: &[u8], slot: u32) -> i64 {
    leading_i64(&sha256(&[
        SEMAPHORE_DOMAIN,
        prefixed_key,
        &slot.to_be_bytes(),
    ]))
}

/// [`semaphore_slot_id`] as an SQL expression of the integer expression `slot`.
pub(crate) fn semaphore_slot_sql(prefixed_key: &[u8], slot: &str) -> String {
    format!(
        "('x' || encode(substring(sha256('\\x{}'::bytea || int4send(({slot})::int4)) FROM 1 FOR 8), \
         'hex'))::bit(64)::bigint",
        hex(&[SEMAPHORE_DOMAIN, prefixed_key].concat())
    )
}

/// An internal id and channel of a semaphore: its FIFO wait queue (advisory mode and table mode) or
/// the transaction lock that counts its permits (table mode). Domain-separated like [`wait_queue`].
pub(crate) fn semaphore_internal(what: &str, table: &str, prefixed_key: &[u8]) -> (i64, String) {
    let digest = sha256(&[
        b"leasehold semaphore ",
        what.as_bytes(),
        b"\0",
        table.as_bytes(),
        b"\0",
        prefixed_key,
    ]);
    (
        leading_i64(&digest),
        format!("leasehold_s{}", hex(&digest[..12])),
    )
}

/// The advisory lock every holder of a semaphore (advisory mode) holds in shared mode beside its
/// slot, naming the size it was granted under: the high 48 bits are the semaphore's (hashed like
/// [`semaphore_internal`]), the low 16 bits are `permits` (at most [`leasehold_core::MAX_PERMITS`],
/// which fits). So `pg_locks` shows, by `classid` and the high half of `objid`, which sizes a
/// semaphore's live holders hold, and by the low half of `objid`, each one's size.
pub(crate) fn semaphore_size_id(prefixed_key: &[u8], permits: u32) -> i64 {
    let (base, _) = semaphore_internal("size", "", prefixed_key);
    ((base as u64 & !0xffff) | u64::from(permits & 0xffff)) as i64
}

/// Lowercase hex, as SQL's `decode(…, 'hex')` reads it and channel names need it.
pub(crate) fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
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
        assert_ne!(
            semaphore_slot_id(b"leasehold:a", 0),
            lock_id(b"leasehold:a")
        );
        assert_ne!(
            semaphore_slot_id(b"leasehold:a", 0),
            semaphore_slot_id(b"leasehold:a", 1)
        );
        let (q, ch) = semaphore_internal("queue", "", b"leasehold:a");
        assert_ne!(q, semaphore_internal("count", "", b"leasehold:a").0);
        assert!(ch.len() < 63);
        assert_eq!(hex(b"\x00\xab\xff"), "00abff");
        let (three, five) = (
            semaphore_size_id(b"leasehold:a", 3),
            semaphore_size_id(b"leasehold:a", 5),
        );
        assert_eq!((three & 0xffff, five & 0xffff), (3, 5));
        assert_eq!(three >> 16, five >> 16, "one semaphore, one high part");
        assert_ne!(three >> 16, semaphore_size_id(b"leasehold:b", 3) >> 16);
        assert_eq!(
            semaphore_size_id(b"leasehold:a", leasehold_core::MAX_PERMITS) & 0xffff,
            i64::from(leasehold_core::MAX_PERMITS)
        );
    }
}
