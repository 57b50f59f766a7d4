//! Where a lease lives in Redis. Each user key maps to Redis keys in separate namespaces under the
//! configured prefix, so no user key can ever name another key's auxiliary data:
//! - `{prefix}l:{key}`: the owner's token, with the lease's expiry;
//! - `{prefix}f:{key}`: the fence counter (kept forever, so fences keep increasing across
//!   releases);
//! - `{prefix}q:{key}` and `{prefix}h:{key}`: the waiters' queue and their heartbeats (only while
//!   someone waits; they expire);
//! - `{prefix}s:{token}:{key}`: one waiter's wake-up list (the token has a fixed length, so the
//!   name is unambiguous; it expires);
//! - `{prefix}rq:{key}` and `{prefix}rh:{key}`: Redlock's waiter ranking on each node.

use leasehold_core::{Key, Token};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisKeys {
    pub lock: Vec<u8>,
    pub fence: Vec<u8>,
    pub queue: Vec<u8>,
    pub heartbeats: Vec<u8>,
    /// `{prefix}s:`: a signal list's name is this, the waiter's token, then
    /// [`RedisKeys::signal_suffix`].
    pub signal_prefix: Vec<u8>,
    /// `:{key}`
    pub signal_suffix: Vec<u8>,
}

/// `{prefix}{tag}{key}`: the name of one of a key's Redis keys.
pub fn namespaced(prefix: &str, tag: &[u8], key: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + tag.len() + key.as_bytes().len());
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(tag);
    out.extend_from_slice(key.as_bytes());
    out
}

impl RedisKeys {
    pub fn new(prefix: &str, key: &Key) -> Self {
        let make = |tag: &[u8]| namespaced(prefix, tag, key);
        let mut signal_prefix = prefix.as_bytes().to_vec();
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
        }
    }

    /// The wake-up list of the waiter holding `token`.
    pub fn signal(&self, token: &Token) -> Vec<u8> {
        let mut out = self.signal_prefix.clone();
        out.extend_from_slice(token.as_str().as_bytes());
        out.extend_from_slice(&self.signal_suffix);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_never_overlap() {
        let a = RedisKeys::new("p:", &Key::new(b"x").unwrap());
        assert_eq!(a.lock, b"p:l:x");
        assert_eq!(a.fence, b"p:f:x");
        assert_eq!(a.queue, b"p:q:x");
        assert_eq!(a.heartbeats, b"p:h:x");
        let token = Token::from_bytes([0xab; 16]);
        assert_eq!(a.signal(&token), b"p:s:abababababababababababababababab:x");
        // A user key that spells out another key's auxiliary name still lands in the lock
        // namespace.
        let b = RedisKeys::new("p:", &Key::new(b"f:x").unwrap());
        assert_eq!(b.lock, b"p:l:f:x");
        assert_ne!(b.lock, a.fence);
        let binary = RedisKeys::new("", &Key::new(b"\0\xff").unwrap());
        assert_eq!(binary.lock, b"l:\0\xff");
    }
}
