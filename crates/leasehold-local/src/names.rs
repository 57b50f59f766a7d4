//! Keys (any bytes, up to 1024 plus the prefix) to record file names that are safe on any POSIX file
//! system: `k-<readable>-<sha256 hex>.lock` for locks (exclusive and shared), `s-…` for semaphores,
//! so a lock and a semaphore of the same key never share a record. The readable part is only for
//! people listing the directory; the SHA-256 of the whole prefixed key is what makes names distinct.

use sha2::{Digest, Sha256};

/// At most this many bytes of the key show in the name, so names stay far below `NAME_MAX` (255).
const READABLE: usize = 40;

/// Record files start with one of these; everything else in the directory is ours too but never a
/// record.
pub(crate) const RECORD_PREFIX: &str = "k-";
pub(crate) const SEMAPHORE_PREFIX: &str = "s-";
pub(crate) const RECORD_SUFFIX: &str = ".lock";

/// The record file name for a key. `key` gives the readable part (the prefix would repeat in every
/// name), `prefixed` (prefix + key, as stored) the hash.
/// `start` is [`RECORD_PREFIX`] or [`SEMAPHORE_PREFIX`].
pub(crate) fn record_file_name(start: &str, key: &[u8], prefixed: &[u8]) -> String {
    let digest = Sha256::digest(prefixed);
    let mut name = String::with_capacity(start.len() + READABLE + 1 + 64 + RECORD_SUFFIX.len());
    name.push_str(start);
    // Only bytes that are harmless everywhere (no '/', NUL, control characters, shell or glob
    // characters); the fixed `k-`/`s-` start keeps the name from ever being `.` or `..` or hidden.
    name.extend(key.iter().take(READABLE).map(|&b| {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.' {
            b as char
        } else {
            '_'
        }
    }));
    name.push('-');
    name.push_str(&hex::encode(digest));
    name.push_str(RECORD_SUFFIX);
    name
}

pub(crate) fn is_record_file_name(name: &str) -> bool {
    (name.starts_with(RECORD_PREFIX) || name.starts_with(SEMAPHORE_PREFIX))
        && name.ends_with(RECORD_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn safe(name: &str) {
        assert!(name.len() <= 255, "{name}");
        assert!(name.is_ascii());
        assert!(!name.contains('/') && !name.contains('\0'));
        assert!(name != "." && name != ".." && !name.starts_with('.'));
        assert!(is_record_file_name(name));
    }

    #[test]
    fn odd_keys_give_safe_distinct_names() {
        let long = vec![b'/'; 1024];
        let keys: Vec<&[u8]> = vec![
            b"a",
            b"..",
            b".",
            b"/",
            b"a/../../etc/passwd",
            b"\0",
            b"\0\0",
            b"\xff\xfe",
            &long,
            b"A",
            b"a ",
        ];
        let mut names = std::collections::HashSet::new();
        for k in &keys {
            let mut prefixed = b"leasehold:".to_vec();
            prefixed.extend_from_slice(k);
            for start in [RECORD_PREFIX, SEMAPHORE_PREFIX] {
                let name = record_file_name(start, k, &prefixed);
                safe(&name);
                assert!(names.insert(name));
            }
        }
        let k = RECORD_PREFIX;
        assert_eq!(
            record_file_name(k, b"x", b"p:x"),
            record_file_name(k, b"x", b"p:x")
        );
        assert_ne!(
            record_file_name(k, b"x", b"p:x"),
            record_file_name(k, b"x", b"q:x")
        );
    }
}
