//! Validated lock keys.

use crate::error::{Error, Result};
use std::fmt;

/// The longest key the contract accepts, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// A lock key: 1 to [`MAX_KEY_LEN`] arbitrary bytes (NUL, non-UTF-8 and glob characters included).
/// Backends only ever see keys that passed this check.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Vec<u8>);

impl Key {
    pub fn new(bytes: impl AsRef<[u8]>) -> Result<Self> {
        let bytes = bytes.as_ref();
        if bytes.is_empty() {
            return Err(Error::invalid("key is empty (a key is 1 to 1024 bytes)"));
        }
        if bytes.len() > MAX_KEY_LEN {
            return Err(Error::invalid(format!(
                "key is {} bytes long (a key is 1 to {MAX_KEY_LEN} bytes)",
                bytes.len()
            )));
        }
        Ok(Key(bytes.to_vec()))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The key with `prefix` in front, as backends store it.
    pub fn prefixed(&self, prefix: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(prefix.len() + self.0.len());
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(&self.0);
        out
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Shows the key as text with non-printable bytes escaped, and cut after 64 bytes, so a log line stays
/// readable whatever the key holds.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 64;
        let shown = &self.0[..self.0.len().min(SHOWN)];
        write!(f, "{}", shown.escape_ascii())?;
        if self.0.len() > SHOWN {
            write!(f, "…({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert!(Key::new(b"").is_err());
        assert!(Key::new([0u8]).is_ok());
        assert!(Key::new(vec![b'x'; MAX_KEY_LEN]).is_ok());
        let err = Key::new(vec![b'x'; MAX_KEY_LEN + 1]).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        assert!(Key::new(vec![0xffu8; 1 << 20]).is_err());
    }

    #[test]
    fn display_escapes_and_truncates() {
        let k = Key::new(b"a\0\xff\"").unwrap();
        assert_eq!(k.to_string(), "a\\x00\\xff\\\"");
        let long = Key::new(vec![b'k'; 100]).unwrap();
        assert!(long.to_string().ends_with("…(100 bytes)"));
    }
}
