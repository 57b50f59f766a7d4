//! What every acquire of a key takes, in one value.

use crate::session::Pools;
use leasehold_core::{Key, Ttl};

/// The pools, the key (as given and prefixed) and the TTL of one acquire: built once by the
/// dispatch in lib.rs and handed to each mode's acquire methods, so their parameter lists stay short.
pub(crate) struct Ask<'a> {
    pub pools: &'a Pools,
    pub key: &'a Key,
    /// `prefix ‖ key`, the bytes every lock id, row key and queue is derived from.
    pub prefixed: Vec<u8>,
    pub ttl: Ttl,
}
