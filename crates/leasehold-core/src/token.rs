//! Owner tokens: 128 bits from the operating system's CSPRNG, shown as 32 lowercase hex characters.

use crate::error::{Error, Result};
use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; 32]);

impl Token {
    /// A fresh token. Fails (rather than falling back to a weak generator) if the OS has no randomness.
    pub fn generate() -> Result<Self> {
        let mut raw = [0u8; 16];
        getrandom::fill(&mut raw)
            .map_err(|e| Error::Internal(format!("no randomness from the OS: {e}")))?;
        Ok(Self::from_bytes(raw))
    }

    pub fn from_bytes(raw: [u8; 16]) -> Self {
        let mut out = [0u8; 32];
        // Cannot fail: the output is exactly twice the input's length.
        let _ = hex::encode_to_slice(raw, &mut out);
        Token(out)
    }

    /// Parses a token as stored by a backend; `None` unless it is 32 lowercase hex characters.
    pub fn parse(text: &[u8]) -> Option<Self> {
        let hex: [u8; 32] = text.try_into().ok()?;
        hex.iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
            .then_some(Token(hex))
    }

    pub fn as_str(&self) -> &str {
        // Only lowercase hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_uniqueness() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(Token::parse(a.as_str().as_bytes()).is_some());
        assert!(Token::parse(b"ABCDEF0123456789abcdef0123456789").is_none());
        assert_eq!(
            Token::from_bytes([0xab; 16]).as_str(),
            "abababababababababababababababab"
        );
    }
}
