//! What keys become on the server: named-lock names, table keys, and the SQL text pieces every
//! statement shares (literals are built here only from hashes, tokens and numbers, never from a
//! key's bytes, so no statement can be steered by a key).

use sha2::{Digest, Sha256};
use std::time::Duration;

/// The server's clock in µs since the epoch, at the statement's start. Built from
/// `UNIX_TIMESTAMP()` (no argument: independent of the session's time zone, so no hour repeats at
/// a daylight-saving change and no session setting is needed, which a statement pooler might not
/// carry) and the microseconds of `NOW(6)` (the same instant: both are the statement's start).
pub(crate) const NOW_US: &str = "(UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6)))";

/// How many bytes of SHA-256 a named lock keeps: 160 bits, so names never collide in practice.
const NAME_BYTES: usize = 20;

/// The `GET_LOCK` name of a key: `lh:` and the first 20 bytes of SHA-256 over `prefix ‖ key` in
/// hex (43 characters, within MySQL's 64). The prefix is inside the hash, so a long prefix never
/// makes a name too long and two prefixes never share a name by truncation. A SQL job takes the
/// same lock with
/// `GET_LOCK(CONCAT('lh:', LEFT(SHA2(CONCAT('leasehold:', 'report'), 256), 40)), 10)`.
pub fn lock_name(prefixed: &[u8]) -> String {
    format!(
        "lh:{}",
        hex::encode(&Sha256::digest(prefixed)[..NAME_BYTES])
    )
}

/// The name of a semaphore (its fence row) in named mode: a domain of its own, so never a lock's.
pub(crate) fn semaphore_name(prefixed: &[u8]) -> String {
    format!(
        "lhs:{}",
        hex::encode(&semaphore_digest(prefixed)[..NAME_BYTES])
    )
}

/// The name of slot `slot` of a semaphore: `<semaphore name>:<slot>`, all slots under one prefix
/// so one range scan finds them.
pub(crate) fn slot_name(semaphore: &str, slot: u32) -> String {
    format!("{semaphore}:{slot}")
}

fn semaphore_digest(prefixed: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"leasehold semaphore\0");
    h.update(prefixed);
    h.finalize().into()
}

/// The table-mode row key of a lock: SHA-256 of `prefix ‖ key` (keys may be 1 KiB of any bytes,
/// more than an index should carry).
pub(crate) fn row_key(prefixed: &[u8]) -> String {
    hex_literal(&Sha256::digest(prefixed))
}

/// The table-mode row key of a semaphore, in a domain of its own.
pub(crate) fn semaphore_row_key(prefixed: &[u8]) -> String {
    hex_literal(&semaphore_digest(prefixed))
}

pub(crate) fn hex_literal(bytes: &[u8]) -> String {
    format!("X'{}'", hex::encode(bytes))
}

/// A token (32 lowercase hex characters) as a `BINARY(16)` literal.
pub(crate) fn token_literal(token: &leasehold_core::Token) -> String {
    format!("X'{}'", token.as_str())
}

/// A name made by this module (ASCII letters, digits and `:`), quoted.
pub(crate) fn quoted(name: &str) -> String {
    format!("'{name}'")
}

/// A duration in whole µs, for arithmetic with [`NOW_US`].
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 4)
}

/// A table name checked by core's parser (identifiers, optionally `schema.name`), quoted with
/// backticks, with `suffix` appended to the table part.
pub(crate) fn table_ident(name: &str, suffix: &str) -> String {
    match name.split_once('.') {
        Some((schema, table)) => format!("`{schema}`.`{table}{suffix}`"),
        None => format!("`{name}{suffix}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_differ() {
        let a = lock_name(b"leasehold:report");
        assert_eq!(a.len(), 43);
        assert!(a.starts_with("lh:"));
        assert_ne!(a, lock_name(b"leasehold:reporT"));
        let long = vec![b'p'; 5000];
        assert_eq!(lock_name(&long).len(), 43);
        let s = semaphore_name(b"leasehold:report");
        assert!(slot_name(&s, 65_534).len() <= 64);
        assert_ne!(&s[4..], &a[3..]);
        assert_eq!(table_ident("db.locks", "_shares"), "`db`.`locks_shares`");
    }
}
