//! What an SQL backend's every acquire of a key takes, in one value: built once by the backend's
//! dispatch and handed to its modes' acquire methods, so their parameter lists stay short.

use crate::key::Key;
use crate::ttl::Ttl;

/// One acquire's key (as given and prefixed) and TTL.
pub struct Ask<'a> {
    pub key: &'a Key,
    /// `prefix ‖ key`, the bytes every lock id, name, row key and queue is derived from.
    pub prefixed: Vec<u8>,
    pub ttl: Ttl,
}

impl<'a> Ask<'a> {
    /// The acquire of `key` for `ttl` by a backend whose keys go under `prefix`.
    pub fn new(key: &'a Key, prefix: &str, ttl: Ttl) -> Ask<'a> {
        Ask {
            key,
            prefixed: key.prefixed(prefix),
            ttl,
        }
    }
}
